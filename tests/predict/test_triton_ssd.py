"""The triton-ssd rules (vLLM's Mamba-2 SSD kernels) equal Triton's own shared-memory allocation where they answer.

The launches are the ones `tileprobe audit` captures for a Nemotron-H model (vLLM's own launchers under the
rtx-pro-6000 stand-in), drawn at random each run, and random variations of them (blocks, warps, stages, activation
dtype, HAS_INITSTATES, head dim / state size / chunk size) within the rules' scope; each is sized by Triton 3.8.0's own passes up to
AllocateSharedMemory, and one is compiled in full. Skipped without Triton or the vLLM wheel.
"""

from __future__ import annotations

import dataclasses

import pytest

from tileprobe.audit import mamba_rule
from tileprobe.audit.capture import Launch, TensorArg
from tileprobe.audit.kernels import KERNELS
from tileprobe.audit.nearest import with_values
from tileprobe.audit.run import AuditOptions, capture_all, gpu_name
from tileprobe.backends.triton import allocate
from tileprobe.backends.triton.compile import KernelJob, TritonBuild, compile_job
from tileprobe.engines.triton_configs import find_engine
from tileprobe.errors import UsageError
from tileprobe.models import attention_model
from tileprobe.predict import CannotPredict
from tileprobe.predict import triton_ssd
from tileprobe.targets import resolve_target

ENTRIES = ("vllm-mamba2-chunk-scan", "vllm-mamba2-chunk-scan-continued")
RULED = ("_state_passing_fwd_kernel", "_bmm_chunk_fwd_kernel", "_chunk_state_fwd_kernel", "_chunk_scan_fwd_kernel",
         "_chunk_cumsum_fwd_kernel")
DOT = RULED[1:4]


@pytest.fixture(scope="module")
def captured():
    """Every SSD launch the audit captures for nemotron-h-8b (batch 1, seq 1024) on rtx-pro-6000: (launch, job)."""
    pytest.importorskip("triton")
    try:
        src = find_engine("vllm")
    except UsageError as exc:
        pytest.skip(f"no vllm wheel: {exc}")
    if allocate.unavailable():
        pytest.skip(allocate.unavailable())
    target, _ = resolve_target("rtx-pro-6000")
    target = dataclasses.replace(target, device_name=gpu_name(target, None))
    model = attention_model("nemotron-h-8b")
    opts = AuditOptions("vllm", model.name, target.name, batches=(1,))
    cap = capture_all(src, target, model, [KERNELS[e] for e in ENTRIES], opts, target.cc_int)
    return [(p.launch, p.job) for p in cap.planned]


def _vary(launch: Launch, job: KernelJob, changes: dict) -> tuple[Launch, KernelJob]:
    """The launch with some arguments / options changed, and its compile with the same changes."""
    args = tuple((k, changes.get(k, v)) for k, v in launch.args)
    options = tuple((k, changes.get(k, v)) for k, v in launch.options)
    stand_ins = {k: f"*{v.dtype}" if isinstance(v, TensorArg) else v for k, v in changes.items()}
    return dataclasses.replace(launch, args=args, options=options), with_values(job, stand_ins)


