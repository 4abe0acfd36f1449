import csv
import gzip
import json

import pytest

from tileprobe.errors import UsageError
from tileprobe.families.columns import PATH_FIELDS, TRITON_FIELDS
from tileprobe.results.writer import COLUMNS, ResultsWriter, check_csv, csv_columns, csv_row, load_rows, row_key


def _row(rng, i):
    """A valid row (readers check every row against the row schema) with the fields these tests look at."""
    return {"family": "sm90-fp8", "config": f"cfg{i}", "target": "h200", "tile": "128x128x128",
            "schedule": "cooperative", "epilogue": "no-c", "swap_ab": rng.choice([False, True]), "stages": 4,
            "workload": rng.choice(["", "deepseek-v3"]), "batch": i + 1, "verdict": "ok", "evidence": "verified",
            "us_median": rng.uniform(1, 1000), "reason": "x, \"quoted\""}


def test_rows_are_flushed_one_by_one_and_resume_skips_them(tmp_path, rng):
    rows = [_row(rng, i) for i in range(rng.randint(3, 9))]
    w = ResultsWriter(tmp_path)
    for r in rows:
        w.write(r)
        # readable at once, before close: a crash after this line loses nothing
        assert len(load_rows(tmp_path)) == rows.index(r) + 1
    w.close()
    w2 = ResultsWriter(tmp_path, resume=True)
    assert all(w2.has(row_key(r)) for r in rows)
    for r in rows:
        w2.write(r)  # duplicates are dropped
    extra = _row(rng, 100)
    w2.write(extra)
    w2.close()
    got = load_rows(tmp_path)
    assert len(got) == len(rows) + 1
    with open(tmp_path / "results.csv") as f:
        table = list(csv.DictReader(f))
    # a CUTLASS family's CSV: every row column as before Triton's own existed
    assert len(table) == len(got) and list(table[0].keys()) == [c for c in COLUMNS if c not in TRITON_FIELDS + PATH_FIELDS]
    assert list(table[0].keys()) == csv_columns(got)
    assert table[-1]["config"] == "cfg100" and table[0]["reason"] == rows[0]["reason"]


def test_a_triton_familys_csv_has_its_columns_and_resume_keeps_them(tmp_path, rng):
    """results.csv of triton-moe rows: Triton's columns first (GEMM, M, where the config came from, BLOCK_*,
    num_warps), none of CUTLASS's; a resumed writer appends under the header the file has."""
    def row(i):
        bm, bn, bk = rng.choice([16, 32, 64]), rng.choice([64, 128]), rng.choice([64, 128])
        return {"family": "triton-moe", "config": f"t{i}", "target": "rtx-5090", "tile": f"{bm}x{bn}x{bk}",
                "schedule": "triton", "epilogue": "bf16-out", "swap_ab": False, "stages": rng.randint(2, 5),
                "gemm": rng.choice(["gate_up", "down"]), "batch": i + 1, "verdict": "fits", "evidence": "compiled",
                "block_m": bm, "block_n": bn, "block_k": bk, "num_warps": "4", "config_origin": "default",
                "config_source": "default", "smem_bytes": rng.randint(1, 99) * 1024, "cutlass_version": None}
    rows = [row(i) for i in range(rng.randint(2, 5))]
    with ResultsWriter(tmp_path) as w:
        for r in rows[:-1]:
            w.write(r)
    with ResultsWriter(tmp_path, resume=True) as w:
        w.write(rows[-1])
    with open(tmp_path / "results.csv") as f:
        table = list(csv.DictReader(f))
    header = list(table[0].keys())
    assert header == csv_columns(rows) and len(table) == len(rows)
    assert not [h for h in header if h in ("schedule", "tile_bytes_k") or "cutlass" in h or "nvcc" in h]
    for h in ("gemm", "batch", "config_origin", "config_source", "block_m", "block_n", "block_k", "num_warps"):
        assert h in header, h
    assert [int(t["block_m"]) for t in table] == [r["block_m"] for r in rows]
    check_csv(tmp_path, load_rows(tmp_path))  # the mirror check reads the family's columns


def test_a_new_sweep_moves_old_results_aside(tmp_path, rng):
    with ResultsWriter(tmp_path) as w:
        w.write(_row(rng, 1))
    with ResultsWriter(tmp_path) as w:
        w.write(_row(rng, 2))
    assert (tmp_path / "results.jsonl.1").is_file() and (tmp_path / "results.csv.1").is_file()
    assert [r["config"] for r in load_rows(tmp_path)] == ["cfg2"]


def test_torn_last_line_is_skipped(tmp_path, rng):
    with ResultsWriter(tmp_path) as w:
        w.write(_row(rng, 1))
    with open(tmp_path / "results.jsonl", "a") as f:
        f.write('{"config": "cfg2", "tar')
    assert len(load_rows(tmp_path)) == 1
    json.loads((tmp_path / "results.jsonl").read_text().splitlines()[0])


