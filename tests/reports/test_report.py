"""`tileprobe report`: markdown (header, verdicts, throughput with the best tile marked, charts), csv and json."""

import csv
import io
import json
import os
import re
import subprocess
import sys

from _synth import add_runtime, make_static, meta_for, write_set

from tileprobe.reports.markdown import markdown_table, render_report
from tileprobe.results.writer import csv_columns, load_rows
from tileprobe.results.resultset import best_by_point, label

PNG = b"\x89PNG\r\n\x1a\n"


def tileprobe(*args):
    return subprocess.run([sys.executable, "-m", "tileprobe", *args], capture_output=True, text=True, timeout=300)


def test_static_report_says_static_and_draws_the_limit(tmp_path, rng):
    rows = make_static(rng, tiles=["128x128x128", "128x256x128", "128x64x128"], epilogues=("no-c", "with-c"))
    write_set(tmp_path, rows, meta_for())
    text = render_report(tmp_path).read_text()
    assert "Evidence: static only — sized (types instantiated for sm_120a, sizes read); nothing launched" in text
    for needle in ("rtx-pro-6000", "101376 B", "188", "4.5.0", "flashinfer", "c5d864a34465695d", "13.0.88",
                   "tileprobe sweep (synthetic)", "2026-01-01"):
        assert needle in text, needle
    over = [r for r in rows if r["verdict"] == "smem-over-limit"]
    assert f"{len(over)} over the opt-in limit" in text
    for r in rows:  # every config has its verdict line, with its bytes and stages as configured -> resolved
        assert re.search(rf"\| {r['tile']} .*\| auto→{r['stages']} .*\| {r['smem_bytes']} .*\| {r['verdict']} ", text)
    png = tmp_path / "smem__rtx-pro-6000.png"
    assert png.read_bytes()[:8] == PNG and "](smem__rtx-pro-6000.png)" in text
    assert not list(tmp_path.glob("throughput__*.png"))  # nothing launched, no throughput chart


def test_best_tile_per_batch_is_the_fastest_ok_row(tmp_path, rng):
    static = make_static(rng, tiles=["128x128x128", "128x256x128", "128x64x128", "128x32x128"],
                         epilogues=("no-c", "with-c"))
    runtime = add_runtime(rng, static, batches=(1, 8, 32, 128), fail_rate=0.3)
    # a failing row faster than every ok row must never be called best
    trap = next(r for r in runtime if r["verdict"] == "incorrect") if any(
        r["verdict"] == "incorrect" for r in runtime) else None
    if trap:
        trap["us_median"] = 0.001
    write_set(tmp_path, static + runtime, meta_for())
    text = render_report(tmp_path).read_text()
    assert "Evidence: verified correct" in text
    groups = {}
    for r in runtime:
        groups.setdefault((r["gemm"], r["batch"], r["epilogue"]), []).append(r)
    for (gemm, batch, epi), rs in groups.items():
        ok = sorted((r for r in rs if r["verdict"] == "ok"), key=lambda r: r["us_median"])
        section = text.split(f"· {gemm} on")[1].split("###")[0]
        line = next(l for l in section.splitlines() if re.match(rf"\| {batch}\s+\| {epi}\s+\|", l))
        if ok:
            assert label(ok[0]) in line and f"{ok[0]['us_median']:.2f}" in line
        else:
            assert "no verified-correct tile" in line
    marks = text.count("★ best")
    assert marks == sum(1 for rs in best_by_point(runtime).values() if rs)
    for name in ("throughput__gbps.png", "throughput__us_median.png", "smem__rtx-pro-6000.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG and f"]({name})" in text


def test_missing_run_json_is_tolerated(tmp_path, rng):
    write_set(tmp_path, make_static(rng, tiles=["128x128x128"]))
    text = render_report(tmp_path).read_text()
    assert "run.json is missing" in text and "rtx-pro-6000" in text and "4.5.0" in text


