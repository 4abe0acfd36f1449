"""tileprobe.audit.entries.vllm_mamba: vLLM's Mamba-2 launchers, run from the wheel through the engine's own step
(tileprobe.audit.vllm_mamba_step: the Mamba2 metadata builder's build, then MambaMixer2's own __init__ and op).
Each captured launch compiles to the bytes Triton gives the engine's own kernel object; the SSD kernels' autotune
lists are the engine decorators' (read from the source here), launch_autotuned's cached path is recorded as the
autotuner's launch; the decode kernel takes the wheel's tuned JSON for the device name; `serves` refuses a model
without Mamba-2 layers. Sizes are random per run; nothing expected is typed."""

from __future__ import annotations

import ast
import json
from dataclasses import replace

import pytest
from _engine_own import answered, captured, tritons_own

from tileprobe.audit import capture, jobs, kernels, loader, run
from tileprobe.audit.entries import vllm_mamba
from tileprobe.errors import UsageError
from tileprobe.models import AttentionConfig, SSMDims
from tileprobe.targets import DEVICE_NAMES, profile

pytestmark = pytest.mark.triton

ENTRIES = {k.name: k for k in vllm_mamba.ENTRIES}
SCAN = ENTRIES["vllm-mamba2-chunk-scan"]
CONTINUED = ENTRIES["vllm-mamba2-chunk-scan-continued"]
SSU = ENTRIES["vllm-mamba2-selective-state-update"]


def _point(entry, batch, seq_len, tp=1):
    return kernels.Point(batch, seq_len, tp, phase=entry.phases[0])


def _model(rng, **ssm) -> tuple[AttentionConfig, int]:
    groups = rng.choice([1, 2, 4, 8])
    dims = dict(heads=groups * rng.choice([2, 4, 8, 16]), head_dim=rng.choice([32, 64, 128]),
                state_size=rng.choice([16, 64, 128]), groups=groups, chunk_size=rng.choice([64, 128, 256]),
                conv_kernel=rng.choice([2, 3, 4]))
    dims.update(ssm)
    s = SSMDims(**dims)
    tp = rng.choice([t for t in (1, 2, 4) if s.heads % t == 0 and (s.groups % t == 0 or s.groups == 1)])
    model = AttentionConfig("m", 32, 8, 128, rng.choice(["bf16", "fp16"]),
                            model_type=rng.choice(["nemotron_h", "mamba2"]), ssm=s)
    return model, tp


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_captured_launches_compile_to_tritons_own_bytes(vllm, rng, tmp_path, monkeypatch, name):
    """Every kernel the launcher launches (one random autotune config each) compiles, through tileprobe's job and
    the engine's own module (tileprobe.audit.loader), to Triton's bytes for the engine's kernel object."""
    entry = ENTRIES[name]
    target = profile(rng.choice(["rtx-pro-6000", "h200"]))
    model, tp = _model(rng)
    pt = _point(entry, rng.randint(1, 4), rng.randint(1, 700), tp)
    launches = captured(vllm, target, entry, model, pt)
    picked = {}
    for kernel in dict.fromkeys(la.kernel for la in launches):
        picked[kernel] = rng.choice([la for la in launches if la.kernel == kernel])
    want = {(k, la.autotune[0] if la.autotune else None) for k, la in picked.items()}
    own = {(k, tuned): b for k, tuned, b in tritons_own(vllm, target, entry, model, pt, tmp_path, monkeypatch,
                                                        keep=lambda k, tuned: (k, tuned) in want)}
    assert set(own) == want, (name, model)
    for kernel, la in picked.items():
        job = jobs.job_of(vllm, la, target.cc_int, lambda s, x: loader.module_source(entry, s, target, x.kernel))
        assert answered(job) == own[(kernel, la.autotune[0] if la.autotune else None)], (name, kernel, model, tp)


def test_the_scan_is_sized_as_the_mixer_splits_heads_and_groups(vllm, rng):
    model, tp = _model(rng)
    pt = kernels.Point(rng.randint(1, 4), rng.randint(1, 700), tp)
    s = model.ssm
    launches = captured(vllm, profile("rtx-pro-6000"), SCAN, model, pt)
    scan = next(la for la in launches if la.kernel == "_chunk_scan_fwd_kernel")
    groups = max(s.groups, tp) // tp  # one group is replicated to tp groups (mamba_mixer2.py)
    args = dict(scan.args)
    assert args["x_ptr"].shape == (pt.batch * pt.seq_len, s.heads // tp, s.head_dim)
    assert args["C_ptr"].shape == (pt.batch * pt.seq_len, groups, s.state_size)
    assert args["chunk_size"] == s.chunk_size and args["x_ptr"].dtype == model.dtype
    # the states the scan reads are _state_passing_fwd's output, in the SSM cache's dtype (ssd_combined.py passes
    # out_dtype=state_dtype): fp32 for Nemotron-H, else the model's
    state = "fp32" if model.model_type == "nemotron_h" else model.dtype
    assert args["states_ptr"].dtype == state
    passing = next(la for la in launches if la.kernel == "_state_passing_fwd_kernel")
    assert dict(passing.args)["final_states_ptr"].dtype == state


def _decorator_configs(text: str, kernel: str) -> tuple[list[ast.Call], ast.Call]:
    """The triton.Config(...) calls of `kernel`'s @triton.autotune decorator, in order, and the decorator."""
    fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == kernel)
    deco = next(d for d in fn.decorator_list if isinstance(d, ast.Call) and ast.unparse(d.func).endswith("autotune"))
    configs = next(k.value for k in deco.keywords if k.arg == "configs")
    calls = [n for n in ast.walk(configs) if isinstance(n, ast.Call) and ast.unparse(n.func) == "triton.Config"]
    return sorted(calls, key=lambda c: (c.lineno, c.col_offset)), deco


