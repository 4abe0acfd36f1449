"""The nearest fitting variant of a launch that does not fit: the same kernel, compiled for the same target with the
same arguments, changed only in its tile sizes and pipeline stages, by this rule.

The rule. Only these may change: `num_stages`; the first of the launch's key/value-side tile constexprs that it
takes (KV_SIDE: BLOCK_N, TILE_SIZE, CBLOCK); the first of its query-side tile constexprs (QUERY_SIDE: BLOCK_M,
BLOCK_H); and, with a tile, the constexpr the engine's launcher derives from it (COMPANIONS: vLLM's BLOCK_Q =
BLOCK_M // num_queries_per_kv halves with BLOCK_M; lightning attention's NUM_CBLOCK = BLOCK // CBLOCK doubles when
CBLOCK halves, so the kernel still covers its whole block). A tile is only ever halved, never below 16
(MIN_TILE); stages only go down, to 1. Every other argument is the launch's: a constexpr that is a head dimension or
is tied to a tensor's dimension (KEPT: BLOCK_DMODEL, BLOCK_DPE, BLOCK_DV, HEAD_SIZE(_PADDED), D_FBLOCK, E_FBLOCK,
BLOCK_SIZE (vLLM's KV-cache block), lightning's BLOCK (the sequence chunk its k_decay and kv buffers are sized by),
...) never changes, and neither do num_warps or the arguments' dtypes and shapes.
The candidates are taken in order of least change: (1) num_stages down by one at a time to 1; (2) then the
key/value-side tile halved, with the launch's stages and then fewer, halved again, ...; (3) then the query-side
tile halved, with each key/value-side tile of (2) (the launch's first) and each stage count; that is, ordered by
(query-side halvings, key/value-side halvings, stages removed), lexicographically. The nearest variant is the first
candidate that Triton compiles for the target with metadata.shared within the limit; a candidate the kernel itself
rejects (a static_assert, any compile error) is not a variant and the next is tried.
An autotuned launch (capture.Launch.autotune set) is not varied: its nearest variant is the first config, in the
autotuner's own order, among the configs the engine's autotuner is left with after its pruning (the other captured
launches of the same call) that fits; the row then says how many of them fit ("the autotuner is left with N
configs; first: ...").
A launch that fits, or whose own compile fails, has no nearest variant: `nearest` returns None for it, as it does
when no candidate fits.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from tileprobe.audit.capture import Launch, TensorArg
from tileprobe.backends.triton.compile import KernelJob, TritonBuild
from tileprobe.lazy import LazyModule

_nvidia = LazyModule("triton.backends.nvidia.compiler")

QUERY_SIDE = ("BLOCK_M", "BLOCK_H")
KV_SIDE = ("BLOCK_N", "TILE_SIZE", "CBLOCK")
# tile -> (constexpr the launcher derives from it, +1: halves with it, -1: doubles when it halves)
COMPANIONS = {"BLOCK_M": (("BLOCK_Q", 1),), "CBLOCK": (("NUM_CBLOCK", -1),)}
KEPT = ("BLOCK_DMODEL", "BLOCK_DMODEL_PADDED", "BLOCK_DPE", "BLOCK_DV", "HEAD_SIZE", "HEAD_SIZE_PADDED", "D_FBLOCK",
        "E_FBLOCK", "BLOCK_SIZE", "PHYSICAL_BLOCK_SIZE", "BLOCK")
MIN_TILE = 16
STEPS = {1: "num_stages down", 2: "key/value-side tile halved", 3: "query-side tile halved"}

Compile = Callable[[KernelJob], object]  # KernelJob -> TritonBuild | TritonCompileError


@dataclass(frozen=True)
class Variant:
    """A variant of a launch that fits: what changed (name, launch's value, variant's), its compile and bytes, the
    rule's step that produced it (1, 2, 3; 0 for an autotuned launch's config), the candidates compiled to find it
    (this one included) and the seconds that took; for an autotuned launch, how many of the autotuner's configs fit
    and which of them this is."""

    changed: tuple[tuple[str, object, object], ...]
    job: KernelJob
    build: TritonBuild
    step: int
    tried: int
    seconds: float
    configs_fit: int | None = None
    config: tuple[int, int] | None = None  # (index in the autotuner's list, configs left after pruning)

    @property
    def bytes(self) -> int:
        return self.build.shared

    def change(self) -> str:
        return ", ".join(f"{k} {a} -> {b}" for k, a, b in self.changed)

    def describe(self) -> str:
        if self.config is not None:
            return (f"the autotuner is left with {self.configs_fit} configs that fit (of {self.config[1]}); first: "
                    f"config {self.config[0]} ({self.change() or 'as launched'}), {self.bytes} B")
        how = "sized (Triton's allocation)" if self.build.sized else "compiled"
        return f"{self.change()} ({STEPS[self.step]}): {self.bytes} B, the first fit of {self.tried} {how}"


def default_stages() -> int:
    """Triton's num_stages for a CUDA launch that passes none (CUDAOptions' default)."""
    return next(f.default for f in dataclasses.fields(_nvidia.CUDAOptions) if f.name == "num_stages")


def _first(launch: Launch, names: tuple[str, ...]) -> str | None:
    return next((n for n in names if isinstance(launch.arg(n), int) and not isinstance(launch.arg(n), bool)), None)


def _halved(launch: Launch, name: str | None, times: int) -> dict | None:
    """`name` (and its companions) halved `times` times, or None where a value would leave the rule (below 16, not
    a whole number)."""
    if times == 0 or name is None:
        return {} if times == 0 else None
    value = launch.arg(name)
    if value % (1 << times) or value >> times < MIN_TILE:
        return None
    out = {name: value >> times}
    for other, sign in COMPANIONS.get(name, ()):
        v = launch.arg(other)
        if not isinstance(v, int):
            continue
        if sign > 0 and v % (1 << times):
            return None
        out[other] = v >> times if sign > 0 else v << times
    return out


def candidates(launch: Launch, stages: int) -> Iterable[tuple[int, dict]]:
    """(step, changed values) in the rule's order (the module docstring), the launch itself left out."""
    q, kv = _first(launch, QUERY_SIDE), _first(launch, KV_SIDE)
    for qi in range(0, 8):
        q_change = _halved(launch, q, qi)
        if q_change is None:
            break
        for ki in range(0, 8):
            kv_change = _halved(launch, kv, ki)
            if kv_change is None:
                break
            for s in range(stages, 0, -1):
                if (qi, ki, s) == (0, 0, stages):
                    continue
                step = 3 if qi else 2 if ki else 1
                yield step, {**q_change, **kv_change, **({"num_stages": s} if s != stages else {})}


