"""Each family's tables and report speak its own words (families/columns.py): CUTLASS families print what they printed
before ReportSpec existed, byte for byte; triton-moe's terminal table, report.md and CSV say which GEMM and M a row
is, where its config came from, BLOCK_*, num_warps and num_stages, and none of CUTLASS's words."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from tileprobe.errors import UsageError
from tileprobe.families import triton_moe as tm
from tileprobe.reports import plots
from tileprobe.reports.markdown import render_markdown
from tileprobe.reports.report import export
from tileprobe.reports.terminal import print_rows
from tileprobe.results.resultset import load
from tileprobe.triton.sweep import engine_kernel_source

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "reports" / "data" / "cutlass_main"
# Committed CUTLASS folders whose terminal tables and CSV export main 349c23a printed (DATA, captured there) and
# whose committed report.md main re-renders byte for byte: sm90 runtime with faults, a foreign-arch set, an engine's
# tactics, a predicted set, flashinfer-moe runtime, an over-full stage count.
CUTLASS = ["h200/faults/corrupt", "h200/sm120_not_runnable_here", "static/b200__vllm-moe",
           "static/rtx-pro-6000__sm120-nvfp4__predict-check", "h200/flashinfer-moe/faults/corrupt_finalize_swap_on",
           "h200/seed_case_overfull_stages"]
# Every committed triton-moe folder small enough to render in a second (the four big check-configs sets are the same
# shape as the two `__own` ones).
TRITON = ["h200/triton-moe/sglang_bf16", "h200/triton-moe/vllm_bf16", "h200/triton-moe/vllm_fp8-block",
          "h200/triton-moe-tune", "triton-moe/check-configs/sglang-small-smem__own",
          "triton-moe/check-configs/vllm-small-smem__own",
          *(f"static/rtx-pro-6000__triton-moe/{d}" for d in (
              "sglang__deepseek-v3__tp4__bf16", "sglang__qwen3-30b-a3b__tp1__bf16",
              "sglang__qwen3-30b-a3b__tp1__fp8-block", "sglang__qwen3-30b-a3b__tp1__fp8",
              "vllm__deepseek-v3__tp4__fp8-block", "vllm__qwen3-30b-a3b__tp1__bf16",
              "vllm__qwen3-30b-a3b__tp1__fp8-block", "vllm__qwen3-30b-a3b__tp1__fp8"))]
CUTLASS_WORDS = ("SharedStorage", "carveout", "ptxas", "schedule", "CUTLASS")


@pytest.fixture
def no_charts(monkeypatch):
    """report.md's text without drawing: the chart functions only write PNGs."""
    monkeypatch.setattr(plots, "matplotlib_missing", lambda: None)
    monkeypatch.setattr(plots, "smem_chart", lambda rows, limit, title, path, **kw: path)
    monkeypatch.setattr(plots, "throughput_chart", lambda rows, path, metric="gbps", **kw: path)


def _terminal(rows: list[dict], wide: bool = False) -> str:
    con = Console(width=120, file=io.StringIO(), record=True, color_system=None)
    print_rows(rows, con, wide)
    return con.export_text()


def _name(folder: str) -> str:
    return folder.replace("/", "__")


@pytest.mark.parametrize("folder", CUTLASS)
def test_cutlass_tables_report_and_csv_are_todays_byte_for_byte(folder, tmp_path, no_charts):
    path = ROOT / "results" / folder
    rs = load(path)
    assert _terminal(rs.rows) == (DATA / f"{_name(folder)}.txt").read_text()
    assert _terminal(rs.rows, wide=True) == (DATA / f"{_name(folder)}.wide.txt").read_text()
    assert export(path, "csv") == (DATA / f"{_name(folder)}.csv").read_text()
    assert render_markdown(rs, tmp_path) == (path / "report.md").read_text()


def _no_cutlass_words(text: str, where: str) -> None:
    # The target's `numbers from` row cites where its limits were read (for some GPUs CUTLASS's arch.h): a source,
    # not a claim about this run.
    lines = [ln for ln in text.splitlines() if not ln.startswith("| numbers from |")]
    for word in CUTLASS_WORDS:
        hits = [ln for ln in lines if word in ln]
        assert not hits, (where, word, hits[:2])


def _md_rows(text: str, header_word: str = "metadata.shared B") -> tuple[list[str], list[dict]]:
    """The tables of report.md whose header holds `header_word` (one verdict table per target): the first's header
    cells and every table's rows as {header: cell}."""
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith("|") and header_word in ln]
    assert starts, header_word
    first, recs = None, []
    for start in starts:
        head = [c.strip() for c in lines[start].strip("|").split("|")]
        first = first or head
        for ln in lines[start + 2:]:
            if not ln.startswith("|"):
                break
            recs.append(dict(zip(head, (c.strip() for c in ln.strip("|").split("|")))))
    return first, recs


def _first_m(cell: str) -> int:
    """The batch size of an M cell: '8', '1..32', '>=1024', '8 (in 7..12)'."""
    return int(cell.split(" ")[0].split("..")[0].lstrip(">="))


