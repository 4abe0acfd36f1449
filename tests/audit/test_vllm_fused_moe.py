"""tileprobe.audit.entries.vllm_moe: vLLM's own fused_experts_impl, run from the wheel under the stand-in device,
launches fused_moe_kernel twice with the config its own lookup picked. Two independent readings are compared: the
config the capture records against tileprobe's emulation of the lookup (tileprobe.engines.triton_lookup, the
triton-moe family's), for the same device name and shape; and the captured launch's bytes against Triton's own
compile of the engine's own kernel object. A random MoE shape each run (a preset of tileprobe.workloads.PRESETS, or
the shape of a file the wheel ships for a device tileprobe knows, so the shipped-file branch is exercised too).
vLLM 0.34.0's TMA launch: fp8 [128, 128]-block experts on sm_90 launch with host TMA descriptors (the weights answer
device cuda, as the engine's), on sm_120 with pointers, each with Triton's own bytes; 0.33.0 (no TMA branch) captures
the same launches whether the weights answer cuda or meta."""

from __future__ import annotations

import ast
import json
from dataclasses import replace

import pytest
from _engine_own import answered, captured, tritons_own

from tileprobe.audit import capture, jobs, kernels
from tileprobe.audit.entries import vllm_moe, vllm_moe_mxfp4
from tileprobe.audit import vllm_moe_stand_ins
from tileprobe.audit.entry import empty
from tileprobe.engines import locate
from tileprobe.engines import triton_configs as tc
from tileprobe.engines import triton_lookup
from tileprobe.engines import vllm as vllm_engine
from tileprobe.models import AttentionConfig, Quantization
from tileprobe.targets import profile
from tileprobe.workloads import PRESETS, MoEModel

pytestmark = pytest.mark.triton

DECODE = kernels.KERNELS["vllm-fused-moe-decode"]
QUANT = {"bf16": None, "fp8": Quantization("fp8", None), "fp8-block": Quantization("fp8", (128, 128))}
COMPARED = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "GROUP_SIZE_M", "num_warps", "num_stages")


def _model(moe: MoEModel, scheme: str) -> AttentionConfig:
    return AttentionConfig("m", 8, 8, 128, moe=moe, quant=QUANT[scheme])