def _literal(call: ast.Call) -> dict:
    return {**ast.literal_eval(call.args[0]), **{k.arg: ast.literal_eval(k.value) for k in call.keywords}}


def test_autotune_lists_are_the_engines_decorators(vllm, rng):
    """On rtx-pro-6000 each SSD kernel records one launch per config of its decorator, in the decorator's order,
    with the decorator's values; no decorator has prune_configs_by, so none is pruned. On h200, vLLM drops the
    configs Triton miscompiles on sm90 from _chunk_scan_fwd_kernel's list at import: fewer, each from the source."""
    model, tp = _model(rng)
    pt = kernels.Point(rng.randint(1, 4), rng.randint(1, 700), tp)
    for target in ("rtx-pro-6000", "h200"):
        launches = captured(vllm, profile(target), SCAN, model, pt)
        for kernel in dict.fromkeys(la.kernel for la in launches):
            mine = sorted((la for la in launches if la.kernel == kernel), key=lambda la: la.autotune[0])
            calls, deco = _decorator_configs(vllm.read_text(mine[0].kernel_file), kernel)
            source = [_literal(c) for c in calls]
            _, left, listed = mine[0].autotune
            assert all(k.arg != "prune_configs_by" for k in deco.keywords) and left == listed == len(mine)
            got = [{k: la.arg(k) for k in cfg} for la, cfg in zip(mine, source)]
            if target == "rtx-pro-6000" or kernel != "_chunk_scan_fwd_kernel":
                assert listed == len(source) and got == source, (target, kernel)
            else:
                assert listed < len(source), kernel
                assert all({k: la.arg(k) for k in source[0]} in source for la in mine)


def test_launch_autotuned_cached_path_is_recorded_as_the_autotuners_launch(vllm, rng):
    """launch_autotuned keeps the autotuner's pick per key and launches `kernel.fn` with it the next time: a second
    step with the same key, in the same session, still records every config, sited at the launcher's
    launch_autotuned call."""
    model, tp = _model(rng)
    first = _point(SCAN, rng.randint(1, 4), rng.randint(1, 700), tp)
    second = _point(SCAN, rng.randint(1, 4), rng.randint(1, 700), tp)
    text = vllm.read_text(SCAN.module_file.replace("ssd_combined", "triton_helpers"))
    assert "kernel.fn[grid]" in text  # the cached path this test is about
    with capture.engine_session(vllm, profile("rtx-pro-6000"), SCAN.allow, SCAN.stand_ins) as s:
        SCAN.drive(s, model, first)
        n = len(s.launches)
        SCAN.drive(s, model, second)
    one, two = s.launches[:n], s.launches[n:]
    assert [(la.kernel, la.autotune, la.call_site) for la in one] == \
        [(la.kernel, la.autotune, la.call_site) for la in two]
    for la in two:
        file, line = la.call_site.rsplit(":", 1)
        assert file == la.kernel_file and "launch_autotuned(" in vllm.read_text(file).splitlines()[int(line) - 1]


