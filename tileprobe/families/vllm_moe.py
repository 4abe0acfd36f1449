"""Family vllm-moe: the engines' own CUTLASS NVFP4 grouped GEMMs for MoE experts, outside FlashInfer.

- vLLM (the pin table's release, tileprobe.engines.pins.READ_FROM), `cutlass_fp4_group_mm`
  (csrc/libtorch_stable/quantization/fp4/nvfp4_blockwise_moe_kernel.cu): SM120/SM121
  (`run_fp4_blockwise_scaled_group_mm_sm120`, built from cutlass::arch::Sm120): MMA tile 128x128x128,
  KernelScheduleAuto (cooperative), bf16 output only; the same source's sm_100a branch
  (`run_fp4_blockwise_scaled_group_mm_sm100`): 128x128x128, 1-SM NVF4 ptr-array kernel, bf16 and fp16 output.
- sgl-kernel 0.3.21 (an older SGLang kernel release; `nvfp4_blockwise_moe`): the SM120 composition with an explicit
  pingpong schedule. The pin table's SGLang, with sglang-kernel 0.4.10, no longer ships it (see README: which SGLang
  runs what).

Each composition is a config whose `engine` field names the release it was read from. The kernel types are composed
in cutlass_harness/families/vllm_moe.cuh; tests/families/test_vllm_moe.py proves them identical to the wheels' kernels by
their mangled `cutlass::device_kernel<...>` symbols (recorded in tests/data/engine_symbols/, made by
tools/engine_symbols.py). A composition is a fixed point: there is nothing to sweep, and no other tile to ask for.

Which releases: all known ones, or those named in TILEPROBE_MOE_ENGINE (comma-separated, e.g. 'vllm <release>');
a release tileprobe has not read is refused (one line, exit code 2).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tileprobe.engines import pins
from tileprobe.errors import UsageError
from tileprobe.families.base import Config, Family, Tile

ENV = "TILEPROBE_MOE_ENGINE"
SCHEDULES = {"auto": 0, "pingpong": 2, "1sm-nvf4": 3}
ARCH_NUM = {"sm_120a": 120, "sm_121a": 120, "sm_100a": 100}
OUT = {"bf16": 0, "fp16": 1}
EPILOGUE = "linear-combination"  # LinearCombination<D, float, C, float>: D = alpha[expert] * acc (+ beta * C, beta 0)


@dataclass(frozen=True)
class Composition:
    """One kernel an engine release builds: where it is read from, and its template arguments."""

    engine: str  # release label, as rows carry it
    source: str  # file and function in the engine's source
    archs: tuple[str, ...]
    tile: Tile
    schedule: str
    out: str


_SM120 = ("sm_120a", "sm_121a")
_VLLM_SRC = "csrc/libtorch_stable/quantization/fp4/nvfp4_blockwise_moe_kernel.cu"
_VLLM = pins.label("vllm")  # the release the compositions were read from
COMPOSITIONS = (
    Composition(_VLLM, f"{_VLLM_SRC} run_fp4_blockwise_scaled_group_mm_sm120", _SM120, Tile(128, 128, 128),
                "auto", "bf16"),
    Composition(_VLLM, f"{_VLLM_SRC} run_fp4_blockwise_scaled_group_mm_sm100<bfloat16>", ("sm_100a",),
                Tile(128, 128, 128), "1sm-nvf4", "bf16"),
    Composition(_VLLM, f"{_VLLM_SRC} run_fp4_blockwise_scaled_group_mm_sm100<half>", ("sm_100a",),
                Tile(128, 128, 128), "1sm-nvf4", "fp16"),
    Composition("sgl-kernel 0.3.21", "csrc/moe/nvfp4_blockwise_moe.cu run_fp4_blockwise_scaled_group_mm_sm120",
                _SM120, Tile(128, 128, 128), "pingpong", "bf16"),
)
RELEASES = tuple(dict.fromkeys(c.engine for c in COMPOSITIONS))
# Arches with no FP4 MMA: the engines build no NVFP4 grouped GEMM there (vLLM's dispatch covers SM100 and SM120 only),
# so nothing of this family can be compiled for them or launched on them (the project's H200 is sm_90).
NO_FP4 = {"sm_90a": "sm_90 has no FP4 tensor-core MMA, so no NVFP4 grouped GEMM is built for it (vLLM dispatches "
                    "this kernel on SM100 and SM120 only): not buildable, not runnable on an H200"}


def releases_wanted() -> tuple[str, ...]:
    """The releases TILEPROBE_MOE_ENGINE names (all known ones when unset); UsageError for one not read."""
    text = os.environ.get(ENV)
    if text is None:
        return RELEASES
    wanted = tuple(" ".join(w.split()) for w in text.split(",") if w.strip())
    unknown = [w for w in wanted if w not in RELEASES]
    if not wanted or unknown:
        raise UsageError(f"{ENV}={text!r}: vllm-moe has compositions read from {', '.join(RELEASES)} only; "
                         f"{'nothing named' if not wanted else ', '.join(unknown) + ' not read'}")
    return wanted


def _render(cfg: Config) -> list[int]:
    if cfg.stages != 0:
        raise UsageError("vllm-moe configs are the engines' own: StageCountAutoCarveout, no forced stage count")
    return [cfg.tile.m, cfg.tile.n, cfg.tile.k, SCHEDULES[cfg.schedule], OUT[cfg.get("out") or "bf16"],
            ARCH_NUM[cfg.arch]]


def _rules(tile: Tile, schedule: str, cutlass_version: str | None) -> None:
    """The configs are the engines' compositions (expand); nothing else is built."""