def _tp(rng, inter: int) -> int:
    return rng.choice([t for t in (1, 2, 4, 8) if inter % t == 0 and (inter // t) % 16 == 0] or [1])


def _shipped_case(src, rng):
    """A file the wheel ships for a device tileprobe knows, in a scheme this entry sizes: its device name, a model of
    its E and N (tp 1), the scheme."""
    known = triton_lookup.known_device_names()
    by_file = {vllm_engine.device_file_name(n): n for n in known}
    files = []
    for rel in src.files_under(vllm_engine.CONFIGS_DIR):
        name = tc.parse_name(rel.rsplit("/", 1)[-1])
        sch = tc.scheme_of(name) if name else None
        if sch and sch.name in QUANT and name.device_name in by_file:
            files.append((name, sch.name))
    name, scheme = rng.choice(files)
    hidden = 128 * rng.randint(8, 56)
    moe = MoEModel("shipped", hidden, name.N, name.E, rng.randint(1, min(8, name.E)), 0)
    return by_file[name.device_name], moe, scheme, 1


def _case(src, rng):
    if rng.random() < 0.5:
        return _shipped_case(src, rng)
    moe = rng.choice(list(PRESETS.values()))
    device = rng.choice(sorted(triton_lookup.known_device_names()))
    return device, moe, rng.choice(list(QUANT)), _tp(rng, moe.inter)


def _write_user_file(folder, E, N, scheme, device, rng) -> dict:
    """A random tuned file in the user's folder, as vLLM's tuner writes them (M -> config)."""
    entries = {str(m): {"BLOCK_SIZE_M": rng.choice([16, 32, 64]), "BLOCK_SIZE_N": rng.choice([32, 64, 128]),
                        "BLOCK_SIZE_K": rng.choice([64, 128]), "GROUP_SIZE_M": rng.choice([1, 8, 16]),
                        "num_warps": rng.choice([4, 8]), "num_stages": rng.choice([2, 3, 4])}
               for m in sorted(rng.sample([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], 4))}
    (folder / vllm_engine.config_file_name(E, N, tc.scheme(scheme), device)).write_text(json.dumps(entries))
    return entries


def test_the_captured_config_is_the_lookups_pick(vllm, rng, tmp_path, monkeypatch):
    """The config vLLM's own try_get_optimal_moe_config gave the captured launches (user folder, shipped file named
    after the stand-in device, or default) equals tileprobe's emulation's pick for that device name and shape; the
    branch the capture recorded says the same source."""
    device, moe, scheme, tp = _case(vllm, rng)
    user = rng.random() < 0.25
    n = moe.inter // tp
    if user:
        _write_user_file(tmp_path, moe.experts, n, scheme, device, rng)
        monkeypatch.setenv("VLLM_TUNED_CONFIG_FOLDER", str(tmp_path))
    else:
        monkeypatch.delenv("VLLM_TUNED_CONFIG_FOLDER", raising=False)
    target = replace(profile(triton_lookup.known_device_names()[device]), device_name=device)
    tokens = rng.choice([rng.randint(1, 64), rng.randint(65, 4096)])
    launches = captured(vllm, target, DECODE, _model(moe, scheme), kernels.Point(tokens, 1, tp))
    assert [la.kernel for la in launches] == ["fused_moe_kernel", "fused_moe_kernel"]
    picks = triton_lookup.picks("vllm", vllm, moe.experts, n, moe.hidden, moe.top_k, tc.scheme(scheme), target,
                                device, str(tmp_path) if user else None, max_m=max(tokens, 1))
    (pick,) = [p for p in picks if p.gemm == "gate_up" and p.m_lo <= tokens and (p.m_hi is None or tokens <= p.m_hi)]
    assert pick.source == ("user" if user else pick.source)
    for la in launches:
        got = {k: la.arg(k) for k in COMPARED}
        want = {k: pick.config.get(k, got[k] if k.startswith("num_") else None) for k in COMPARED}
        assert got == want, (device, moe, scheme, tp, tokens, pick.source, pick.path)
        # invoke_fused_moe_triton_kernel caps BLOCK_SIZE_K at the quantization block for block-wise fp8
        cap = min(QUANT[scheme].weight_block_size) if scheme == "fp8-block" else pick.config["BLOCK_SIZE_K"]
        assert la.arg("BLOCK_SIZE_K") == min(pick.config["BLOCK_SIZE_K"], cap)
        from_file = any(b.endswith(" if configs:") for b in la.branches)
        assert from_file == (pick.source in ("user", "shipped")), (pick.source, la.branches)


def test_captured_fused_moe_bytes_are_tritons_own(vllm, rng, tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_TUNED_CONFIG_FOLDER", raising=False)
    device, moe, scheme, tp = _case(vllm, rng)
    target = replace(profile(rng.choice(["rtx-pro-6000", "h200"])), device_name=device)
    model = _model(moe, scheme)
    pt = kernels.Point(rng.choice([rng.randint(1, 32), rng.randint(33, 2048)]), 1, tp)
    launches = captured(vllm, target, DECODE, model, pt)
    ours = [answered(jobs.job_of(vllm, la, target.cc_int)) for la in launches]
    own = [b for _, _, b in tritons_own(vllm, target, DECODE, model, pt, tmp_path, monkeypatch)]
    assert ours == own, (device, moe, scheme, tp)


def test_the_launch_is_sized_by_the_model_and_the_token_count(vllm, rng):
    moe = rng.choice(list(PRESETS.values()))
    scheme = rng.choice(list(QUANT))
    tp = _tp(rng, moe.inter)
    pt = kernels.Point(rng.randint(1, 64), rng.randint(2, 512), tp)
    for entry, tokens in ((DECODE, pt.batch), (kernels.KERNELS["vllm-fused-moe-prefill"], pt.batch * pt.seq_len)):
        up, down = captured(vllm, profile("rtx-pro-6000"), entry, _model(moe, scheme), pt)
        assert (up.arg("N"), up.arg("K")) == (2 * moe.inter // tp, moe.hidden)
        assert (down.arg("N"), down.arg("K")) == (moe.hidden, moe.inter // tp)
        assert up.arg("num_valid_tokens") == tokens * moe.top_k and down.arg("top_k") == 1
        weight = dict(up.args)["b_ptr"].dtype
        assert weight == ("bf16" if scheme == "bf16" else "fp8e4nv") and up.arg("use_fp8_w8a8") == (scheme != "bf16")


def test_serves_says_why_not_without_raising(rng):
    moe = rng.choice(list(PRESETS.values()))
    assert vllm_moe.serves(AttentionConfig("m", 8, 8, 128)) is not None
    assert vllm_moe.serves(AttentionConfig("m", 8, 8, 128, moe=moe, quant=QUANT[rng.choice(list(QUANT))])) is None
    other = rng.choice([Quantization("mxfp4", None), Quantization("fp8", (64, 64)), Quantization("awq", None)])
    reason = vllm_moe.serves(AttentionConfig("m", 8, 8, 128, moe=moe, quant=other))
    assert reason and other.method in reason


SM120 = ("rtx-pro-6000", "rtx-5090", "dgx-spark-gb10")


def test_mxfp4_on_sm120_goes_to_the_backend_the_oracles_family_120_move_puts_ahead_of_triton(vllm, rng):
    """gpt-oss mxfp4 on a capability-family-120 target: the engine's own oracle (run from the wheel's text under the
    stand-in) picks a backend other than TRITON, and the Elsewhere names the oracle line whose test is the family
    check and whose body moves TRITON; the backend it names comes before TRITON in the order the oracle built."""
    entry = vllm_moe_mxfp4.ENTRY
    target = profile(rng.choice(SM120))
    model = AttentionConfig("gpt-oss", 64, 8, 64, moe=PRESETS[rng.choice(["gpt-oss-120b", "gpt-oss-20b"])],
                            quant=Quantization("mxfp4", None))
    assert entry.serves(model) is None and vllm_moe.serves(model) is not None
    with capture.engine_session(vllm, target, entry.allow, entry.stand_ins) as s:
        where = entry.chooses(s, model, kernels.Point(1, 1))
        choice = vllm_moe_mxfp4.choose_backend(vllm).choice
    assert where is not None and where.runs.startswith(choice.backend) and choice.backend != "TRITON"
    rel, line = where.line.rsplit(":", 1)
    text = vllm.read_text(rel)
    node = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.If) and n.lineno == int(line))
    assert "is_device_capability_family(120)" in ast.unparse(node.test)
    assert any("TRITON" in ast.unparse(b) and "remove" in ast.unparse(b) for b in node.body)
    assert choice.order.index(choice.backend) < choice.order.index("TRITON")


def test_mxfp4_choice_follows_the_device(vllm, rng):
    """The same oracle on other capabilities: not the family-120 move (its test is false there)."""
    entry = vllm_moe_mxfp4.ENTRY
    target = profile(rng.choice(["h200", "b200"]))
    with capture.engine_session(vllm, target, entry.allow, entry.stand_ins) as s:
        where = entry.chooses(s, None, kernels.Point(1, 1))
        m = vllm_moe_mxfp4.choose_backend(vllm)
    assert m.reorder_line is None
    assert (where is None) == (m.choice.backend == "TRITON")
    assert where is None or where.line.endswith(f":{m.choice.walk_line}")


def test_fused_moe_chooses_by_the_engines_oracle_on_sm120(vllm, rng):
    """bf16 experts on a family-120 target: the unquantized oracle's walk stops at a backend ahead of TRITON whose
    kernel class's device test (the line the Elsewhere names, read here) admits capability family 120; fp8 experts
    (per-tensor or [128, 128] blocks) stay on TRITON, the fused_moe_kernel the entry captures."""
    entry = DECODE
    target = profile(rng.choice(SM120))
    moe = rng.choice(list(PRESETS.values()))
    with capture.engine_session(vllm, target, entry.allow, entry.stand_ins) as s:
        bf16 = entry.chooses(s, _model(moe, "bf16"), kernels.Point(1, 1))
        fp8 = entry.chooses(s, _model(moe, rng.choice(["fp8", "fp8-block"])), kernels.Point(1, 1))
        order = vllm_moe.choose_backend(vllm, _model(moe, "bf16")).order
    assert fp8 is None
    assert bf16 is not None and order.index(bf16.runs.split(" ")[0]) < order.index("TRITON")
    rel, line = bf16.line.rsplit(":", 1)
    fn = next(n for n in ast.walk(ast.parse(vllm.read_text(rel))) if isinstance(n, ast.FunctionDef)
              and n.lineno == int(line))
    assert fn.name == "_supports_current_device" and "is_device_capability_family(120)" in ast.unparse(fn)


def _release(version: str) -> tc.EngineSource:
    found = [p.wheel for p in locate.releases("vllm") if p.wheel is not None and p.version == version]
    if not found:
        pytest.skip(f"no cached vllm {version} wheel")
    return tc.find_engine("vllm", found[0])


def _fp8_block_case(rng):
    """A preset MoE with fp8 [128, 128] blocks, a tp that keeps inter / tp a multiple of 128 (gate_up's N and K then
    divide every BLOCK_SIZE_N / capped BLOCK_SIZE_K: its TMA test passes on sm_90), a random token count, decode or
    prefill entry."""
    moe = rng.choice([m for m in PRESETS.values() if m.hidden % 128 == 0 and m.inter % 128 == 0])
    tp = rng.choice([t for t in (1, 2, 4, 8) if (moe.inter // t) % 128 == 0 and moe.inter % t == 0])
    entry = rng.choice([DECODE, kernels.KERNELS["vllm-fused-moe-prefill"]])
    pt = kernels.Point(rng.choice([rng.randint(1, 32), rng.randint(33, 1024)]), 1, tp)
    return _model(moe, "fp8-block"), entry, pt


def _tma_line(src) -> str:
    """file:line of invoke_fused_moe_triton_kernel's `use_tma_b = ...` in the wheel's fused_moe.py."""
    rel = vllm_moe.MODULE.replace(".", "/") + ".py"
    node = next(n for n in ast.walk(ast.parse(src.read_text(rel))) if isinstance(n, ast.Assign)
                and ast.unparse(n.targets[0]) == "use_tma_b")
    return f"{rel}:{node.lineno}"


def test_vllm_0_34_0_fp8_block_experts_launch_through_tma_on_sm90_and_pointers_on_sm120(rng, tmp_path, monkeypatch):
    """vLLM 0.34.0, a random fp8-block MoE point: the engine's oracle runs the Triton experts on h200 and on
    rtx-pro-6000; on h200 the captured fused_moe_kernel launch is the TMA one wherever the engine's own test passes
    (capability family 9.0, B's N and K divisible by the tile: always for gate_up here), b_desc a host TMA descriptor
    of the weight's tile and the `use_tma_b` line recorded as True; on rtx-pro-6000 no descriptor and the line False.
    Both targets' bytes are Triton's own compile of the engine's kernel object on the launcher's real arguments."""
    src = _release("0.34.0")
    model, entry, pt = _fp8_block_case(rng)
    monkeypatch.delenv("VLLM_TUNED_CONFIG_FOLDER", raising=False)
    line = _tma_line(src)
    for name in ("h200", "rtx-pro-6000"):
        target = profile(name)
        with capture.engine_session(src, target, entry.allow, entry.stand_ins) as s:
            assert entry.chooses(s, model, pt) is None, name  # TRITON: the launches below are what the engine runs
        launches = captured(src, target, entry, model, pt)
        assert [la.kernel for la in launches] == ["fused_moe_kernel"] * 2
        tmas = []
        for la in launches:
            bn, bk = la.arg("BLOCK_SIZE_N"), la.arg("BLOCK_SIZE_K")
            tma = target.cc_int == 90 and la.arg("N") % bn == 0 and la.arg("K") % bk == 0
            tmas.append(tma)
            assert la.arg("USE_TMA_B") is tma, (name, model.moe, pt, bn, bk)
            assert la.arg("b_desc") == (f"tensordesc<fp8e4nv[1, {bn}, {bk}]>" if tma else None), la.arg("b_desc")
            (said,) = [b for b in la.branches if b.startswith(f"{line} use_tma_b = ")]
            assert said.endswith(f"-> {tma}"), said
        assert tmas[0] == (target.cc_int == 90), (name, model.moe, pt)  # gate_up: the TMA path exactly on sm_90
        ours = [answered(jobs.job_of(src, la, target.cc_int)) for la in launches]
        own = [b for _, _, b in tritons_own(src, target, entry, model, pt, tmp_path / name, monkeypatch)]
        assert ours == own, (name, model.moe, pt, tmas)


def test_vllm_0_33_0_captures_the_same_launch_whether_the_weights_answer_cuda_or_meta(rng, monkeypatch):
    """vLLM 0.33.0 has no TMA branch: a random point (scheme, target among sm_90 / sm_100 / sm_120) captures the very
    same launches (arguments, options, grid, branches) with the weights answering device cuda as with plain meta
    weights; and it has no descriptor parameter at all."""
    src = _release("0.33.0")
    monkeypatch.delenv("VLLM_TUNED_CONFIG_FOLDER", raising=False)
    model, entry, pt = _fp8_block_case(rng)
    model = replace(model, quant=QUANT[rng.choice(list(QUANT))])
    target = profile(rng.choice(["h200", "b200", "rtx-pro-6000"]))
    on_gpu = captured(src, target, entry, model, pt)
    monkeypatch.setattr(vllm_moe_stand_ins, "expert_weight", empty)
    meta = captured(src, target, entry, model, pt)
    assert [(la.identity(), la.grid, la.branches) for la in on_gpu] == \
        [(la.identity(), la.grid, la.branches) for la in meta], (target.name, model, pt)
    assert all(la.arg("b_desc") is None and "b_desc" not in dict(la.args) for la in on_gpu)
