"""Results: one row schema for static and runtime probes, written append-and-flush so no finished row is lost."""

from __future__ import annotations

import csv
import json
import math
import os
from datetime import datetime, timezone
from pathlib import Path

from tileprobe.errors import UsageError

COLUMNS = [
    "family", "target", "device_name", "cc", "gpu_index", "worker", "arch", "config", "tile", "tile_bytes_k", "schedule",
    "epilogue", "swap_ab", "stages", "smem_bytes", "smem_mainloop_bytes", "smem_epilogue_bytes", "smem_limit_bytes",
    "smem_limit_device_bytes", "cutlass_cap_bytes", "headroom_bytes", "regs_per_thread", "spill_bytes",
    "threads_per_cta", "ctas_per_sm", "ctas_per_sm_smem", "ctas_per_sm_regs", "warps_per_sm",
    "verdict", "reason", "evidence", "launch_status", "launch_reason", "rel_err",
    "workload", "gemm", "batch", "routing", "experts_active", "problem", "us_median", "us_spread", "tflops", "gbps",
    "pct_peak_bw", "pct_copy_bw",
    "cutlass_version", "cutlass_source", "cutlass_hash", "nvcc_version", "driver", "compile_seconds", "timestamp",
]
TOOLCHAIN_COLUMNS = ["cutlass_version", "cutlass_hash", "nvcc_version"]
CSV_NAME = "results.csv"
JSONL_NAME = "results.jsonl"


def row_key(row: dict) -> str:
    """Identity of a row: the config, where it was judged, and the workload point (empty for static rows)."""
    return "|".join(str(row.get(k) if row.get(k) is not None else "") for k in
                    ("config", "target", "workload", "gemm", "batch", "routing", "problem"))


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _clean(value):
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None if math.isnan(value) else str(value)
    return value


class ResultsWriter:
    """Appends rows to results.csv and results.jsonl in `out`, flushing and syncing each one at once.

    With resume, rows already in the folder are kept and their keys skipped; without it, the folder's results are
    moved aside (results.csv.1, ...), never deleted.
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
            self.done = {row_key(r) for r in load_rows(self.out)} if self.jsonl_path.exists() else set()
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