def test_a_points_identity_includes_its_problem_list_and_seed():
    from tileprobe.results.writer import row_key

    base = {"config": "c", "target": "h200", "workload": "deepseek-v3", "gemm": "down", "batch": 8,
            "routing": "uniform", "problem": "E=59 M=1..3 N=7168 K=2048", "problems_hash": "abc", "seed": 1}
    assert row_key(base) != row_key(dict(base, problems_hash="abd"))  # same label, other expert loads
    assert row_key(base) != row_key(dict(base, seed=2))
    legacy = dict(base, problems_hash=None, seed=None)  # older rows: the label stands in for the hash
    assert row_key(legacy) != row_key(dict(legacy, problem="E=60 M=1..3 N=7168 K=2048"))


def test_resume_after_a_torn_last_line_leaves_files_that_read_cleanly(tmp_path, rng):
    """A process killed while writing a row leaves a torn JSON line (its CSV row already written); --resume cuts it,
    re-runs that point, and the folder reads back with every row valid and the CSV mirroring the JSON."""
    rows = [_row(rng, i) for i in range(rng.randint(2, 6))]
    with ResultsWriter(tmp_path) as w:
        for r in rows:
            w.write(r)
    cut = _row(rng, 50)
    with open(tmp_path / "results.csv", "a", newline="") as f:
        csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore").writerow(csv_row(cut))
    line = json.dumps({k: cut.get(k) for k in COLUMNS})
    with open(tmp_path / "results.jsonl", "a") as f:
        f.write(line[: rng.randrange(5, len(line) - 5)])
    with ResultsWriter(tmp_path, resume=True) as w:
        assert not w.has(row_key(cut))
        w.write(cut)
    got = load_rows(tmp_path)
    assert [r["config"] for r in got] == [r["config"] for r in rows] + [cut["config"]]
    check_csv(tmp_path, got)  # raises unless results.csv mirrors results.jsonl line for line


def test_a_kill_between_the_csv_row_and_its_json_row_reads_and_resumes_cleanly(tmp_path, rng):
    """ResultsWriter.write puts the CSV row first: a process killed before the JSON line reached the file leaves the
    CSV one row ahead of a complete results.jsonl. The folder still reads (that row is not a result), and --resume
    re-runs that point and leaves the CSV mirroring the JSON."""
    rows = [_row(rng, i) for i in range(rng.randint(2, 6))]
    with ResultsWriter(tmp_path) as w:
        for r in rows:
            w.write(r)
    cut = _row(rng, 50)
    with open(tmp_path / "results.csv", "a", newline="") as f:
        csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore").writerow(csv_row(cut))
    got = load_rows(tmp_path)
    check_csv(tmp_path, got)  # one CSV row more than the JSON file: accepted
    assert [r["config"] for r in got] == [r["config"] for r in rows]
    jsonl = (tmp_path / "results.jsonl").read_text()
    with ResultsWriter(tmp_path, resume=True) as w:
        assert not w.has(row_key(cut)) and all(w.has(row_key(r)) for r in rows)
        w.write(cut)
    assert (tmp_path / "results.jsonl").read_text().startswith(jsonl)  # the finished rows, byte for byte
    got = load_rows(tmp_path)
    assert [r["config"] for r in got] == [r["config"] for r in rows] + [cut["config"]]
    with open(tmp_path / "results.csv", newline="") as f:
        assert [t["config"] for t in csv.DictReader(f)] == [r["config"] for r in got]  # the mirror, line for line
    check_csv(tmp_path, got)
    with open(tmp_path / "results.csv", "a", newline="") as f:  # two rows more than the JSON file: refused
        csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore").writerows([csv_row(cut), csv_row(cut)])
    with pytest.raises(UsageError, match="a row beyond"):
        check_csv(tmp_path, got)


def test_an_archived_folder_reads_from_results_jsonl_gz(tmp_path, rng):
    """Committed evidence folders keep results.jsonl gzip-compressed (results.jsonl.gz): read as the plain file is, and
    a damaged archive is one line."""
    rows = [_row(rng, i) for i in range(rng.randint(2, 7))]
    with ResultsWriter(tmp_path) as w:
        for r in rows:
            w.write(r)
    plain = load_rows(tmp_path)
    (tmp_path / "results.jsonl.gz").write_bytes(gzip.compress((tmp_path / "results.jsonl").read_bytes()))
    (tmp_path / "results.jsonl").unlink()
    (tmp_path / "results.csv").unlink()
    assert load_rows(tmp_path) == plain and [r["config"] for r in plain] == [r["config"] for r in rows]
    (tmp_path / "results.jsonl.gz").write_bytes(b"\x1f\x8b" + bytes(rng.randrange(256) for _ in range(40)))
    with pytest.raises(UsageError, match="not readable"):
        load_rows(tmp_path)
