"""Family compiled-audit: a compiled kernel (CUDA library code the engine ships or JIT-compiles) on a model's path,
answered by tileprobe audit's path families (tileprobe.audit.path) with three answers: arch, gate and bytes.

The config is the call as the engine makes it: the layer it serves, the phase, the library's family, the engine's
op and the kernel the library launches; `launch` a short hash of the whole call. Rows carry the three answers and
their evidence words in their own columns (arch_answer / arch_evidence, gate_answer / gate_evidence, smem_bytes /
bytes_evidence), the verdict from the one enum (fits, smem-over-limit, no-code, refused, unanswered).
"""

from __future__ import annotations

from dataclasses import replace

from tileprobe.errors import UsageError
from tileprobe.families.base import Config, Family, Tile
from tileprobe.families.columns import Column, field_of
from tileprobe.families import triton_audit

NAME = "compiled-audit"
ARCHS = triton_audit.ARCHS
EXTRA = ("engine", "layer", "phase", "library", "op", "kernel", "config_source", "launch")


def make_config(engine: str, layer: str, phase: str, library: str, op: str, kernel: str, arch: str, source: str,
                launch: str) -> Config:
    extra = (("engine", engine), ("layer", layer), ("phase", phase), ("library", library), ("op", op),
             ("kernel", kernel), ("config_source", source), ("launch", launch))
    return Config(NAME, Tile(0, 0, 0), "compiled", 0, "none", False, arch, (1, 1, 1), extra)


def row_fields(cfg: Config) -> dict:
    return {"kernel": cfg.get("kernel"), "gemm": cfg.get("op"), "layer": cfg.get("layer"),
            "phase": cfg.get("phase"), "library": cfg.get("library"), "config_source": cfg.get("config_source")}


def _rules(tile: Tile, schedule: str, cutlass_version: str | None) -> None:
    """The call is the engine's; the library decides."""


def _expand(arch: str, tiles, epilogues, swap_ab, dtypes=None) -> list[Config]:
    raise UsageError("compiled-audit rows come from the engine's own forward pass: run `tileprobe audit --engine E "
                     "--model M --target T`")


REPORT = replace(
    triton_audit.REPORT,
    terminal=(
        Column("layer", "layer", field_of("layer"), wrap=True, min_width=12),
        Column("phase", "phase", field_of("phase")),
        Column("library", "library", field_of("library"), wrap=True, min_width=10),
        Column("arch_answer", "arch", field_of("arch_answer"), wrap=True, min_width=14),
        Column("smem_bytes", "shared B", field_of("smem_bytes")),
        Column("verdict", "verdict", lambda r, c: r.get("verdict") or ""),
    ),
    table=(
        Column("layer", "layer", field_of("layer")),
        Column("phase", "phase", field_of("phase")),
        Column("library", "library", field_of("library")),
        Column("gemm", "engine op", field_of("gemm")),
        Column("kernel", "kernel", field_of("kernel")),
        Column("config_source", "chosen by", field_of("config_source")),
        Column("arch_answer", "arch", field_of("arch_answer")),
        Column("arch_evidence", "arch evidence", field_of("arch_evidence")),
        Column("gate_answer", "gate", field_of("gate_answer")),
        Column("gate_evidence", "gate evidence", field_of("gate_evidence")),
        Column("smem_bytes", "shared B", field_of("smem_bytes")),
        Column("bytes_evidence", "bytes evidence", field_of("bytes_evidence")),
        Column("smem_limit_bytes", "limit B", field_of("smem_limit_bytes")),
        Column("verdict", "verdict", field_of("verdict")),
        Column("reason", "reason", field_of("reason")),
    ),
    order=None,
    verdict_after=". One row per distinct compiled kernel call on the model's forward pass; arch, gate and bytes "
                  "each carry their own evidence word.",
)

FAMILY = replace(
    triton_audit.FAMILY,
    name=NAME,
    description="the compiled kernels on a model's path (tileprobe audit): arch, gate and bytes",
    rules=_rules,
    extra_fields=EXTRA,
    expand=_expand,
    backend="compiled",
    report=REPORT,
    row_fields=row_fields,
)
