"""A results folder's provenance is never lost: one sweep writes a folder at a time (a lock), --resume only adds rows
made the same way (same family, toolchain and evidence mode as the run.json already there), and when a new sweep
moves old rows aside (results.jsonl.N) their run.json moves with them (run.json.N)."""

from __future__ import annotations

import json
from pathlib import Path

from filelock import FileLock, Timeout

from tileprobe.errors import UsageError

RUN_JSON = "run.json"
LOCK_NAME = ".tileprobe.lock"
# What must match for --resume to append rows to a folder: the family, then the toolchain fields of run.json.
_TOOLCHAIN = (("cutlass_hash", "CUTLASS tree"), ("cutlass_version", "CUTLASS"), ("nvcc_version", "nvcc"),
              ("engine", "engine"), ("engine_hash", "engine tree"), ("triton_version", "Triton"),
              ("kernel_sha256", "kernel"))


def lock(out: Path) -> FileLock:
    """Hold `out` for one writer; a second one gets a UsageError at once (no waiting: two sweeps into one folder
    would interleave rows and overwrite each other's run.json)."""
    lk = FileLock(str(Path(out) / LOCK_NAME))
    try:
        lk.acquire(timeout=0)
    except Timeout:
        raise UsageError(f"--out {out} is being written by another tileprobe run (lock {Path(out) / LOCK_NAME}); "
                         "wait for it to finish or pick another --out") from None
    return lk


def rotate(out: Path, names: tuple[str, ...]) -> int | None:
    """Move the folder's `names` aside under one common suffix .N (the first N none of them has), so rows and the
    run.json that describes them stay together; returns N, or None when there was nothing to move."""
    out = Path(out)
    present = [n for n in names if (out / n).exists()]
    if not present:
        return None
    n = 1
    while any((out / f"{name}.{n}").exists() for name in names):
        n += 1
    for name in present:
        (out / name).rename(out / f"{name}.{n}")
    return n


def evidence_mode(predict_only: bool, compile_: bool) -> str:
    """What a static sweep's rows claim: predicted (the model), compiled (device code built) or sized."""
    return "predicted" if predict_only else "compiled" if compile_ else "sized"


def _previous_mode(meta: dict, rows: list[dict]) -> str | None:
    if meta.get("evidence_mode"):
        return meta["evidence_mode"]
    if meta.get("predict_only"):
        return "predicted"
    seen = {r.get("evidence") for r in rows if not r.get("gemm")}  # static rows
    return "compiled" if "compiled" in seen else "sized" if "sized" in seen else None


def check_resume(out: Path, family: str, toolchain: dict, mode: str, rows: list[dict]) -> None:
    """Refuse --resume when `out`'s run.json says its rows were made another way; one line naming what differs."""
    path = Path(out) / RUN_JSON
    if not path.is_file():
        return
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"--resume: {path} is not readable ({exc}); its rows' provenance is unknown, so nothing is "
                         "added to them (use another --out)") from None
    diffs = []
    if meta.get("family") not in (None, family):
        diffs.append(f"family {meta.get('family')} -> {family}")
    old_tc = {k: meta.get(k) for k in ("engine", "kernel_sha256")} | (meta.get("toolchain") or {})  # older triton-moe
    for key, words in _TOOLCHAIN:
        a, b = old_tc.get(key), toolchain.get(key)
        if a is not None and b is not None and a != b:
            diffs.append(f"{words} {a} -> {b}")
    old_mode = _previous_mode(meta, rows)
    if old_mode is not None and old_mode != mode:
        diffs.append(f"evidence {old_mode} -> {mode}")
    if diffs:
        raise UsageError(f"--resume into {out}: its rows were made with another setup ({'; '.join(diffs)}); "
                         "nothing was written. Resume with the same options, or sweep into another --out")
