"""Family triton-audit: a Triton launch an engine's own launcher makes for a model (tileprobe audit), compiled for a
target. The config is the launch as captured (tileprobe.audit.capture): the kernel, its engine file, the launch's
BLOCK_M (or BLOCK_H) / BLOCK_N (or TILE_SIZE) / BLOCK_DMODEL (or HEAD_SIZE_PADDED, BLOCK_DV) constexprs (tile m / n / k; 0 where
the kernel takes none), num_warps, num_stages, and where they were set: the
engine line of the `kernel[grid](...)` call and the device branch the launcher took (config_source). Nothing of it
is typed here; rows reuse the Triton report's columns (families.columns.TRITON_REPORT) with the audit's own tables.
"""

from __future__ import annotations

import re
from dataclasses import replace

from tileprobe.errors import UsageError
from tileprobe.families.base import TRITON_OPTIONS, Config, Family, Tile
from tileprobe.families.columns import TRITON_CUTLASS_ONLY, TRITON_REPORT, Column, field_of

NAME = "triton-audit"
ARCHS = ("sm_120a", "sm_121a", "sm_100a", "sm_90a", "sm_89", "sm_86", "sm_80")
EXTRA = ("engine", "kernel", "op", "num_warps", "config_source", "launch")


def make_config(engine: str, kernel: str, op: str, block_m: int, block_n: int, block_d: int, num_warps: int,
                num_stages: int, arch: str, source: str, launch: str) -> Config:
    """One captured launch as a config; `launch` a short hash of the whole launch (two launches that differ in any
    argument are two configs), `source` the engine line that set its parameters."""
    extra = (("engine", engine), ("kernel", kernel), ("op", op), ("num_warps", str(num_warps)),
             ("config_source", source), ("launch", launch))
    return Config(NAME, Tile(block_m, block_n, block_d), "triton", num_stages, "none", False, arch, (1, 1, 1), extra)


def row_fields(cfg: Config) -> dict:
    """kernel, op, and the BLOCK_* a kernel takes (None where it takes none: tile 0)."""
    return {"kernel": cfg.get("kernel"), "block_m": cfg.tile.m or None, "block_n": cfg.tile.n or None,
            "block_k": cfg.tile.k or None, "gemm": cfg.get("op")}


def _rules(tile: Tile, schedule: str, cutlass_version: str | None) -> None:
    """Launch parameters are the engine's; Triton decides what compiles."""


def _expand(arch: str, tiles, epilogues, swap_ab, dtypes=None) -> list[Config]:
    raise UsageError("triton-audit launches come from the engine's own code: run `tileprobe audit --engine E "
                     "--model M --target T`")


_BLOCKS = Column("block", "BLOCK_M/N/D", lambda r, c: "/".join(c.fmt(r.get(k)) for k in ("block_m", "block_n",
                                                                                       "block_k")))
_POINT = re.compile(r"batch (\d+) seq (\d+) tp (\d+)(?: window (\d+))?")


def points(row: dict) -> str:
    """The points (batch, sequence length, tp, window) that make this launch, short: 'b1,8 s1024' (batch 1 and 8,
    sequence 1024), ' tp2' / ' w128' where not 1 / none; from the row's problem text, '(batch 1 seq 1024 tp 1; ...)'
    (tileprobe.audit.entry.Point.label)."""
    found = _POINT.findall(str(row.get("problem") or "").rsplit("(", 1)[-1])
    groups: dict[tuple, list[str]] = {}
    for b, s, tp, w in found:
        groups.setdefault((s, tp, w), [])
        if b not in groups[(s, tp, w)]:
            groups[(s, tp, w)].append(b)
    return "; ".join(f"b{','.join(bs)} s{s}" + (f" tp{tp}" if tp != "1" else "") + (f" w{w}" if w else "")
                     for (s, tp, w), bs in groups.items()) or "-"


