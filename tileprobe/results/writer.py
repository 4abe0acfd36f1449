"""Results: one row schema for static and runtime probes, written append-and-flush so no finished row is lost."""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tileprobe.errors import UsageError
from tileprobe.families import report_spec
from tileprobe.results import provenance
from tileprobe.results.rows import COLUMNS, TOOLCHAIN_COLUMNS, now, row_key
from tileprobe.results.schema import row_problems
from tileprobe.verdict import Verdict

__all__ = ["COLUMNS", "CSV_NAME", "JSONL_NAME", "jsonl_path", "TOOLCHAIN_COLUMNS", "Recorder", "ResultsWriter", "check_csv",
           "csv_row", "csv_columns", "load_rows", "now", "read_rows", "recording", "row_key", "settled"]

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
    Without resume, the folder's results and their run.json are moved aside together (results.csv.N,
    results.jsonl.N, run.json.N), never deleted. One writer holds a folder at a time (provenance.lock).
    """

    def __init__(self, out: Path, resume: bool = False, fsync_each: bool = True) -> None:
        self.out = Path(out)
        self.fsync_each = fsync_each  # False: each row flushed to the OS at once, synced to disk once at close
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            probe = self.out / ".tileprobe-write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise UsageError(f"--out {self.out} is not writable: {exc.strerror}") from None
        self._lock = provenance.lock(self.out)
        try:
            self._open(resume)
        except BaseException:
            self._lock.release()
            raise

    def _open(self, resume: bool) -> None:
        self.csv_path = self.out / CSV_NAME
        self.jsonl_path = self.out / JSONL_NAME
        self.done: set[str] = set()
        if resume:
            old: list[dict] = []
            if self.jsonl_path.exists():
                old, torn = read_rows(self.out)
                # a torn line, or a CSV row whose JSON row never reached the file (killed between the two): both
                # files again from the complete JSON lines (that point runs again), so appended rows line up
                if torn or _csv_records(self.csv_path) > len(old):
                    self._rewrite(old)
            self.done = {row_key(r) for r in settled(old) if not _transient(r)}
        else:
            provenance.rotate(self.out, (CSV_NAME, JSONL_NAME, provenance.RUN_JSON))
        new_csv = not self.csv_path.exists() or self.csv_path.stat().st_size == 0
        self._csv = open(self.csv_path, "a", newline="")
        self._jsonl = open(self.jsonl_path, "a")
        # The CSV's columns are the family's (csv_columns), chosen at the first row; a resumed CSV keeps its header.
        self._writer = None if new_csv else csv.DictWriter(self._csv, fieldnames=_csv_header(self.csv_path),
                                                           extrasaction="ignore")

    def _rewrite(self, rows: list[dict]) -> None:
        """Both files again from `rows` (the JSON file's complete lines), through temporary files."""
        for path, text in ((self.jsonl_path, "".join(json.dumps(r) + "\n" for r in rows)),
                           (self.csv_path, _csv_text(rows))):
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(text)
            os.replace(tmp, path)

    def has(self, key: str) -> bool:
        return key in self.done

    def write(self, row: dict) -> None:
        row = {k: _clean(row.get(k)) for k in COLUMNS}
        key = row_key(row)
        if key in self.done:
            return
        if self._writer is None:
            self._writer = csv.DictWriter(self._csv, fieldnames=csv_columns([row]), extrasaction="ignore")
            self._writer.writeheader()
        self._writer.writerow(csv_row(row))
        self._jsonl.write(json.dumps(row) + "\n")
        for f in (self._csv, self._jsonl):
            f.flush()
            if self.fsync_each:
                os.fsync(f.fileno())
        if not _transient(row):
            self.done.add(key)

    def close(self) -> None:
        if not self.fsync_each:
            for f in (self._csv, self._jsonl):
                try:
                    f.flush()
                    os.fsync(f.fileno())
                except (OSError, ValueError):  # closed already, or a file system without fsync: close it anyway
                    pass
        self._csv.close()
        self._jsonl.close()
        self._lock.release()

    def __enter__(self) -> "ResultsWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class Recorder:
    """One run's results folder while it runs: `write` is the one path every row of the run takes (static or
    launched, CUTLASS or Triton; a row already held, e.g. kept by --resume, is not written again); `meta` is its
    run.json, written by `save`."""
    writer: ResultsWriter
    meta: dict
    rows: list[dict] = field(default_factory=list)

    def has(self, key: str) -> bool:
        return self.writer.has(key)

    def write(self, row: dict) -> None:
        if not self.writer.has(row_key(row)):
            self.writer.write(row)
            self.rows.append(row)

    def save(self) -> None:
        (self.out / provenance.RUN_JSON).write_text(json.dumps(self.meta, indent=1))

    @property
    def out(self) -> Path:
        return self.writer.out


@contextmanager
def recording(out: Path, meta: dict, mode: str, command: str, resume: bool = False, seed: int | None = None,
              shard: tuple[int, int] | None = None, fsync_each: bool = True) -> Iterator[Recorder]:
    """With --resume, check the folder's run.json first (family, toolchain, evidence mode: provenance.check_resume);
    open the folder, write run.json (meta with the command, date, seed, shard and evidence mode), yield the Recorder,
    and write run.json again at the end (with whatever the run added to rec.meta: phases, references).
    `fsync_each=False`: rows are flushed as written and synced to disk once at the end (a run that writes all its
    rows at once and has no --resume: the audit)."""
    if resume:
        held = read_rows(out)[0] if (Path(out) / JSONL_NAME).is_file() else []
        provenance.check_resume(out, meta["family"], meta["toolchain"], mode, held)
    with ResultsWriter(out, resume=resume, fsync_each=fsync_each) as writer:
        rec = Recorder(writer, {"command": command, "date": now(), "seed": seed, **meta, "shard": shard,
                                "evidence_mode": mode})
        rec.save()
        yield rec
        rec.save()


def load_rows(folder: Path) -> list[dict]:
    """Rows of a results folder (JSON lines are the source of truth), each checked against the row schema: a bad
    line is a UsageError naming the file, line and column (see read_rows)."""
    return read_rows(folder)[0]


def jsonl_path(folder: Path) -> Path | None:
    """A folder's results.jsonl, or the results.jsonl.gz an archived (committed) folder keeps instead; None: neither."""
    for name in (JSONL_NAME, JSONL_NAME + ".gz"):
        if (Path(folder) / name).is_file():
            return Path(folder) / name
    return None


def read_rows(folder: Path) -> tuple[list[dict], list[str]]:
    """(rows, notes). Every line of results.jsonl must be a JSON row matching the row schema (schema.row_problems);
    the first that is not stops the read with one line naming the file, the line and the column. The one exception
    is a torn last line (no newline at its end: the process died while writing it), which is skipped and said in
    `notes`."""
    path = jsonl_path(folder)
    if path is None:
        raise UsageError(f"no {JSONL_NAME} in {folder}")
    try:
        text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    except (OSError, UnicodeDecodeError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise UsageError(f"{path}: not readable: {exc}") from None
    lines = text.split("\n")
    torn = lines.pop() if lines else ""  # text after the last newline: '' for a complete file
    rows, notes = [], []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            raise UsageError(f"{path}:{n}: empty line (each line of {JSONL_NAME} is one JSON row)")
        rows.append(_parse(path, n, line))
    if torn.strip():
        try:
            rows.append(_parse(path, len(lines) + 1, torn))
        except UsageError as exc:
            notes.append(f"{exc} — the last line has no newline (a write cut short): skipped, 1 line")
    return rows, notes


def _parse(path: Path, n: int, line: str) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}:{n}: not a JSON row ({exc.msg} at column {exc.colno})") from None
    problems = row_problems(row)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise UsageError(f"{path}:{n}: {problems[0]}{more}")
    return row


def csv_text(value) -> str:
    """A value as results.csv holds it: '' for none, swap_ab-style booleans as off/on (as the reports say)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def csv_columns(rows: list[dict]) -> list[str]:
    """The CSV columns for these rows: their family's (families.columns.ReportSpec.csv_columns of COLUMNS)."""
    return report_spec(rows).csv_columns(COLUMNS)


def _csv_header(path: Path) -> list[str]:
    with open(path, newline="") as f:
        header = next(csv.reader(f), None)
    return header if header and all(h in COLUMNS for h in header) else COLUMNS


def csv_row(row: dict) -> dict:
    return {k: csv_text(_clean(row.get(k))) for k in COLUMNS}


def check_csv(folder: Path, rows: list[dict]) -> None:
    """results.csv mirrors results.jsonl line for line; anything else in it (edited, truncated, garbage) is a
    UsageError naming the line and column, so a report is never rewritten beside a CSV that says something else.
    Files written before booleans became off/on hold False/True: both spellings are read. The CSV may hold one row
    more than the JSON file: ResultsWriter.write writes the CSV row first, so a process killed between the two (the
    JSON line torn, or not written at all) leaves that row in the CSV only; it is not a result."""
    path = Path(folder) / CSV_NAME
    if not path.is_file():
        return
    try:
        with open(path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if not header or any(h not in COLUMNS for h in header):
                bad = [h for h in header or [] if h not in COLUMNS][:1] or ["(empty)"]
                raise UsageError(f"{path}:1: not a tileprobe results.csv header (column {bad[0][:40]!r})")
            i = 0
            for record in reader:
                if i >= len(rows):
                    if i == len(rows):  # the one row of a write cut short (see above); a second is refused
                        i += 1
                        continue
                    raise UsageError(f"{path}:{reader.line_num}: a row beyond the {len(rows)} of {JSONL_NAME}")
                if len(record) != len(header):
                    raise UsageError(f"{path}:{reader.line_num}: {len(record)} fields, the header has {len(header)}")
                want = csv_row(rows[i])
                for col, got in zip(header, record):
                    if got != want[col] and _LEGACY_BOOL.get(got) != want[col]:
                        raise UsageError(f"{path}:{reader.line_num}: {col} is {got[:40]!r} but {JSONL_NAME} line "
                                         f"{i + 1} says {want[col][:40]!r}")
                i += 1
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UsageError(f"{path}: not readable as CSV: {exc}") from None
    if i < len(rows):
        raise UsageError(f"{path}: {i} rows, {JSONL_NAME} has {len(rows)}: the two files disagree")


_LEGACY_BOOL = {"False": "off", "True": "on"}


def _csv_records(path: Path) -> int:
    """How many data rows a results.csv holds (0 when it is missing or unreadable)."""
    try:
        with open(path, newline="") as f:
            return max(0, sum(1 for _ in csv.reader(f)) - 1)
    except (OSError, UnicodeDecodeError, csv.Error):
        return 0


def _csv_text(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=csv_columns(rows), extrasaction="ignore")
    w.writeheader()
    w.writerows(csv_row(r) for r in rows)
    return buf.getvalue()


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
