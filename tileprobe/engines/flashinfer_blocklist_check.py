"""Is a written FlashInfer tactics blocklist still exact for a flashinfer release, and which tactic IDs moved between
two releases. The comparison is with the release's own compiled enumeration whenever nvcc is there
(tileprobe.engines.flashinfer_native_ids); without nvcc it is with tileprobe's model, and the answer says so."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tileprobe.backends.cutlass.toolchain import Nvcc
from tileprobe.engines import flashinfer as engine
from tileprobe.engines import flashinfer_blocklist as bl
from tileprobe.engines import flashinfer_native_ids as native
from tileprobe.engines import flashinfer_tactic_ids as tid
from tileprobe.errors import UsageError


@dataclass
class CheckResult:
    problems: list[str]
    notes: list[str]
    label: str  # the flashinfer checked against
    numbering: native.Numbering
    versions: list[str] = field(default_factory=list)

    def verdict(self) -> str:
        if self.problems:
            return f"stale, {len(self.problems)} change(s)"
        return "exact" if self.numbering.exact else "unchanged in tileprobe's model (unchecked: no engine compile)"


def _load(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UsageError(f"no such blocklist file: {path}") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} is not a JSON blocklist: {exc}") from None
    prov = doc.get("tileprobe") if isinstance(doc, dict) else None
    if not isinstance(prov, dict) or not isinstance(prov.get("tactics"), list):
        raise UsageError(f"{path} was not written by `tileprobe export flashinfer-blocklist` (no 'tileprobe' "
                         "record of the numbering it used); cannot check it")
    ok = (prov.get("dtypes") in tid.PAIRS and prov.get("finalize_fusion") in tid.FINALIZE_MODES
          and prov.get("arch") in tid.SM120_ARCHS
          and all(isinstance(e, list) and len(e) == 5 and isinstance(e[0], int) for e in prov["tactics"]))
    if not ok:
        raise UsageError(f"{path}: its 'tileprobe' record (dtypes, finalize_fusion, arch, tactics) is malformed")
    return doc


def _meaning(entry) -> str:
    _, gemm, tactic, epi, swap = entry
    return f"{gemm} {tactic} {epi} epilogue swap-AB {'on' if swap else 'off'}"


def current_map(tree: engine.FlashinferTree, numbering: native.Numbering, dtypes: str, finalize: bool,
                arch: str) -> dict[int, list]:
    """ID -> [id, gemm, tactic, epilogue, swap] as `tree` numbers them: the engine's own compiled lines when the
    numbering is exact, else tileprobe's model."""
    if numbering.exact:
        return {i: [i, g, f"CtaShape{tile}B", epi, swap]
                for i, (g, tile, epi, swap, _) in numbering.ids(dtypes, finalize, arch).items()}
    return {t.id: [t.id, t.gemm, t.tactic, t.epilogue, t.swap_ab]
            for t in tid.tactic_ids(dtypes, finalize, arch, tree.root)}


def check(path: Path, flashinfer_dir: str | Path | None = None, nvcc: Nvcc | None = None, model_only: bool = False,
          cache_dir: str | Path | None = None, rel: bl.Release | None = None) -> CheckResult:
    """Each problem one line naming a changed ID; none when the file is still right for that flashinfer."""
    doc = _load(path)
    prov = doc["tileprobe"]
    rel = rel or bl.release(None, None, Path(flashinfer_dir) if flashinfer_dir else None, cache_dir)
    tree = rel.tree
    bl.metadata_keys(tree)
    numbering = bl.check_numbering(tree, nvcc, model_only, cache_dir)
    now_map = current_map(tree, numbering, prov["dtypes"], tid.FINALIZE_MODES[prov["finalize_fusion"]], prov["arch"])
    then_map = {e[0]: e for e in prov["tactics"]}
    where_now = {tuple(v[1:]): k for k, v in now_map.items()}
    problems, notes = [], []
    blocked = {b["id"] for b in prov.get("blocked", [])}
    for i in sorted(set(then_map) | set(now_map)):
        a, b = then_map.get(i), now_map.get(i)
        if a is not None and b is not None and list(a[1:]) == list(b[1:]):
            continue
        was = _meaning(a) if a else "absent"
        moved = f"; that variant is now ID {where_now[tuple(a[1:])]}" if a and tuple(a[1:]) in where_now else ""
        tag = "blocked ID" if i in blocked else "ID"
        problems.append(f"{tag} {i}: was {was}, now {_meaning(b) if b else 'absent'}{moved}")
    listed = {(k, i) for k, ids in (doc.get("invalid_tactics") or {}).items() for i in ids}
    recorded = {(tid.OP_KEYS.get(b.get("gemm")), b.get("id")) for b in prov.get("blocked", [])}
    for k, i in sorted(listed ^ recorded, key=str):
        why = "listed without a tileprobe record" if (k, i) in listed else "recorded but not listed"
        problems.append(f"ID {i} under {k}: {why}")
    meta_v = doc.get("_metadata", {}).get("flashinfer_version")
    if meta_v not in (rel.loader_version, "*"):
        problems.append(f"flashinfer_version {meta_v} in _metadata, but {tree.label()}'s _collect_metadata reports "
                        f"{rel.loader_version}: FlashInfer's loader skips this file")
    if prov.get("flashinfer", {}).get("tree_hash") != tree.tree_hash:
        notes.append(f"flashinfer's MoE kernel sources differ from those the rows were sized with "
                     f"({prov.get('flashinfer', {}).get('tree_hash')} vs {tree.tree_hash}): re-run the sweep and "
                     "export again")
    if not numbering.exact:
        notes.append(numbering.note)
    return CheckResult(problems, notes, tree.label(), numbering)


def diff_installs(old: str | Path, new: str | Path, dtypes: list[str] | None = None,
                  finalize: list[str] | None = None, arch: str = "sm_120a", nvcc: Nvcc | None = None,
                  model_only: bool = False, cache_dir: str | Path | None = None) -> tuple[list[str], list[str]]:
    """(one line per tactic variant whose ID differs between two flashinfer installs or that one lacks, notes):
    each side's own compiled enumeration when nvcc is there, else tileprobe's model of each, said in the notes."""
    lines, notes = [], []
    trees = [engine.find_flashinfer(d) for d in (old, new)]
    nums = [bl.check_numbering(t, nvcc, model_only, cache_dir) for t in trees]
    labels = [f"{t.label()} [{t.tree_hash[:8]}]" for t in trees]  # the hash tells two builds of one version apart
    for t, n in zip(labels, nums):
        notes.append(f"{t}: {n.word()} ({n.note})")
    for dt in dtypes or tid.PAIRS:
        for fin in finalize or list(tid.FINALIZE_MODES):
            maps = [current_map(t, n, dt, tid.FINALIZE_MODES[fin], arch) for t, n in zip(trees, nums)]
            a, b = ({tuple(v[1:]): k for k, v in m.items()} for m in maps)
            for key in list(a) + [k for k in b if k not in a]:
                ia, ib = a.get(key), b.get(key)
                if ia is not None and ia == ib:
                    continue
                gemm, tactic, epi, swap = key
                what = f"{gemm} {tactic} {epi} epilogue, swap-AB {'on' if swap else 'off'}, {dt}"
                lines.append(f"{dt} finalize {fin}: {what}: ID {'-' if ia is None else ia} in {labels[0]} -> "
                             f"{'-' if ib is None else ib} in {labels[1]}")
    return lines, notes
