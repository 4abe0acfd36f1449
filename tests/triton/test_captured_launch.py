"""tileprobe.triton.captured: check-configs and export triton-configs form vLLM's fused_moe_kernel launch with the
release's own launcher (fused_experts_impl from the wheel, the entry as the override config, under the audit's
capture). Proven here, once each, with real Triton compiles and random draws per run:
- on vLLM 0.33.0 (whose manifest records tileprobe's re-typed launch as checked, so the commands keep it for speed)
  the re-typed launch binds exactly what the engine's own launch binds;
- on vLLM 0.34.0 (its fused_moe_kernel gained b_desc, a_desc, USE_TMA_A/B, C_IS_SORTED) the captured launch's bytes
  equal Triton's own compile of the engine's own kernel object on the arguments the launcher really passes, and the
  path it says (TMA on capability 9.0 fp8 [128, 128] blocks, pointer on sm_120) is the one the launch took;
- check-configs (the library function behind it) answers a shipped 0.34.0 config file with bytes."""

from __future__ import annotations

import ast
import sys
import zipfile

import pytest
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import JITFunction, create_function_from_signature

from tileprobe.audit import capture
from tileprobe.audit.entries import vllm_moe
from tileprobe.audit.jobs import int_class
from tileprobe.backends.triton.compile import compile_job
from tileprobe.engines import locate
from tileprobe.engines import triton_configs as tc
from tileprobe.engines import triton_lookup
from tileprobe.engines import vllm as vllm_engine
from tileprobe.families import triton_moe as tm
from tileprobe.targets import profile
from tileprobe.triton import audit as triton_audit
from tileprobe.triton import captured
from tileprobe.triton.sweep import kernel_source

pytestmark = pytest.mark.triton

SMALL = (16, 32, 64)


def _src(version: str) -> tc.EngineSource:
    found = [p.wheel for p in locate.releases("vllm") if p.wheel is not None and p.version == version]
    if not found:
        pytest.skip(f"no cached vllm {version} wheel")
    return tc.find_engine("vllm", found[0])


def _entry(rng) -> dict:
    return {"BLOCK_SIZE_M": rng.choice(SMALL), "BLOCK_SIZE_N": rng.choice([32, 64, 128]),
            "BLOCK_SIZE_K": rng.choice([32, 64, 128]), "GROUP_SIZE_M": rng.choice([1, 8, 16]),
            "num_warps": rng.choice([4, 8]), "num_stages": rng.choice([2, 3, 4])}


def _params(source) -> tuple[list[str], set[str]]:
    """The kernel's parameters, in order, and those it takes as tl.constexpr."""
    fn = next(n for n in ast.parse(source.text).body if isinstance(n, ast.FunctionDef) and n.name == source.function)
    return [a.arg for a in fn.args.args], {a.arg for a in fn.args.args
                                           if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)}


def test_the_retyped_launch_binds_what_vllm_0_33_0s_own_launcher_binds(rng, tmp_path):
    """The re-typed path the commands keep where the manifest records it checked (0.33.0): for random layers, M,
    entries, capabilities and expert parallelism, every parameter is bound to what the engine's launch binds (ints
    by Triton's specialisation class, as the compile sees them), both GEMMs, but one: gate_up's topk_weights_ptr,
    which fused_experts_impl passes and TritonExperts.apply (the modular path the re-typed launch follows) passes as
    None, both with MUL_ROUTED_WEIGHT False (never read); one such pair is compiled and has the same bytes."""
    src = _src("0.33.0")
    assert captured.retyped(src) and not captured.retyped(_src("0.34.0"))
    source = kernel_source(src)
    names, consts = _params(source)
    cases = []
    for _ in range(6):
        quant, cc, ep = rng.choice(tm.QUANTS), rng.choice([120, 90, 100, 89]), rng.choice([1, 1, 2])
        hidden, inter = 128 * rng.randint(4, 24), 128 * rng.randint(2, 12)
        experts, top_k, m = rng.choice([8, 16, 64, 128]), rng.choice([1, 2, 8]), rng.choice([1, 3, 16, 200, 4096])
        entry = _entry(rng)
        for gemm in tm.GEMMS:
            n, k = tm.gemm_shape(gemm, hidden, inter)
            cases.append((cc, captured.request(quant, gemm, experts, n, k, m, top_k, entry, None, ep),
                          tm.launch_job("vllm", source, quant, gemm, experts, n, k, m, top_k, entry, cc, ep)))
    pair = None
    for cc in {c for c, _, _ in cases}:
        mine = [(r, j) for c, r, j in cases if c == cc]
        target = next(t for t in map(profile, ("rtx-pro-6000", "h200", "b200", "rtx-4090")) if t.cc_int == cc)
        for (r, retyped), got in zip(mine, captured.launches(src, source, target, cc, [r for r, _ in mine])):
            assert got.path == "pointer"
            want = dict(got.job.kwargs)
            bound = {**dict(zip(names, retyped.args)), **dict(retyped.kwargs)}
            bound = {k: v if k in consts | tm.LAUNCH_OPTIONS or type(v) is not int else int_class(v)
                     for k, v in bound.items()}
            differ = {k: (bound.get(k), want.get(k)) for k in set(bound) | set(want) if bound.get(k) != want.get(k)}
            if r.gemm == "gate_up":
                assert differ == {"topk_weights_ptr": (None, "*fp32")} and want["MUL_ROUTED_WEIGHT"] is False, differ
                pair = pair or (retyped, got.job)
            else:
                assert not differ, (r, differ)
    builds = [compile_job(j, tmp_path / "c") for j in pair]
    assert builds[0].shared == builds[1].shared, builds