def test_a_continued_prefill_steps_over_the_builders_chunks(vllm, rng):
    """The mixed batch's prefill chunk starts seq_len tokens into its sequence: the engine's builder
    (Mamba2AttentionMetadataBuilder._build_chunk_metadata_tensors) breaks its chunks at the physical chunk boundaries
    of the whole sequence, so the scan steps over ceil(2s / c) - floor(s / c) chunks, one more than ceil(s / c) where
    s mod c is over c / 2 (as picked here); the scan reads initial states (the builder's prep_initial_states), and the
    decode rows of the batch are not in the scan (x holds the prefill chunk's s tokens)."""
    model, tp = _model(rng)
    c = model.ssm.chunk_size
    s = c * rng.randint(0, 3) + rng.randint(c // 2 + 1, c - 1)
    pt = _point(CONTINUED, rng.randint(1, 4), s, tp)
    launches = captured(vllm, profile(rng.choice(["rtx-pro-6000", "h200"])), CONTINUED, model, pt)
    chunks = -(-2 * s // c) - s // c
    assert chunks == -(-s // c) + 1
    scan = next(la for la in launches if la.kernel == "_chunk_scan_fwd_kernel")
    assert scan.arg("seq_idx_ptr").shape == (chunks,), (s, c, scan.arg("seq_idx_ptr").shape)
    assert scan.arg("cu_chunk_seqlens_ptr").shape == (chunks + 1,)
    assert scan.arg("x_ptr").shape[0] == s and scan.arg("HAS_INITSTATES") is True
    fresh = captured(vllm, profile("rtx-pro-6000"), SCAN, model, _point(SCAN, 1, s, tp))
    assert next(la for la in fresh if la.kernel == "_chunk_scan_fwd_kernel").arg("HAS_INITSTATES") is False


def test_the_decode_reads_the_builders_state_indices(vllm, rng):
    """The decode's state indices are the builder's (mamba_get_block_table_tensor of the block table: one block per
    request), (batch, 1 + num_speculative_tokens) int32, as the mixer passes them to both decode kernels."""
    model, tp = _model(rng)
    b = rng.randint(1, 40)
    for entry, name in ((SSU, "state_batch_indices_ptr"), (ENTRIES["vllm-mamba2-causal-conv1d-update"],
                                                             "conv_state_indices_ptr")):
        (launch,) = captured(vllm, profile("rtx-pro-6000"), entry, model, _point(entry, b, rng.randint(1, 700), tp))
        idx = launch.arg(name)
        assert (idx.shape, idx.dtype) == ((b, 1), "i32"), (name, idx)


def test_decode_takes_the_wheels_tuned_config_for_the_device_name(vllm, rng):
    """mamba_ssm.py reads configs/selective_state_update/<headdim,dstate,device,cache dtype>.json beside itself: the
    RTX PRO 6000 Server Edition's (fp32 state, Nemotron-H) is the one the capture launches with."""
    name = next(n for n in DEVICE_NAMES["rtx-pro-6000"] if "Server" in n)
    target = replace(profile("rtx-pro-6000"), device_name=name)
    heads = rng.choice([32, 64, 128])
    rel = (f"vllm/model_executor/layers/mamba/ops/configs/selective_state_update/headdim=64,dstate=128,"
           f"device_name={name.replace(' ', '_')},cache_dtype=float32.json")
    tuned = {int(k): v for k, v in json.loads(vllm.read_text(rel)).items() if k.isdigit()}
    key = rng.choice([k for k in tuned if k % heads == 0 and k >= heads])
    model = AttentionConfig("m", 32, 8, 128, "bf16", model_type="nemotron_h",
                            ssm=SSMDims(heads, 64, 128, rng.choice([1, 8]), 256, 4))
    (launch,) = captured(vllm, target, SSU, model, _point(SSU, key // heads, 1))
    assert (launch.arg("BLOCK_SIZE_M"), launch.arg("num_warps")) == (tuned[key]["BLOCK_SIZE_M"],
                                                                      tuned[key]["num_warps"])


def test_conv_launch_pdl_is_cudas_answer(vllm, rng):
    """causal_conv1d passes launch_pdl=current_platform.is_arch_support_pdl(), a constexpr of its kernels: CUDA's
    answer (CudaPlatformBase, read here: capability major >= the number it compares with), not the base Platform's."""
    fn = next(n for n in ast.walk(ast.parse(vllm.read_text("vllm/platforms/cuda.py")))
              if isinstance(n, ast.FunctionDef) and n.name == "is_arch_support_pdl")
    ret = next(n for n in ast.walk(fn) if isinstance(n, ast.Return) and isinstance(n.value, ast.Compare))
    floor = ast.literal_eval(ret.value.comparators[0])
    entry = ENTRIES[rng.choice(["vllm-mamba2-causal-conv1d", "vllm-mamba2-causal-conv1d-update"])]
    model, tp = _model(rng)
    for name in ("rtx-pro-6000", "rtx-4090"):
        target = profile(name)
        (launch, *_) = captured(vllm, target, entry, model, _point(entry, rng.randint(1, 4), 64, tp))
        assert launch.arg("launch_pdl") is (int(target.cc.split(".")[0]) >= floor), name


def test_serves_only_models_with_mamba2_layers(rng):
    plain = AttentionConfig("m", 32, 8, 128)
    model, _ = _model(rng)
    assert all(k.serves(plain) for k in ENTRIES.values())
    assert all(k.serves(model) is None for k in ENTRIES.values())
    assert not set(ENTRIES) & {k.name for k in run.serving("vllm", plain)}
    assert set(ENTRIES) <= {k.name for k in run.serving("vllm", model)}


def test_heads_or_groups_that_do_not_split_over_tp_are_a_usage_error(vllm, rng):
    entry = rng.choice(list(ENTRIES.values()))
    odd = AttentionConfig("m", 32, 8, 128, ssm=SSMDims(6, 64, 128, 2, 128, 4))
    with pytest.raises(UsageError, match="Mamba heads do not split"):
        captured(vllm, profile("rtx-pro-6000"), entry, odd, _point(entry, 1, 16, 4))
    with pytest.raises(UsageError, match="Mamba groups do not split"):
        captured(vllm, profile("rtx-pro-6000"), entry, replace(odd, ssm=replace(odd.ssm, heads=8, groups=2)),
                 _point(entry, 1, 16, 4))