def with_values(job: KernelJob, values: dict) -> KernelJob:
    """`job` with the named kwargs set (replaced in place, or added after the others)."""
    kwargs = [(k, values.get(k, v)) for k, v in job.kwargs]
    kwargs += [(k, v) for k, v in values.items() if k not in dict(job.kwargs)]
    return dataclasses.replace(job, kwargs=tuple(kwargs))


def _fits(build, limit: int) -> bool:
    return isinstance(build, TritonBuild) and build.shared <= limit


def nearest(launch: Launch, job: KernelJob, limit: int, compile_one: Compile,
            configs: Iterable[tuple[Launch, KernelJob]] = ()) -> Variant | None:
    """The nearest variant of `launch` (compiled as `job`) within `limit` bytes, by the module's rule; None when the
    launch fits, does not compile, or no candidate fits. `compile_one(job)` gives a TritonBuild or a
    TritonCompileError (tileprobe.backends.triton.compile.compile_job, whose cache makes repeats free).
    `configs`: for an autotuned launch, (launch, job) of every launch captured in the run (the others of its
    autotune call are picked out by `same_tuning`)."""
    t0 = time.perf_counter()
    own = compile_one(job)
    if not isinstance(own, TritonBuild) or own.shared <= limit:
        return None
    if launch.autotune is not None:
        return _first_config(launch, limit, compile_one, same_tuning(launch, configs), t0)
    stages = own.num_stages or launch.arg("num_stages") or default_stages()
    tried = 0
    for step, values in candidates(launch, int(stages)):
        variant = with_values(job, values)
        tried += 1
        build = compile_one(variant)
        if _fits(build, limit):
            changed = tuple((k, launch.arg(k, stages if k == "num_stages" else None), v) for k, v in values.items())
            return Variant(changed, variant, build, step, tried, time.perf_counter() - t0)
    return None


def same_tuning(launch: Launch, launches: Iterable[tuple[Launch, KernelJob]]) -> list[tuple[Launch, KernelJob]]:
    """The launches of `launch`'s autotune call, in the autotuner's order: the same kernel, launch line and count of
    configs, and the same tensors (a config changes constexprs and options only)."""
    def tensors(la: Launch):
        return tuple((k, v) for k, v in la.args if isinstance(v, TensorArg))

    mine = {}
    for la, jb in launches:
        if la.autotune is None or (la.kernel_file, la.kernel, la.call_site, la.autotune[1:], tensors(la)) != \
                (launch.kernel_file, launch.kernel, launch.call_site, launch.autotune[1:], tensors(launch)):
            continue
        mine.setdefault(la.autotune[0], (la, jb))
    return [mine[i] for i in sorted(mine)]


def _first_config(launch: Launch, limit: int, compile_one: Compile, configs: list, t0: float) -> Variant | None:
    builds = [(la, jb, compile_one(jb)) for la, jb in configs]
    fit = [(la, jb, b) for la, jb, b in builds if _fits(b, limit)]
    if not fit:
        return None
    la, jb, b = fit[0]
    mine = dict(launch.args) | dict(launch.options)
    theirs = dict(la.args) | dict(la.options)
    changed = tuple((k, mine.get(k), v) for k, v in theirs.items() if mine.get(k) != v)
    return Variant(changed, jb, b, 0, len(builds), time.perf_counter() - t0, len(fit),
                   (la.autotune[0], la.autotune[1]))