def _check_triton_report(text: str, rs, where: str) -> None:
    """report.md of triton-moe rows: Triton's header, and per static row its GEMM, M, config source, BLOCK_*,
    num_warps, num_stages and bytes, grouped by GEMM then M; the runtime rows' table says the same of each launch."""
    _no_cutlass_words(text, where)
    for item in ("| Triton |", "| engine |", "| kernel |", "`fused_moe_kernel`"):
        assert item in text, (where, item)
    assert "| nvcc |" not in text and "auto→N" not in text
    if rs.runtime:
        head, _ = _md_rows(text, "± µs")
        for h in ("M", "config from", "BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"):
            assert h in head, (where, h, head)
        for gemm in {r["gemm"] for r in rs.runtime}:
            assert f"· {gemm} on" in text, (where, gemm)
        for dev in {r["device_name"] for r in rs.runtime if r["evidence"] == "verified"}:
            assert f"`verified` (launched on {dev}, every output element checked" in text, (where, dev)
    if not rs.static:
        return
    head, recs = _md_rows(text)
    for h in ("GEMM", "M", "config from", "BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"):
        assert h in head, (where, h, head)
    static = rs.static
    assert len(recs) == len(static), where
    unmatched = list(recs)
    for r in static:
        bm, bn, bk = r["tile"].split("x")
        src = r["config_source"]
        for rec in unmatched:
            if (rec["GEMM"], rec["num_warps"], rec["num_stages"], rec["metadata.shared B"]) == (
                    r["gemm"], r["num_warps"], str(r["stages"]), str(r["smem_bytes"]) if r["smem_bytes"] else "–") \
                    and (rec["BLOCK_M"], rec["BLOCK_N"], rec["BLOCK_K"]) == (bm, bn, bk) \
                    and _first_m(rec["M"]) == r["batch"] \
                    and (("engine default" in rec["config from"]) if src == "default" else
                         (src.rsplit("#", 1)[0].split(":", 1)[-1] in rec["config from"]
                          and rec["config from"].endswith(f"#{src.rsplit('#', 1)[1]}"))) \
                    and rec.get("device", r["device_name"]) == r["device_name"]:
                unmatched.remove(rec)
                break
        else:
            raise AssertionError((where, "no report row for", r["config"], r["gemm"], r["batch"]))
    for target in {r["target"] for r in static}:  # one table per target, each by GEMM then M
        _, mine = _md_rows(text.split(f"## Verdicts on {target} ")[1].split("\n## ")[0])
        order = [(rec["GEMM"] != "gate_up", _first_m(rec["M"])) for rec in mine]
        assert order == sorted(order), (where, target, "not grouped by GEMM then M")


def _check_triton_terminal(text: str, where: str) -> None:
    """The terminal table at 120 columns: nothing wider, Triton's headers whole."""
    _no_cutlass_words(text, where)
    assert max(len(ln) for ln in text.splitlines()) <= 120, where
    header = next(ln for ln in text.splitlines() if "GEMM" in ln)
    for h in (" GEMM ", " M ", " config from ", " num_warps ", " BLOCK_M/N/K "):
        assert h in header, (where, h, header)


def _check_triton_csv(text: str, where: str) -> None:
    header = text.splitlines()[0].split(",")
    assert not [h for h in header if "cutlass" in h.lower() or h in ("schedule", "tile_bytes_k", "nvcc_version")]
    for h in ("gemm", "batch", "config_source", "config_origin", "config_file", "config_key", "num_warps", "block_m",
              "block_n", "block_k", "stages", "smem_bytes", "kernel", "triton_version"):
        assert h in header, (where, h)
    _no_cutlass_words(text, where)


@pytest.mark.parametrize("folder", TRITON)
def test_committed_triton_rows_render_in_triton_words(folder, tmp_path, no_charts):
    path = ROOT / "results" / folder
    rs = load(path)
    _check_triton_report(render_markdown(rs, tmp_path), rs, folder)
    _check_triton_terminal(_terminal(rs.rows), folder)
    _no_cutlass_words(_terminal(rs.rows, wide=True), f"{folder} --wide")
    _check_triton_csv(export(path, "csv"), folder)


def _cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "tileprobe", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=timeout)


def _engine(name):
    try:
        engine_kernel_source(name, None)
    except UsageError as exc:
        pytest.skip(f"{name} {tm.ENGINES[name].release}: {exc}")


def _check_row_fields(rows: list[dict]) -> None:
    """Rows carry the fields the tables show, equal to what their config says, and the same as what fill_row derives
    for a row written before those fields existed."""
    later = ("kernel", "kernel_file", "block_m", "block_n", "block_k", "batch_range", "config_origin", "config_file",
             "config_key", "config_rule")
    for r in rows:
        assert [r["block_m"], r["block_n"], r["block_k"]] == [int(x) for x in r["tile"].split("x")]
        assert r["kernel"] == "fused_moe_kernel" and r["config_origin"] in ("default", "shipped", "user")
        assert (r["config_rule"] is not None) == (r["config_origin"] == "default")
        assert (r["config_file"] is None) == (r["config_origin"] == "default")
        old = {k: v for k, v in r.items() if k not in later}
        assert {k: tm.fill_row(old).get(k) for k in later} == {k: r[k] for k in later if k != "config_origin"
                                                              or r["routing"] != "config-file"} | (
            {"config_origin": None} if r["routing"] == "config-file" else {})