def _random_changes(rng, launch: Launch) -> dict:
    changes = {b: rng.choice([32, 64, 128]) for b in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K")
               if launch.arg(b) is not None}
    changes |= {"num_warps": rng.choice([2, 4, 8]), "num_stages": rng.choice([1, 2, 3, 4, 5])}
    dt = rng.choice(["bf16", "fp16"])
    for ptr in ("x_ptr", "b_ptr", "a_ptr", "C_ptr"):
        a = launch.arg(ptr)
        if isinstance(a, TensorArg) and a.dtype in ("bf16", "fp16"):
            changes[ptr] = dataclasses.replace(a, dtype=dt)
    if rng.random() < 0.5:  # another model's Mamba-2 dimensions (the constexprs the launcher passes)
        dstate, chunk = rng.choice([32, 64, 128]), rng.choice([64, 128, 256])
        dims = {"hdim": rng.choice([32, 64, 128]), "dstate": dstate, "K": dstate, "BLOCK_SIZE_DSTATE": dstate,
                "chunk_size": chunk, "BLOCK_SIZE_CHUNK": chunk}
        changes |= {k: v for k, v in dims.items() if launch.arg(k) is not None}
    if launch.kernel == "_chunk_cumsum_fwd_kernel":
        changes["BLOCK_SIZE_H"] = rng.choice([2, 4, 8, 16, 32, 64])
        changes["dt_ptr"] = dataclasses.replace(launch.arg("dt_ptr"), dtype=rng.choice(["bf16", "fp16", "fp32"]))
    if launch.arg("dot_dtype"):
        changes["dot_dtype"] = "tl.bfloat16" if dt == "bf16" else "tl.float16"
    if launch.kernel == "_chunk_scan_fwd_kernel" and rng.random() < 0.5:
        init = not launch.arg("HAS_INITSTATES")
        changes["HAS_INITSTATES"] = init
        changes["initstates_ptr"] = TensorArg("fp32", (1, 1, 1, 1), (1, 1, 1, 1)) if init else None
    return changes


def _draw(rng, captured, kernel: str, vary: bool):
    """A launch of `kernel` the rule answers: a captured one, or a random variation of one."""
    launches = [(la, j) for la, j in captured if la.kernel == kernel]
    for _ in range(100):
        launch, job = rng.choice(launches)
        if vary:
            launch, job = _vary(launch, job, _random_changes(rng, launch))
        try:
            return launch, job, mamba_rule.predict(launch, job, "3.8.0")
        except CannotPredict:
            continue
    raise AssertionError(f"no {kernel} launch the rule answers in 100 draws")


@pytest.mark.triton
@pytest.mark.parametrize("kernel", RULED)
def test_rule_equals_tritons_allocation(kernel, captured, rng, tmp_path):
    for vary in (False, True):
        launch, job, predicted = _draw(rng, captured, kernel, vary)
        build = compile_job(job.sized(), tmp_path)
        assert isinstance(build, TritonBuild), build
        assert predicted == build.shared, (dict(launch.args), dict(launch.options), predicted, build.shared)


@pytest.mark.triton
def test_rule_equals_a_full_compile(captured, rng, tmp_path):
    launch, job, predicted = _draw(rng, captured, rng.choice(DOT), True)
    build = compile_job(job.compiled(), tmp_path)
    assert isinstance(build, TritonBuild), build
    assert predicted == build.shared, (dict(launch.args), dict(launch.options), predicted, build.shared)


@pytest.mark.triton
def test_out_of_scope_launches_cannot_predict(captured, rng):
    launch, job = rng.choice([(la, j) for la, j in captured if la.kernel == "_chunk_cumsum_fwd_kernel"])
    with pytest.raises(CannotPredict, match="num_warps"):
        mamba_rule.predict(*_vary(launch, job, {"num_warps": rng.choice([1, 2])}), "3.8.0")
    launch, job = rng.choice([(la, j) for la, j in captured if la.kernel in RULED[1:]])
    with pytest.raises(CannotPredict, match="sm_90"):
        mamba_rule.predict(launch, dataclasses.replace(job, cc=90), "3.8.0")
    launch, job = rng.choice([(la, j) for la, j in captured if la.kernel in DOT[:2]])
    with pytest.raises(CannotPredict, match="num_stages 1"):
        mamba_rule.predict(*_vary(launch, job, {"num_stages": 1}), "3.8.0")


def test_another_release_or_source_cannot_predict(rng):
    sha = rng.choice(list(triton_ssd.CHECKED))[1]
    kernel = rng.choice(RULED)
    p = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "num_warps": 4, "num_stages": 3}
    other = f"3.{rng.randrange(0, 8)}.{rng.randrange(0, 3)}"
    with pytest.raises(CannotPredict, match="Triton"):
        triton_ssd.predict(kernel, p, 120, other, source_sha256=sha)
    changed = sha[:-1] + ("0" if sha[-1] != "0" else "1")
    with pytest.raises(CannotPredict, match="source"):
        triton_ssd.predict(kernel, p, 120, "3.8.0", source_sha256=changed)
