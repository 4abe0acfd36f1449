"""report.md's SharedStorage charts kept by content key (tileprobe.reports.chart_cache): a report drawn again from the
same rows copies the same PNG bytes without importing matplotlib; any input the picture depends on is another key."""

import json
import os
import subprocess
import sys

from _synth import make_static, meta_for, write_set

from tileprobe.reports import chart_cache, plots
from tileprobe.reports.markdown import render_report

CHART = "smem__rtx-pro-6000.png"


def _keys(cache):
    return sorted(p.name for p in (cache / chart_cache.FOLDER).rglob("*.png"))


def test_a_second_report_copies_the_kept_chart_byte_for_byte_without_matplotlib(tmp_path, rng):
    rows = make_static(rng, tiles=["128x128x128", "128x256x128"])
    cache = tmp_path / "cache"
    first, second = tmp_path / "a", tmp_path / "b"
    for folder in (first, second):
        write_set(folder, rows, meta_for())
    text = render_report(first, chart_cache=cache).read_text()
    assert len(_keys(cache)) == 1
    code = ("import sys; sys.modules['matplotlib'] = None\n"  # a kept chart needs no matplotlib at all
            "from pathlib import Path\n"
            "from tileprobe.reports.markdown import render_report\n"
            f"render_report(Path({str(second)!r}), chart_cache=Path({str(cache)!r}))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=os.path.dirname(__file__))
    assert p.returncode == 0, p.stderr
    assert (second / "report.md").read_text() == text
    assert (second / CHART).read_bytes() == (first / CHART).read_bytes()
    plain = tmp_path / "c"  # drawn without the cache: the same bytes
    write_set(plain, rows, meta_for())
    render_report(plain)
    assert (plain / CHART).read_bytes() == (first / CHART).read_bytes()


def test_every_drawn_input_is_in_the_key(tmp_path, rng, monkeypatch):
    rows = make_static(rng, tiles=["128x128x128", "128x256x128"])
    base = plots.chart_inputs(rows, 101376, "title")
    key = chart_cache.key("smem", base)
    assert key is not None and key == chart_cache.key("smem", plots.chart_inputs(rows, 101376, "title"))
    changed = []
    for field in plots.CHART_FIELDS:  # each field smem_chart reads, on a random bar
        i = rng.randrange(len(rows))
        other = [dict(r) for r in rows]
        other[i][field] = (other[i].get(field) or 0) + 1 if field.startswith("smem") else f"{other[i].get(field)}x"
        changed.append(plots.chart_inputs(other, 101376, "title"))
    other = [dict(r) for r in rows]
    other[0]["tile"] = "64x64x64"  # the bar's name (resultset.label)
    changed += [plots.chart_inputs(other, 101376, "title"), plots.chart_inputs(rows, 101375, "title"),
                plots.chart_inputs(rows, 101376, "title!"), plots.chart_inputs(rows, 101376, "title", "bytes"),
                plots.chart_inputs(rows, 101376, "title", names=["a", "b"])]
    keys = {chart_cache.key("smem", c) for c in changed}
    assert key not in keys and len(keys) == len(changed)
    # the drawing code, the libraries and matplotlib's environment
    monkeypatch.setenv("MPLBACKEND", "pdf")
    assert chart_cache.key("smem", base) != key
    monkeypatch.delenv("MPLBACKEND")
    real = chart_cache.content_key.files
    monkeypatch.setattr(chart_cache.content_key, "files", lambda *p: real(*p) + "edited")
    assert chart_cache.key("smem", base) != key
    monkeypatch.setattr(chart_cache.content_key, "files", real)
    real_dist = chart_cache.content_key.distribution
    monkeypatch.setattr(chart_cache.content_key, "distribution", lambda n: [*real_dist(n)[:1], "other files"])
    assert chart_cache.key("smem", base) != key
    monkeypatch.setattr(chart_cache.content_key, "distribution", real_dist)
    assert chart_cache.key("smem", base) == key
    # a folder of another library's own dist-infos put on sys.path in one process (ray's thirdparty_files, imported
    # by an earlier test of the same worker) is not a drawing input: the next process, without it, must find the key
    vendored = tmp_path / f"thirdparty{rng.randrange(10**6)}"
    (vendored / "psutil-5.9.8.dist-info").mkdir(parents=True)
    chart_cache.content_key.installed.cache_clear()
    monkeypatch.syspath_prepend(str(vendored))
    assert chart_cache.key("smem", base) == key
    chart_cache.content_key.installed.cache_clear()


def test_a_changed_row_draws_a_fresh_chart_and_a_matplotlibrc_turns_the_cache_off(tmp_path, rng, monkeypatch):
    rows = make_static(rng, tiles=["128x128x128", "128x256x128"])
    cache = tmp_path / "cache"
    write_set(tmp_path / "a", rows, meta_for())
    render_report(tmp_path / "a", chart_cache=cache)
    other = [dict(r) for r in rows]
    other[-1]["smem_bytes"] += 1024
    other[-1]["headroom_bytes"] -= 1024
    write_set(tmp_path / "b", other, meta_for())
    render_report(tmp_path / "b", chart_cache=cache)
    assert len(_keys(cache)) == 2
    assert (tmp_path / "a" / CHART).read_bytes() != (tmp_path / "b" / CHART).read_bytes()
    rc = tmp_path / "rc"
    rc.mkdir()
    (rc / "matplotlibrc").write_text("font.size: 20\n")
    monkeypatch.setenv("MATPLOTLIBRC", str(rc))
    assert chart_cache.key("smem", plots.chart_inputs(rows, 101376, "t")) is None


def test_a_broken_kept_chart_is_not_served_half(tmp_path, rng):
    rows = make_static(rng, tiles=["128x128x128"])
    cache = tmp_path / "cache"
    write_set(tmp_path / "a", rows, meta_for())
    render_report(tmp_path / "a", chart_cache=cache)
    kept = next((cache / chart_cache.FOLDER).rglob("*.png"))
    kept.unlink()
    kept.mkdir()  # unreadable as a file: drawn again
    write_set(tmp_path / "b", rows, meta_for())
    render_report(tmp_path / "b", chart_cache=cache)
    assert (tmp_path / "b" / CHART).read_bytes() == (tmp_path / "a" / CHART).read_bytes()
    assert json.dumps(plots.chart_inputs(rows, 1, "t"))  # plain data