def _tritons_own(src, target, layer: tuple, gemm: str, tmp_path, monkeypatch) -> int:
    """metadata.shared of the engine's own fused_moe_kernel object, compiled by Triton's own binder and
    triton.compile on the arguments vLLM's launcher really passes for `gemm` (no extract, no stand-in strings)."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    got = []
    with capture.engine_session(src, target, vllm_moe.ALLOW, vllm_moe.vllm_moe_stand_ins.STAND_INS) as s:
        impl = s.module(vllm_moe.MODULE).fused_experts_impl
        scope = sys.modules[captured.PACKAGE].get_config.__globals__

        def compile_run(fn, *args, grid, warmup, **kwargs):
            if len(got) != (0 if gemm == "gate_up" else 1):
                got.append(None)
                return
            kwargs = {"debug": False, "instrumentation_mode": "", **dict(zip(fn.arg_names, args)), **kwargs}
            gpu = GPUTarget("cuda", target.cc_int, 32)
            backend = make_backend(gpu)
            bound, spec, options = create_function_from_signature(fn.signature, fn.params, backend)(**kwargs)
            options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, spec, options)
            got.append(triton.compile(ASTSource(fn, signature, constexprs, attrs), target=gpu,
                                      options=options.__dict__).metadata.shared)

        with monkeypatch.context() as m:
            m.setattr(JITFunction, "run", compile_run)
            scope["_config"] = dict(layer[-1])
            try:
                args, kwargs = captured.layer_arguments(layer)
                impl(*args, **kwargs)
            finally:
                scope["_config"] = None
    return got[0 if gemm == "gate_up" else 1]


def test_the_captured_0_34_0_launch_is_sized_as_tritons_own_compile_and_says_its_path(rng, tmp_path, monkeypatch):
    """A random fp8-block or bf16 entry of a random layer on sm_120 or sm_90: the bytes tileprobe compiles for the
    captured launch equal Triton's own compile of vLLM 0.34.0's kernel object on the launcher's real arguments; the
    launch says TMA exactly where the engine's own test takes it (fp8 blocks on capability 9.0, B divisible by the
    tile), pointer otherwise (sm_120 always)."""
    src = _src("0.34.0")
    source = kernel_source(src)
    target = profile(rng.choice(["rtx-pro-6000", "h200"]))
    quant = rng.choice(["fp8-block", "fp8-block", "bf16"])
    hidden, inter = 128 * rng.randint(4, 16), 128 * rng.randint(2, 8)
    gemm = rng.choice(tm.GEMMS)
    entry = _entry(rng) | {"BLOCK_SIZE_K": 128} if rng.random() < 0.7 else _entry(rng)
    n, k = tm.gemm_shape(gemm, hidden, inter)
    r = captured.request(quant, gemm, rng.choice([8, 64]), n, k, rng.choice([1, 8, 64, 512]), rng.choice([2, 8]),
                         entry, None)
    got, = captured.launches(src, source, target, target.cc_int, [r])
    tma = quant == "fp8-block" and target.cc_int == 90 and n % entry["BLOCK_SIZE_N"] == 0 and k % min(
        entry["BLOCK_SIZE_K"], tm.BLOCK) == 0
    assert got.path == ("TMA" if tma else "pointer"), (r, got.said)
    assert ("tensordesc<" in str(dict(got.job.kwargs)["b_desc"])) == tma and "vllm 0.34.0" in got.said
    build = compile_job(got.job, tmp_path / "c")
    assert hasattr(build, "shared"), build
    assert build.shared == _tritons_own(src, target, r.layer(), gemm, tmp_path, monkeypatch), (r, got.said)


def test_check_configs_answers_a_shipped_vllm_0_34_0_file_with_bytes(rng, tmp_path):
    """One model shape's shipped file from vLLM 0.34.0 (random: a sized scheme, a device tileprobe knows), checked
    for the RTX PRO 6000: every entry launch answered with bytes, exit 0 or 1, never refused."""
    src = _src("0.34.0")
    by_file = {vllm_engine.device_file_name(n) for n in triton_lookup.known_device_names()}
    files = [rel for rel in src.files_under(vllm_engine.CONFIGS_DIR)
             if (nm := tc.parse_name(rel.rsplit("/", 1)[-1])) and not nm.down and nm.device_name in by_file
             and (sch := tc.scheme_of(nm)) and sch.name in tm.QUANTS and nm.E * nm.N <= 128 * 1024]
    rel = rng.choice(files)
    path = tmp_path / rel.rsplit("/", 1)[-1]
    with zipfile.ZipFile(src.origin) as z:
        path.write_bytes(z.read(rel))
    res = triton_audit.run(path, "vllm", src.origin, "rtx-pro-6000", None, 2, None, None, False, "test")
    assert res.exit_code() in (0, 1) and res.checked == 2 * len(tc.read_file(path, "vllm").entries), res.not_checked
    assert all(isinstance(r["smem_bytes"], int) for r in res.rows), rel
    assert all("vllm 0.34.0's own launch" in r["reason"] and "pointer path" in r["reason"] for r in res.rows), rel