def test_triton_predict_only_sweep_speaks_triton(tmp_path, rng, no_charts):
    """A real cheap triton-moe sweep (--predict-only: the engine's own picks, the predictor's bytes)."""
    engine = rng.choice(["vllm", "sglang"])
    _engine(engine)
    target = rng.choice(["rtx-5090", "rtx-pro-6000"])
    out = tmp_path / "out"
    p = _cli("sweep", "--family", "triton-moe", "--engine", engine, "--workload", "qwen3-30b-a3b", "--quant", "bf16",
             "--target", target, "--predict-only", "--out", out)
    assert p.returncode == 0, p.stderr
    _check_triton_terminal(p.stdout, f"{engine} sweep stdout")
    rs = load(out)
    _check_row_fields(rs.rows)
    _check_triton_report((out / "report.md").read_text(), rs, f"{engine} report.md")
    assert "`predicted` (predicted by tileprobe's model of Triton 3.8.0 for sm_120a" in (out / "report.md").read_text()
    _check_triton_csv((out / "results.csv").read_text(), "results.csv")
    _check_triton_csv(export(out, "csv"), "export csv")
    assert {r["gemm"] for r in rs.rows} == set(tm.GEMMS)


def test_triton_check_configs_run_speaks_triton(tmp_path, rng, no_charts):
    """check-configs on a small synthetic vLLM file (one entry: both GEMMs compiled with Triton for its GPU)."""
    _engine("vllm")
    folder = tmp_path / "configs"
    folder.mkdir()
    keys = [rng.choice([1, 2, 4, 8, 16, 64])]
    entries = {str(k): {"BLOCK_SIZE_M": rng.choice([16, 32]), "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": rng.choice([64, 128]),
                        "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": rng.choice([2, 3])} for k in keys}
    name = "E=128,N=768,device_name=NVIDIA_GeForce_RTX_5090.json"
    (folder / name).write_text(json.dumps(entries))
    out = tmp_path / "out"
    p = _cli("check-configs", folder, "--out", out, "--jobs", "2")
    assert p.returncode in (0, 1), p.stderr
    rs = load(out)
    assert len(rs.rows) == 2 * len(keys) and rs.static == rs.rows  # compiled, not launched: static rows
    _check_row_fields(rs.rows)
    for r in rs.rows:
        assert r["config_origin"] == "user" and r["config_file"] == name and r["config_key"] in keys
    text = render_markdown(rs, tmp_path)
    _check_triton_report(text, rs, "check-configs report.md")
    assert "| config files checked |" in text
    _check_triton_terminal(_terminal(rs.rows), "check-configs terminal")
    _check_triton_csv(export(out, "csv"), "check-configs csv")


def test_an_audit_speaks_triton(tmp_path, rng, no_charts):
    """A real audit (SGLang's own attention launchers captured under a stand-in target, each launch compiled): its
    terminal table, report.md and CSV carry the op, the shape, the engine line that set the parameters and num_warps,
    and none of CUTLASS's words."""
    _engine("sglang")
    target = rng.choice(["rtx-5090", "rtx-pro-6000"])
    out = tmp_path / "out"
    p = _cli("audit", "--engine", "sglang", "--model", "qwen3-30b-a3b", "--target", target, "--batch",
             str(rng.choice([1, 2, 4])), "--seq-len", str(rng.choice([512, 1024])), "--out", out, "--jobs", "2",
             "--attention-backend", "triton",  # SGLang's own choice there is flashinfer: nothing Triton to show
             "--kernel", "sglang-extend-attention,sglang-decode-attention")  # the Triton launches only (no path)
    assert p.returncode in (0, 1), p.stderr
    rs = load(out)
    assert rs.rows and all(r["family"] == "triton-audit" for r in rs.rows)
    _no_cutlass_words(p.stdout, "audit stdout")
    header = next(ln for ln in p.stdout.splitlines() if " op " in ln)
    for h in (" op ", " kernel ", " set at ", " point ", " w/s ", " shared B ", " verdict "):
        assert h in header, (h, header)
    for r in rs.rows:  # each launch's engine line (file:line) is in the terminal table
        assert str(r["config_source"]).rsplit("/", 1)[-1].split(":")[0][:12] in p.stdout, r["config_source"]
    text = render_markdown(rs, tmp_path)
    _no_cutlass_words(text, "audit report.md")
    head, recs = _md_rows(text)
    for h in ("op", "shape", "set at (engine line)", "num_warps", "num_stages", "metadata.shared B"):
        assert h in head, (h, head)
    assert sorted(rec["metadata.shared B"] for rec in recs) == sorted(str(r["smem_bytes"]) for r in rs.rows)
    csv_text = export(out, "csv")
    _no_cutlass_words(csv_text, "audit csv")
    cols = csv_text.splitlines()[0].split(",")
    for h in ("gemm", "problem", "config_source", "num_warps", "smem_bytes", "kernel", "triton_version"):
        assert h in cols, h