def test_without_matplotlib_charts_are_skipped_with_a_note(tmp_path, rng):
    write_set(tmp_path, make_static(rng, tiles=["128x128x128"]), meta_for())
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from tileprobe.reports.markdown import render_report\n"
            f"print(render_report({str(tmp_path)!r}))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=os.path.dirname(__file__))
    assert p.returncode == 0, p.stderr
    text = (tmp_path / "report.md").read_text()
    assert "Charts skipped: matplotlib unavailable" in text and not list(tmp_path.glob("*.png"))


def test_csv_and_json_export_the_same_rows(tmp_path, rng):
    static = make_static(rng, tiles=["128x128x128", "128x64x128"])
    write_set(tmp_path, static + add_runtime(rng, static, batches=(1, 8)), meta_for())
    rows = load_rows(tmp_path)
    p = tileprobe("report", str(tmp_path), "--format", "json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == rows
    p = tileprobe("report", str(tmp_path), "--format", "csv")
    table = list(csv.DictReader(io.StringIO(p.stdout)))
    assert list(table[0]) == csv_columns(rows) and len(table) == len(rows)
    assert [t["config"] for t in table] == [r["config"] for r in rows]
    assert [t["us_median"] for t in table] == ["" if r.get("us_median") is None else str(r["us_median"])
                                               for r in rows]
    p = tileprobe("report", str(tmp_path), "--format", "md")
    assert p.returncode == 0 and (tmp_path / "report.md").is_file()


def test_report_bad_input_is_one_line(tmp_path):
    for args, needle in ((["report", str(tmp_path / "nope")], "not a results folder"),
                         (["report", str(tmp_path), "--format", "xml"], "--format")):
        (tmp_path / "results.jsonl").write_text("")
        p = tileprobe(*args)
        assert p.returncode == 2 and "Traceback" not in p.stderr
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        assert len(lines) == 1 and needle in lines[0], p.stderr


def test_reports_say_the_evidence_words_the_rows_hold(tmp_path, rng):
    """A `sized` set is not called 'static (compiled, sizes read)': the verdict section, the chart caption and the
    chart title say the rows' own word."""
    rows = make_static(rng, tiles=["128x128x128", "128x64x128"], epilogues=("no-c",))
    word = rng.choice(["sized", "compiled"])
    for r in rows:
        r["evidence"] = word
    write_set(tmp_path, rows, meta_for())
    text = render_report(tmp_path).read_text()
    assert "static (compiled" not in text and "Evidence: static." not in text
    verdicts = next(l for l in text.splitlines() if "Evidence of `fits`/`smem-over-limit`" in l)
    assert f"`{word}`" in verdicts and ("`sized`" in verdicts) == (word == "sized")
    caption = next(l for l in text.splitlines() if l.startswith("SharedStorage per config against"))
    assert caption.endswith(f"Evidence: {word}.")


def _corrupt_row(tmp_path, rng):
    rows = make_static(rng, tiles=["128x128x128", "128x64x128", "128x256x128"])
    folder = write_set(tmp_path / "s", rows, meta_for())
    lines = (folder / "results.jsonl").read_text().splitlines()
    n = rng.randrange(len(lines))
    bad = json.loads(lines[n])
    field = rng.choice(["smem_bytes", "verdict"])
    bad.update(smem_bytes="lots", verdict="banana") if rng.random() < 0.5 else bad.update({field: {
        "smem_bytes": "lots", "verdict": "banana"}[field]})
    lines[n] = json.dumps(bad)
    (folder / "results.jsonl").write_text("\n".join(lines) + "\n")
    return folder, n + 1, bad


def test_a_bad_row_is_one_line_naming_file_line_and_field(tmp_path, rng):
    folder, line, bad = _corrupt_row(tmp_path, rng)
    fields = [f for f in ("smem_bytes", "verdict") if bad[f] in ("lots", "banana")]
    other = write_set(tmp_path / "o", make_static(rng, tiles=["128x128x128"]), meta_for())
    for args in (["report", str(folder)], ["report", str(folder), "--format", "csv"],
                 ["diff", str(folder), str(other)], ["known-good", "write", str(folder), "--out",
                                                     str(tmp_path / "kg.json")]):
        p = tileprobe(*args)
        assert p.returncode == 2 and "Traceback" not in p.stderr, (args, p.stderr[-400:])
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        assert len(lines) == 1, p.stderr
        assert f"results.jsonl:{line}:" in lines[0] and any(f in lines[0] for f in fields), lines[0]
        assert not p.stdout.strip(), args  # nothing passed through
    assert not (tmp_path / "kg.json").exists() and not (folder / "report.md").exists()


def test_a_non_json_line_stops_the_read_but_a_torn_last_line_is_skipped_and_said(tmp_path, rng):
    rows = make_static(rng, tiles=["128x128x128", "128x64x128", "128x256x128"])
    folder = write_set(tmp_path / "s", rows, meta_for())
    good = (folder / "results.jsonl").read_text()
    lines = good.splitlines()
    n = rng.randrange(len(lines))
    lines.insert(n, "not json at all " + str(rng.random()))
    (folder / "results.jsonl").write_text("\n".join(lines) + "\n")
    p = tileprobe("report", str(folder))
    assert p.returncode == 2 and f"results.jsonl:{n + 1}: not a JSON row" in p.stderr, p.stderr
    (folder / "results.jsonl").write_text(good + '{"family": "sm120-nvfp4", "conf')  # a write cut short
    text = render_report(folder).read_text()
    assert "skipped, 1 line" in text


def test_garbage_in_results_csv_is_not_ignored(tmp_path, rng):
    rows = make_static(rng, tiles=["128x128x128", "128x64x128", "128x256x128"])
    folder = write_set(tmp_path / "s", rows, meta_for())
    table = (folder / "results.csv").read_text().splitlines()
    n = rng.randrange(1, len(table))
    how = rng.choice(["edit", "garbage", "drop"])
    if how == "edit":
        table[n] = table[n].replace(str(rows[n - 1]["smem_bytes"]), "lots", 1)
    elif how == "garbage":
        table.insert(n, "banana,banana")
    else:
        del table[n]
    (folder / "results.csv").write_text("\n".join(table) + "\n")
    p = tileprobe("report", str(folder))
    assert p.returncode == 2 and "Traceback" not in p.stderr, (how, p.stderr)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "results.csv" in lines[0], (how, lines)
    assert not (folder / "report.md").exists()


def test_csv_says_swap_as_the_report_does(tmp_path, rng):
    static = make_static(rng, tiles=["128x128x128", "128x64x128"])
    for r in static:
        r["swap_ab"] = rng.choice([False, True])
    write_set(tmp_path, static, meta_for())
    on_disk = list(csv.DictReader(open(tmp_path / "results.csv", newline="")))
    p = tileprobe("report", str(tmp_path), "--format", "csv")
    assert p.returncode == 0, p.stderr
    exported = list(csv.DictReader(io.StringIO(p.stdout)))
    want = ["on" if r["swap_ab"] else "off" for r in static]
    assert [t["swap_ab"] for t in on_disk] == want == [t["swap_ab"] for t in exported]
    text = render_report(tmp_path).read_text()
    for r in static:
        assert re.search(rf"\| {r['tile']} .*\| {'on' if r['swap_ab'] else 'off'} ", text)


def test_markdown_tables_write_bytes_as_written_and_none_as_blank(rng):
    """A column of byte counts with a row that has none (an unsupported config) stays integers: no "89088.0", no
    "nan" (a DataFrame would turn the column into floats), and text cells are not parsed as numbers."""
    sizes = [rng.randrange(1, 300) * 1024 for _ in range(rng.randint(2, 6))]
    gap = rng.randrange(len(sizes))
    recs = [{"config": f"0{i}x{rng.randint(1, 9)}", "SharedStorage (bytes)": None if i == gap else s}
            for i, s in enumerate(sizes)]
    rows = markdown_table(recs).splitlines()[2:]
    cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows]
    assert [c[0] for c in cells] == [r["config"] for r in recs]  # "01x3" kept as written
    assert [c[1] for c in cells] == ["" if i == gap else str(s) for i, s in enumerate(sizes)]
    assert markdown_table([]) == "_(none)_"
