"""What the Triton rule tests (tests/predict/test_triton_{ssd,conv,attention,ogs}.py) share: the launches the audit
captures for a model under a target's stand-in, random variations of them, and a draw of one the rule answers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

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
from tileprobe.targets import resolve_target

ROOT = Path(__file__).resolve().parents[1]


def capture(target_name: str, plans, wheels: dict | None = None) -> list[tuple[Launch, KernelJob]]:
    """(launch, job) of every launch `tileprobe audit` captures for each (engine, model, entry names[, batches]) of
    `plans` under the target's stand-in (batch 1 unless the plan names its batches: a driven step's mixed batch has
    decodes from batch 2), from `wheels` (engine -> wheel; default the pinned release's); skips without Triton, its
    allocation pass or the engine's wheel."""
    pytest.importorskip("triton")
    if allocate.unavailable():
        pytest.skip(allocate.unavailable())
    target, _ = resolve_target(target_name)
    target = dataclasses.replace(target, device_name=gpu_name(target, None))
    out = []
    for engine, model, entries, *batches in plans:
        try:
            src = find_engine(engine, (wheels or {}).get(engine))
        except UsageError as exc:
            pytest.skip(f"no {engine} wheel: {exc}")
        m = attention_model(str(ROOT / model) if model.endswith(".json") else model)
        opts = AuditOptions(engine, m.name, target.name, batches=batches[0] if batches else (1,))
        cap = capture_all(src, target, m, [KERNELS[e] for e in entries], opts, target.cc_int)
        out += [(p.launch, p.job) for p in cap.planned]
    return out


def vary(launch: Launch, job: KernelJob, changes: dict) -> tuple[Launch, KernelJob]:
    """The launch with some arguments changed and num_warps / num_stages set (added where the launcher passed
    none), and its job with the same changes."""
    args = tuple((k, changes.get(k, v)) for k, v in launch.args)
    options = dict(launch.options) | {k: v for k, v in changes.items() if k in ("num_warps", "num_stages")}
    stand_ins = {k: f"*{v.dtype}" if isinstance(v, TensorArg) else v for k, v in changes.items()}
    return dataclasses.replace(launch, args=args, options=tuple(options.items())), with_values(job, stand_ins)


def draw(rng, captured, kernel: str, predict, changes=None):
    """(launch, job, the rule's bytes) of a `kernel` launch the rule answers: a captured one, or (with `changes`:
    rng, launch, job -> (launch, job)) a random variation of one."""
    launches = [(la, j) for la, j in captured if la.kernel == kernel]
    for _ in range(100):
        launch, job = rng.choice(launches)
        if changes is not None:
            launch, job = changes(rng, launch, job)
        try:
            return launch, job, predict(launch, job, "3.8.0")
        except CannotPredict:
            continue
    raise AssertionError(f"no {kernel} launch the rule answers in 100 draws")


def assert_tritons_bytes(launch: Launch, job: KernelJob, predicted: int, tmp_path: Path, full: bool = False) -> None:
    """Triton's own metadata.shared for the job (its allocation pass alone, or `full`: the whole compile) is the
    rule's."""
    build = compile_job(job.compiled() if full else job.sized(), tmp_path)
    assert isinstance(build, TritonBuild), build
    assert predicted == build.shared, (launch.kernel, job.cc, dict(launch.args), dict(launch.options), predicted,
                                       build.shared)
