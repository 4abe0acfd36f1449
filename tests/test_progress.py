"""Progress of long work (tileprobe.progress): one plain line per finished unit on stderr where stderr is not a
terminal, rich's live bar (done/total, the last unit, elapsed and left) where it is; stdout keeps only what the
command prints; TILEPROBE_PROGRESS=0 silences it, =bar forces the bar."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from tileprobe import progress
from tileprobe.backends.triton.toolchain import installed
from tileprobe.engines import triton_configs as tc
from tileprobe.engines import vllm
from tileprobe.errors import UsageError
from tileprobe.targets import DEVICE_NAMES

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^\[(\d+)/(\d+)\] (.+?)(?:: (\S+)(?: \((\d+) B\))?)? (\S+) elapsed, "
                  r"(?:~(\S+) left|time left unknown \(so far answered from the cache\))$")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
SM120_TILES = ["128x128x128", "128x256x128", "256x128x128", "128x64x128", "256x256x256", "128x128x64", "128x256x64"]


# what rich reads to decide a console is a terminal whatever the stream (a CI may set FORCE_COLOR)
TERMINAL_ENV = (progress.ENV, "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


@pytest.fixture(autouse=True)
def _no_forcing(monkeypatch):
    for k in TERMINAL_ENV:
        monkeypatch.delenv(k, raising=False)


def _cli(*args, env=None, timeout=600):
    e = {k: v for k, v in os.environ.items() if k not in TERMINAL_ENV} | {"PYTHONPATH": str(ROOT)} | (env or {})
    return subprocess.run([sys.executable, "-m", "tileprobe", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=e)


def _rows(folder: Path) -> list[dict]:
    return [json.loads(x) for x in (folder / "results.jsonl").read_text().splitlines()]


def _progress_lines(stderr: str) -> list[re.Match]:
    return [m for m in map(LINE.match, stderr.splitlines()) if m]


def _one_line_per_row(p, rows: list[dict], name_of) -> list[re.Match]:
    """stderr holds exactly one plain progress line per row, numbered 1..n of n, naming each row's config once with
    its verdict and bytes; stdout holds none of them."""
    got = _progress_lines(p.stderr)
    assert len(got) == len(rows) > 0, p.stderr
    assert [(int(m[1]), int(m[2])) for m in got] == [(i + 1, len(rows)) for i in range(len(rows))], p.stderr
    by_name = {name_of(r): r for r in rows}
    assert sorted(m[3] for m in got) == sorted(by_name), (p.stderr, sorted(by_name))
    for m in got:
        r = by_name[m[3]]
        assert m[4] == r["verdict"] and (m[5] and int(m[5])) == r["smem_bytes"], (m[0], r["verdict"], r["smem_bytes"])
    assert not _progress_lines(p.stdout) and "elapsed" not in p.stdout, p.stdout
    return got


def test_predict_only_json_gets_one_stderr_line_per_config_and_clean_json(tmp_path, rng):
    tiles = rng.sample(SM120_TILES, rng.randint(2, 4))
    stages = rng.sample(["auto", "2", "3"], rng.randint(1, 2))
    target = rng.choice(["rtx-pro-6000", "rtx-5090", "dgx-spark-gb10"])
    p = _cli("sweep", "--predict-only", "--target", target, "--tiles", ",".join(tiles), "--stages",
             ",".join(stages), "--out", tmp_path / "o", "--json")
    assert p.returncode == 0, p.stderr
    rows = _rows(tmp_path / "o")
    _one_line_per_row(p, rows, lambda r: r["config"])
    assert [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")] == rows  # the JSON is whole
    quiet = _cli("sweep", "--predict-only", "--target", target, "--tiles", ",".join(tiles), "--stages",
                 ",".join(stages), "--out", tmp_path / "q", "--json", env={progress.ENV: rng.choice(["0", "off"])})
    assert quiet.returncode == 0 and not _progress_lines(quiet.stderr) and quiet.stderr.strip() == "", quiet.stderr


def test_a_static_sweep_reports_each_config_as_it_is_final(tmp_path, rng):
    """The CUTLASS static path (sweep.static_rows -> probe_static's on_outcome): an sm90-fp8 sweep judged on an
    SM120 target, where every config is unsupported, so nothing is compiled and the test stays cheap."""
    tiles = rng.sample(["128x128x128", "128x256x128", "64x128x128", "128x128x64", "128x64x128"], rng.randint(1, 3))
    p = _cli("sweep", "--static-only", "--family", "sm90-fp8", "--target", rng.choice(["rtx-pro-6000", "rtx-5090"]),
             "--tiles", ",".join(tiles), "--out", tmp_path / "o", "--json")
    assert p.returncode == 0, p.stderr
    rows = _rows(tmp_path / "o")
    assert {r["verdict"] for r in rows} == {"unsupported"}
    _one_line_per_row(p, rows, lambda r: r["config"])


def test_a_forced_terminal_shows_the_bar_not_lines(tmp_path, rng):
    """TILEPROBE_PROGRESS=bar: rich's live bar on stderr even into a pipe, with done/total, the last config,
    elapsed and left; no plain lines; stdout as without it."""
    tiles = rng.sample(SM120_TILES, rng.randint(2, 3))
    p = _cli("sweep", "--predict-only", "--target", "rtx-pro-6000", "--tiles", ",".join(tiles), "--out",
             tmp_path / "o", "--json", env={progress.ENV: "bar", "COLUMNS": "240"})
    assert p.returncode == 0, p.stderr
    rows = _rows(tmp_path / "o")
    assert ANSI.search(p.stderr), p.stderr
    text = ANSI.sub("", p.stderr)
    assert not _progress_lines(text), text
    n = len(rows)
    assert re.search(rf"predicting \(rtx-pro-6000\).* {n}/{n} \d+:\d\d:\d\d elapsed, \d+:\d\d:\d\d left", text), text
    assert rows[-1]["config"] in text, text
    assert [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")] == rows


def _names(rng, k: int) -> list[str]:
    return [f"cfg{rng.randrange(10**6)}_{i}" for i in range(k)]


def test_the_bar_renders_done_total_the_last_unit_and_the_times(rng):
    total = rng.randint(3, 40)
    k = rng.randint(1, total - 1)
    names = _names(rng, k)
    verdicts = [rng.choice(["fits", "smem-over-limit"]) for _ in names]
    buf = io.StringIO()
    con = Console(file=buf, force_terminal=True, width=200)
    label = f"label{rng.randrange(1000)}"
    with progress.track(total, label, console=con) as bar:
        assert bar.mode == "bar"
        for n, v in zip(names, verdicts):
            bar.done(n, v)
    raw = buf.getvalue()
    assert ANSI.search(raw), raw
    text = ANSI.sub("", raw)
    assert re.search(rf"{label} .* {k}/{total} \d+:\d\d:\d\d elapsed, (\d+:\d\d:\d\d|-:--:--) left", text), text
    assert f"{names[-1]}: {verdicts[-1]}" in text, text
    assert not _progress_lines(text), text


def test_without_a_terminal_each_unit_is_one_line_with_its_verdict(rng):
    total = rng.randint(2, 30)
    names = _names(rng, total)
    smem = [rng.randrange(1, 300000) for _ in names]

    class Info:  # what an outcome carries (rows.Outcome: .verdict.value, .info.smem_bytes)
        def __init__(self, b):
            self.smem_bytes = b

    class Word:
        def __init__(self, v):
            self.value = v

    class Out:
        def __init__(self, v, b):
            self.verdict, self.info = Word(v), Info(b)

    buf = io.StringIO()
    with progress.track(total, "x", console=Console(file=buf, width=40)) as bar:
        assert bar.mode == "lines"
        for n, b in zip(names, smem):
            bar.done(n, Out("fits" if b < 101376 else "smem-over-limit", b))
    got = _progress_lines(buf.getvalue())
    assert [(int(m[1]), int(m[2]), m[3], int(m[5])) for m in got] == \
        [(i + 1, total, n, b) for i, (n, b) in enumerate(zip(names, smem))], buf.getvalue()
    assert len(buf.getvalue().splitlines()) == total  # never wrapped, whatever the width


def test_the_environment_chooses_and_a_tool_with_its_own_bar_stays_silent_on_a_terminal(monkeypatch, rng):
    term = Console(file=io.StringIO(), force_terminal=True)
    pipe = Console(file=io.StringIO())
    assert (progress.mode(term), progress.mode(pipe)) == ("bar", "lines")
    monkeypatch.setenv(progress.ENV, rng.choice(["0", "off", "no", "false"]))
    assert (progress.mode(term), progress.mode(pipe)) == ("off", "off")
    monkeypatch.setenv(progress.ENV, "lines")
    assert progress.mode(term) == "lines"
    monkeypatch.setenv(progress.ENV, "bar")
    assert progress.make_console().is_terminal
    monkeypatch.delenv(progress.ENV)
    with progress.track(3, "x", console=term, bar=False) as bar:
        bar.done("a")
    assert term.file.getvalue() == ""


def _triton_engine():
    if installed() is None:
        pytest.skip("Triton is not installed")
    try:
        return tc.find_engine("vllm")
    except UsageError as exc:
        pytest.skip(str(exc))


@pytest.mark.triton
def test_check_configs_reports_each_compiled_entry_with_its_bytes(tmp_path, rng):
    """compile_many's on_result, through check-configs on a one-file tree (--compile-all: every launch compiled,
    none answered by the predictor): one line per entry launch compiled, each with the bytes its row says."""
    _triton_engine()
    f = tmp_path / vllm.config_file_name(rng.choice([64, 128]), rng.choice([256, 768]), tc.scheme("bf16"),
                                         rng.choice(DEVICE_NAMES["rtx-pro-6000"]))
    keys = rng.sample([1, 2, 4, 8, 16, 32, 64], rng.randint(1, 2))
    f.write_text(json.dumps({str(k): {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": rng.choice([32, 64]),
                                      "BLOCK_SIZE_K": rng.choice([64, 128]), "GROUP_SIZE_M": 1, "num_warps": 4,
                                      "num_stages": rng.choice([2, 3])} for k in keys}))
    p = _cli("check-configs", f, "--out", tmp_path / "out", "--jobs", "2", "--compile-all")
    assert p.returncode == 0, p.stdout + p.stderr
    rows = _rows(tmp_path / "out")
    got = _progress_lines(p.stderr)
    assert len(got) == len(rows) == 2 * len(keys), p.stderr  # vLLM: one entry, both GEMMs
    assert sorted((f"M={r['batch']} {r['gemm']}", r["smem_bytes"]) for r in rows) == sorted(
        (re.search(r"M=\d+ \w+", m[3])[0], int(m[5])) for m in got), p.stderr
    assert all(m[4] == "fits" for m in got) and not _progress_lines(p.stdout)
    # export triton-configs of the same file (the same launches: from the cache): one line per entry and GEMM,
    # with the bytes check-configs compiled
    e = _cli("export", "triton-configs", f, "--target", "rtx-pro-6000", "--out", tmp_path / "exp", "--jobs", "2", "--compile-all")
    assert e.returncode == 0, e.stdout + e.stderr
    lines = _progress_lines(e.stderr)
    assert sorted((re.search(r"M=\d+", m[3])[0] + " " + m[3].split()[-1], int(m[5])) for m in lines) == sorted(
        (f"M={r['batch']} {r['gemm']}", r["smem_bytes"]) for r in rows), e.stderr


def test_check_reports_each_tile_of_a_file(tmp_path, rng):
    """`check` (results/known_good.py -> probe_static's on_outcome): tiles of a committed file moved to a cluster
    SM120 does not run, so each is unsupported without a compile: one line per tile, naming the config its
    regression line names."""
    doc = json.loads((ROOT / "results" / "known_good" / "rtx-pro-6000__sm120-nvfp4.json").read_text())
    doc["tiles"] = [dict(e, cluster="2x1x1") for e in rng.sample(doc["tiles"], rng.randint(1, 4))]
    path = tmp_path / "moved.json"
    path.write_text(json.dumps(doc))
    p = _cli("check", path, "--jobs", "1")
    assert p.returncode == 1, p.stdout + p.stderr
    regressed = [re.search(r" \[([^\]]+)\]: was ", line)[1] for line in p.stdout.splitlines()
                 if line.startswith("REGRESSION")]
    got = _progress_lines(p.stderr)
    assert len(got) == len(doc["tiles"]) == len(regressed), (p.stdout, p.stderr)
    assert sorted(m[3] for m in got) == sorted(regressed) and {m[4] for m in got} == {"unsupported"}, p.stderr


@pytest.mark.triton
def test_a_triton_moe_sweep_reports_each_launch_compiled(tmp_path, rng):
    """The triton-moe sweep (compile_many's on_result in triton_sweep.run): one line per launch the engine's pick
    compiles, with the bytes its row says; here the user's config file answers one M on one SKU name."""
    _triton_engine()
    dev, m = rng.choice(DEVICE_NAMES["rtx-pro-6000"]), rng.choice([1, 2, 4, 8, 16, 32])
    folder = tmp_path / "tuned"
    folder.mkdir()
    (folder / vllm.config_file_name(128, 768, tc.scheme("bf16"), dev)).write_text(json.dumps({str(m): {
        "BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": rng.choice([32, 64]), "BLOCK_SIZE_K": rng.choice([64, 128]),
        "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": rng.choice([2, 3])}}))
    p = _cli("sweep", "--family", "triton-moe", "--engine", "vllm", "--workload", "qwen3-30b-a3b", "--quant", "bf16",
             "--target", "rtx-pro-6000", "--device-name", dev, "--config-dir", folder, "--batch", m, "--out",
             tmp_path / "o", "--jobs", "2", "--json", "--compile-all")
    assert p.returncode == 0, p.stderr
    rows = _rows(tmp_path / "o")
    got = _progress_lines(p.stderr)
    assert len(got) == len(rows) == 2, p.stderr  # gate_up and down
    assert sorted((re.search(r"M=\d+ \w+", x[3])[0], x[4], int(x[5])) for x in got) == sorted(
        (f"M={r['batch']} {r['gemm']}", r["verdict"], r["smem_bytes"]) for r in rows), p.stderr
    assert [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")] == rows


def test_units_answered_from_a_cache_give_no_time_left_and_slow_ones_do(monkeypatch, rng):
    """A run whose first units came from the cache in no time says the time left is unknown (it used to say ~0.0s
    left at item 36 of 80, with minutes of compiles to come); once units take time, it estimates again."""
    now = [1000.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    total = rng.randint(6, 40)
    cached = rng.randint(2, total - 3)
    buf = io.StringIO()
    with progress.track(total, "x", console=Console(file=buf, width=200)) as bar:
        for i in range(total - 1):
            now[0] += 0.001 if i < cached else rng.uniform(5, 60)
            bar.done(f"unit{i}", "fits")
    lines = buf.getvalue().splitlines()
    assert all("time left unknown" in ln for ln in lines[:cached]), lines
    assert all("time left unknown" not in ln and re.search(r"~\S+ left$", ln) for ln in lines[cached + 1:]), lines