def _caption(rows: list[dict]) -> str | None:
    return "point: b = batch sizes, s = sequence length (tp, w: tensor-parallel ranks, window where set); " \
           "`autotuner drops`: an autotune config Triton's autotuner skips (no failure)" \
        if any(r.get("autotune_dropped") for r in rows) else \
        "point: b = batch sizes, s = sequence length (tp, w: tensor-parallel ranks, window where set)"
REPORT = replace(
    TRITON_REPORT,
    csv_drop=TRITON_CUTLASS_ONLY,  # an audit's CSV keeps the path's columns (its compiled-audit rows fill them)
    terminal=(
        Column("gemm", "op", field_of("gemm"), wrap=True, min_width=12),
        Column("kernel", "kernel", field_of("kernel"), wrap=True, min_width=12),
        # the engine file's name and line (the whole path and the launch's shapes: report.md and the CSV)
        Column("config_source", "set at", lambda r, c: c.fmt(r.get("config_source") and
                                                             str(r["config_source"]).rsplit("/", 1)[-1]),
               wrap=True, min_width=13),
        Column("point", "point", lambda r, c: points(r), wrap=True, min_width=8),
        _BLOCKS,
        Column("num_warps", "w/s", lambda r, c: f"{c.fmt(r.get('num_warps'))}/{c.fmt(r.get('stages'))}"),
        Column("smem_bytes", "shared B", field_of("smem_bytes")),
        Column("headroom_bytes", "headroom", field_of("headroom_bytes")),
        # never cut: the longest verdict word, smem-over-limit, is 15 characters
        Column("verdict", "verdict", lambda r, c: r.get("verdict") or "", min_width=15),
    ),
    table=(
        Column("kernel", "kernel", field_of("kernel")),
        Column("kernel_file", "file", field_of("kernel_file")),
        Column("gemm", "op", field_of("gemm")),
        Column("problem", "shape", field_of("problem")),
        Column("config_source", "set at (engine line)", field_of("config_source")),
        Column("block_m", "BLOCK_M", field_of("block_m")),
        Column("block_n", "BLOCK_N", field_of("block_n")),
        Column("block_k", "BLOCK_DMODEL", field_of("block_k")),
        Column("num_warps", "num_warps", field_of("num_warps")),
        Column("stages", "num_stages", field_of("stages")),
        Column("smem_bytes", "metadata.shared B", field_of("smem_bytes")),
        Column("smem_limit_bytes", "limit B", field_of("smem_limit_bytes")),
        Column("headroom_bytes", "headroom B", field_of("headroom_bytes")),
        Column("regs_per_thread", "regs", field_of("regs_per_thread")),
        Column("spill_bytes", "spills B", field_of("spill_bytes")),
        Column("autotune_dropped", "autotune dropped", field_of("autotune_dropped"), show="present"),
        Column("verdict", "verdict", field_of("verdict")),
        Column("evidence", "evidence", field_of("evidence")),
        Column("reason", "reason", field_of("reason")),
    ),
    order=lambda r: (str(r.get("kernel_file") or ""), str(r.get("gemm") or ""), str(r.get("config") or "")),
    terminal_split=None,
    terminal_caption=_caption,
    terminal_title="audit: the Triton launches the engine makes (not launched)",
    fill=None,
    verdict_after=". One row per distinct launch the engine's own launcher made for the model; `set at`: the engine "
                  "line whose device branch set its parameters.",
)

FAMILY = Family(
    name=NAME,
    kernel_template="(the engine's kernel)",
    header="",
    archs=ARCHS,
    ab_bits=16,
    sf_vector=0,
    schedules=("triton",),
    default_schedules=("triton",),
    default_tiles=(),
    mma_k=1,
    atol=1e-2,
    rtol=2e-2,
    description="the Triton launches an engine's own launchers make for a model (tileprobe audit)",
    rules=_rules,
    extra_fields=EXTRA,
    epilogues=("none",),
    expand=_expand,
    backend="triton",
    report=REPORT,
    row_fields=row_fields,
    options=TRITON_OPTIONS,
)
