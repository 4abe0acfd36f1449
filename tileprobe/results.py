"""Results: one row schema for static and runtime probes, written append-and-flush so no finished row is lost."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

from tileprobe.errors import UsageError
from tileprobe.rows import COLUMNS, TOOLCHAIN_COLUMNS, now, row_key
from tileprobe.verdict import Verdict

__all__ = ["COLUMNS", "CSV_NAME", "JSONL_NAME", "TOOLCHAIN_COLUMNS", "ResultsWriter", "load_rows", "now", "row_key",
           "settled"]

CSV_NAME = "results.csv"
JSONL_NAME = "results.jsonl"


def _clean(value):
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None if math.isnan(value) else str(value)
    return value


class ResultsWriter:
    """Appends rows to results.csv and results.jsonl in `out`, flushing and syncing each one at once.

    With resume, rows already in the folder are kept and their keys skipped, except points whose last row is
    transient (crashed, timeout, not-run): those run again and their new row is appended after the old one.
    Without resume, the folder's results are moved aside (results.csv.1, ...), never deleted.
    """

    def __init__(self, out: Path, resume: bool = False) -> None:
        self.out = Path(out)
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            probe = self.out / ".tileprobe-write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise UsageError(f"--out {self.out} is not writable: {exc.strerror}") from None
        self.csv_path = self.out / CSV_NAME
        self.jsonl_path = self.out / JSONL_NAME
        self.done: set[str] = set()
        if resume:
            old = settled(load_rows(self.out)) if self.jsonl_path.exists() else []
            self.done = {row_key(r) for r in old if not _transient(r)}
        else:
            for p in (self.csv_path, self.jsonl_path):
                if p.exists():
                    n = 1
                    while p.with_name(f"{p.name}.{n}").exists():
                        n += 1
                    p.rename(p.with_name(f"{p.name}.{n}"))
        new_csv = not self.csv_path.exists() or self.csv_path.stat().st_size == 0
        self._csv = open(self.csv_path, "a", newline="")
        self._jsonl = open(self.jsonl_path, "a")
        self._writer = csv.DictWriter(self._csv, fieldnames=COLUMNS, extrasaction="ignore")
        if new_csv:
            self._writer.writeheader()
            self._csv.flush()

    def has(self, key: str) -> bool:
        return key in self.done

    def write(self, row: dict) -> None:
        row = {k: _clean(row.get(k)) for k in COLUMNS}
        key = row_key(row)
        if key in self.done:
            return
        self._writer.writerow(row)
        self._jsonl.write(json.dumps(row) + "\n")
        for f in (self._csv, self._jsonl):
            f.flush()
            os.fsync(f.fileno())
        if not _transient(row):
            self.done.add(key)

    def close(self) -> None:
        self._csv.close()
        self._jsonl.close()

    def __enter__(self) -> "ResultsWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def load_rows(folder: Path) -> list[dict]:
    """Rows of a results folder (JSON lines are the source of truth; a torn last line is skipped)."""
    path = Path(folder) / JSONL_NAME
    if not path.is_file():
        raise UsageError(f"no {JSONL_NAME} in {folder}")
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def _transient(row: dict) -> bool:
    try:
        return Verdict(row.get("verdict")).transient
    except ValueError:
        return False


def settled(rows: list[dict]) -> list[dict]:
    """One row per key: the last settled (non-transient) row when there is one, else the last row. A point that
    crashed once and ran `ok` when re-run is `ok`; the crash stays in the file."""
    best: dict[str, dict] = {}
    for r in rows:
        k = row_key(r)
        if k not in best or not _transient(r) or _transient(best[k]):
            best[k] = r
    return list(best.values())