def expand(arch: str, tiles: list[str] | None, epilogues: list[str] | None, swap_ab: list[bool] | None,
           dtypes: list[str] | None = None) -> list[Config]:
    """Every composition of the wanted releases for `arch`, filtered by tile ('128x128x128', elements) if asked."""
    for e in epilogues or ():
        if e != EPILOGUE:
            raise UsageError(f"unknown epilogue {e!r} for vllm-moe; the engines build {EPILOGUE} only")
    if any(swap_ab or ()):
        raise UsageError("vllm-moe: the engines do not swap A and B")
    if dtypes and set(dtypes) != {"nvfp4xnvfp4"}:
        raise UsageError("vllm-moe: the engines' grouped GEMM is nvfp4xnvfp4 only")
    releases = releases_wanted()
    wanted = {w.strip().lower() for spec in tiles or () for w in spec.split(",") if w.strip()}
    if arch in NO_FP4:  # rows that say why nothing runs there, one per release and SM120 composition
        return [Config("vllm-moe", c.tile, c.schedule, 0, EPILOGUE, False, arch, (1, 1, 1),
                       (("engine", c.engine), ("out", c.out)), f"{c.engine}: {NO_FP4[arch]}")
                for c in COMPOSITIONS if c.archs == _SM120 and c.engine in releases]
    out = [Config("vllm-moe", c.tile, c.schedule, 0, EPILOGUE, False, arch, (1, 1, 1),
                  (("engine", c.engine), ("out", c.out)))
           for c in COMPOSITIONS if arch in c.archs and c.engine in releases and (not wanted or str(c.tile) in wanted)]
    if not out:
        raise UsageError(f"no vllm-moe composition of {', '.join(releases)} for {arch}"
                         + (f" with tile {', '.join(sorted(wanted))}" if wanted else ""))
    return out


FAMILY = Family(
    name="vllm-moe",
    kernel_template="VllmMoeKernel",
    header="vllm_moe.cuh",
    archs=("sm_120a", "sm_121a", "sm_100a", "sm_90a"),  # sm_90a: rows saying why nothing runs there
    ab_bits=4,
    sf_vector=16,
    schedules=tuple(SCHEDULES),
    default_schedules=("auto",),
    default_tiles=(),
    mma_k=64,
    atol=1e-2,  # as sm120-nvfp4 (same operand and output types); nothing of this family is launched here
    rtol=2e-2,
    description="vLLM's / sgl-kernel's own CUTLASS NVFP4 MoE grouped GEMM (cutlass_fp4_group_mm), engine compositions",
    rules=_rules,
    # sm120_blockscaled_mma_builder.inl: KernelScheduleAuto builds the cooperative kernel (the wheel's symbol says
    # KernelPtrArrayTmaWarpSpecializedCooperativeBlockScaledSm120).
    resolves={"auto": "cooperative"},
    extra_fields=("engine", "out"),
    epilogues=(EPILOGUE,),
    render=_render,
    expand=expand,
)
