"""The family registry, and expanding a request into configs. One module per family; adding one adds a line below.

Every family module defines FAMILY (a families.base.Family) and its C++ kernel header in cutlass_harness/families/.
"""

from __future__ import annotations

import itertools
import re

from tileprobe.errors import UnsupportedConfig, UsageError
from tileprobe.families import (compiled_audit, flashinfer_moe, sm90_fp8, sm120_nvfp4, triton_audit, triton_moe,
                                vllm_moe)
from tileprobe.families.base import (EPILOGUES, SCHEDULE_IDS, SCHEDULE_SHORT, Config, Family, Tile, expand_tile_specs,
                                     parse_tile)
from tileprobe.families.columns import CUTLASS_REPORT, ReportSpec

FAMILIES: dict[str, Family] = {m.FAMILY.name: m.FAMILY for m in (sm120_nvfp4, sm90_fp8, flashinfer_moe, vllm_moe,
                                                                  triton_moe, triton_audit, compiled_audit)}

__all__ = ["EPILOGUES", "FAMILIES", "SCHEDULE_IDS", "SCHEDULE_SHORT", "Config", "Family", "Tile", "arch_for",
           "expand_configs", "expand_tile_specs", "family", "family_for_cc", "parse_cluster", "parse_tile",
           "report_spec"]


def family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise UsageError(f"unknown family {name!r}; known: {', '.join(FAMILIES)}") from None


def report_spec(rows: list[dict]) -> ReportSpec:
    """The columns and words for these rows: their families' one ReportSpec; CUTLASS's when the rows' families
    disagree (a merged set) or none is known."""
    names = {r.get("family") for r in rows}
    if names == {triton_audit.NAME, compiled_audit.NAME}:  # an audit: its Triton table; the path has its own section
        return triton_audit.REPORT
    specs = {id(FAMILIES[f].report): FAMILIES[f].report for f in names if f in FAMILIES}
    return next(iter(specs.values())) if len(specs) == 1 else CUTLASS_REPORT


def family_for_cc(cc: str) -> Family:
    """The family a device runs by default: sm_90 -> sm90-fp8, sm_120/121 -> sm120-nvfp4."""
    return FAMILIES["sm90-fp8"] if cc.startswith("9.") else FAMILIES["sm120-nvfp4"]


def arch_for(fam: Family, cc: str) -> str | None:
    """The arch-specific target the family builds for compute capability `cc`; None when it has none for it."""
    wanted = f"sm_{cc.replace('.', '')}a"
    return wanted if wanted in fam.archs else None


def expand_configs(
    fam: Family,
    arch: str,
    tiles: list[str] | None = None,
    schedules: list[str] | None = None,
    stages: list[int] | None = None,
    epilogues: list[str] | None = None,
    swap_ab: list[bool] | None = None,
    cluster: tuple[int, int, int] = (1, 1, 1),
    cutlass_version: str | None = None,
    extras: list[tuple[tuple[str, str], ...]] | None = None,
) -> list[Config]:
    """Every combination, in a stable order. Unbuildable ones are kept, marked with their reason; a schedule the
    builder resolves to another one asked for too (SM120 auto -> cooperative) is not probed twice. A family whose
    configs come from an engine (fam.expand) lists them itself; `extras` then filters its dtype pairs."""
    if fam.expand is not None:
        if arch not in fam.archs:
            raise UsageError(f"{fam.name} builds for {', '.join(fam.archs)}, not {arch}")
        fixed = [f"--stages {','.join(map(str, stages))}" if any(stages or ()) else "",
                 f"--schedules {','.join(schedules)}" if schedules else "",
                 f"--cluster {'x'.join(map(str, cluster))}" if cluster != (1, 1, 1) else ""]
        if any(fixed):
            raise UsageError(f"{fam.name} builds the engine's tactics as the engine composes them (schedule, stage "
                             f"count and cluster are the tactic's): {' '.join(f for f in fixed if f)} does not apply; "
                             "choose with --tiles, --epilogue, --swap-ab, --dtypes")
        dtypes = sorted({v for ex in extras or () for k, v in ex if k == "dtypes"}) or None
        return fam.expand(arch, tiles, epilogues, swap_ab, dtypes)
    parsed = list(dict.fromkeys(parse_tile(t, fam.ab_bits) for spec in (tiles or fam.default_tiles)
                                for t in expand_tile_specs(spec)))
    for s in schedules or ():
        if s not in SCHEDULE_IDS:
            raise UsageError(f"unknown schedule {s!r}; known: {', '.join(SCHEDULE_IDS)}")
    for e in epilogues or ():
        if e not in fam.epilogues:
            raise UsageError(f"unknown epilogue {e!r} for {fam.name}; known: {', '.join(fam.epilogues)}")
    for s in stages or ():
        if s < 0 or s > 32:
            raise UsageError(f"stage count {s} out of range: 0 (auto) or 1..32")
    if arch not in fam.archs:
        raise UsageError(f"{fam.name} builds for {', '.join(fam.archs)}, not {arch}")
    scheds = list(schedules or fam.default_schedules)
    scheds = [s for s in scheds if not (s in fam.resolves and fam.resolves[s] in scheds)]
    out: list[Config] = []
    seen: set[str] = set()
    for tile, sched, st, epi, swap, extra in itertools.product(
        parsed, scheds, stages or [0], epilogues or [fam.epilogues[0]], swap_ab or [False], extras or [()]
    ):
        reason = None
        try:
            fam.check(tile, sched, cluster, cutlass_version)
        except UnsupportedConfig as exc:
            reason = str(exc)
        cfg = Config(fam.name, tile, sched, st, epi, swap, arch, cluster, extra, reason)
        if cfg.key not in seen:
            seen.add(cfg.key)
            out.append(cfg)
    return out


def parse_cluster(text: str) -> tuple[int, int, int]:
    m = re.match(r"^(\d+)x(\d+)x(\d+)$", text.strip())
    if not m:
        raise UsageError(f"malformed cluster {text!r}: expected MxNxK such as 1x1x1")
    return tuple(int(g) for g in m.groups())  # type: ignore[return-value]
