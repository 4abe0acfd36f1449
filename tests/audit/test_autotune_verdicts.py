"""An @triton.autotune launch in the audit, as Triton 3.8's autotuner treats its configs (tileprobe.audit.tuned):
a config over the limit or failing with an error the autotuner catches (PTXASError, CompileTimeAssertionFailure) is
dropped, no failure, and reported as dropped, not over; any other compile error crashes the engine's first launch:
exit 1 and a COMPILE ERROR line. The reports say the same: the terminal summary, the audit's table (titled audit,
the point of each row shown, the verdict not cut at 120 columns) and report.md."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tileprobe.audit import tuned
from tileprobe.families.columns import TRITON_REPORT
from tileprobe.reports.markdown import CELLS
from tileprobe.results.rows import Outcome, StaticInfo
from tileprobe.targets import PROFILES
from tileprobe.verdict import Verdict

ROOT = Path(__file__).resolve().parents[2]
TARGET = PROFILES["rtx-pro-6000"]


def _o(verdict: Verdict, reason: str = "", smem: int | None = None) -> Outcome:
    return Outcome(None, verdict, reason, StaticInfo(smem_bytes=smem))


def _launch(i: int):
    return SimpleNamespace(launch=SimpleNamespace(options=(("num_warps", 4), ("num_stages", 3)),
                                                  args=(("BLOCK_M", 16 * (i + 1)),)))


def _group(outcomes: list[Outcome]):
    t = SimpleNamespace(kernel="k", call_site="eng/k.py:10", listed=len(outcomes) + 2,
                        planned=tuple(range(len(outcomes))))
    return tuned.judge([t], [_launch(i) for i in range(len(outcomes))], outcomes, TARGET)


@pytest.mark.parametrize("kind", ["CompilationError", "RuntimeError", "AssertionError"])
def test_a_compile_error_the_autotuner_does_not_catch_crashes_the_launch(kind, rng):
    outcomes = [_o(Verdict.FITS, smem=1024), _o(Verdict.SMEM_OVER_LIMIT, smem=TARGET.smem_optin + 1024),
                _o(Verdict.COMPILE_ERROR, f"triton 3.8.0: {kind}: at 3:4: boom (launched from x)")]
    rng.shuffle(outcomes)
    g = _group(outcomes)
    bad = next(i for i, o in enumerate(outcomes) if o.verdict is Verdict.COMPILE_ERROR)
    over = next(i for i, o in enumerate(outcomes) if o.verdict is Verdict.SMEM_OVER_LIMIT)
    assert g.crash == {bad} and g.empty == []
    assert set(g.marks) == {over} and "dropped by the autotuner" in g.marks[over]
    assert "does not catch" in g.notes[0] and "1 of 3 configs dropped by the autotuner" in g.notes[0]


@pytest.mark.parametrize("kind", tuned.CAUGHT)
def test_an_error_the_autotuner_catches_drops_the_config(kind):
    outcomes = [_o(Verdict.FITS, smem=1024), _o(Verdict.COMPILE_ERROR, f"triton 3.8.0: {kind}: ptxas said no")]
    g = _group(outcomes)
    assert g.crash == set() and g.empty == [] and set(g.marks) == {1}
    assert kind in g.marks[1] and f"1 {kind}" in g.notes[0] and "left with 1" in g.notes[0]


def test_nothing_left_is_a_failure_and_no_config_is_called_dropped():
    g = _group([_o(Verdict.SMEM_OVER_LIMIT, smem=200000), _o(Verdict.SMEM_OVER_LIMIT, smem=300000)])
    assert len(g.empty) == 1 and g.marks == {} and "raises OutOfResources" in g.notes[0]


@pytest.mark.parametrize("dims,want", [((256, 64, None), "BLOCK 256x64 "), ((None, 128, None), "BLOCK 128 "),
                                       ((None, None, None), ""), ((128, 256, 64), "BLOCK 128x256x64 ")])
def test_a_tile_label_names_only_the_block_sizes_the_kernel_has(dims, want):
    row = dict(zip(("block_m", "block_n", "block_k"), dims), num_warps=4, stages=3)
    label = TRITON_REPORT.label(row, CELLS)
    assert label == f"{want}w4 s3" and "?" not in label


# One real audit (vLLM's Mamba-2 chunk scan, an autotuned kernel with configs over the limit on the RTX PRO 6000),
# with two of its autotune configs made compile errors: one the autotuner does not catch, one it does
_INJECT = '''
import sys
from tileprobe.audit import run
from tileprobe.results.rows import Outcome, StaticInfo
from tileprobe.verdict import Verdict
real = run.outcome
def outcome(cfg, build, target, triton, p, predicted=None):
    at = p.launch.autotune
    if p.launch.kernel == "_chunk_scan_fwd_kernel" and at and at[0] in (0, 1):
        kind = "CompilationError" if at[0] == 0 else "PTXASError"
        return Outcome(cfg, Verdict.COMPILE_ERROR, f"triton 3.8.0: {kind}: at 1:2: injected (launched from x)",
                       StaticInfo(stages=cfg.stages))
    return real(cfg, build, target, triton, p, predicted)
run.outcome = outcome
from tileprobe.cli import main
sys.argv = ["tileprobe", *sys.argv[1:]]
main()
'''


@pytest.fixture(scope="module")
def audited(tmp_path_factory, vllm):
    out = tmp_path_factory.mktemp("audit") / "out"
    p = subprocess.run([sys.executable, "-c", _INJECT, "audit", "--engine", "vllm", "--model", "nemotron-h-8b",
                        "--target", "rtx-pro-6000", "--out", str(out), "--kernel",
                        "vllm-mamba2-chunk-scan,vllm-unified-attention,vllm-mamba2-causal-conv1d-update"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT,
                       env=os.environ | {"PYTHONPATH": str(ROOT), "COLUMNS": "120"})
    return p, out


def test_an_uncaught_autotune_compile_error_fails_the_audit_with_its_own_line(audited):
    p, _ = audited
    assert p.returncode == 1, (p.returncode, p.stdout[-3000:], p.stderr[-3000:])
    errors = [ln for ln in p.stdout.splitlines() if ln.startswith("COMPILE ERROR ")]
    assert errors and all("_chunk_scan_fwd_kernel" in ln and "CompilationError" in ln for ln in errors), errors
    assert not [ln for ln in p.stdout.splitlines() if ln.startswith("OVER ")]  # the dropped ones are no failure
    notes = [ln for ln in p.stdout.splitlines() if ln.startswith("AUTOTUNE _chunk_scan_fwd_kernel")]
    assert notes and all("1 PTXASError" in ln and "does not catch" in ln for ln in notes), notes


def test_the_terminal_says_dropped_by_the_autotuner_not_over_and_keeps_the_verdict_at_120_columns(audited):
    p, _ = audited
    lines = p.stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if "audit: the Triton launches" in ln)
    table = [ln for ln in lines[start:] if ln[:1] in "┏┃┡│└"]
    table = table[:next(i for i, ln in enumerate(table) if ln.startswith("└")) + 1]
    assert "static probe" not in p.stdout
    assert all(len(ln) <= 120 and ln.rstrip()[-1] in "┓┃┩│┘" for ln in table), [ln for ln in table if len(ln) > 120]
    assert any("smem-over-limit │" in ln for ln in table) and any("autotuner drops │" in ln for ln in table)
    header = next(ln for ln in table if ln.startswith("┃"))
    assert "point" in header and "verdict" in header
    conv = [ln for ln in table if "_causal_conv" in ln]  # the conv1d update launches of batch 1 and of batch 8
    assert any("b1 s1024" in ln for ln in conv) and any("b8 s1024" in ln for ln in conv), conv
    summary = " ".join(" ".join(lines[lines.index(table[-1]) + 1:]).split())
    assert re.search(r"\d+ of \d+ configs fit the 101376 B opt-in limit on rtx-pro-6000, 0 do not, \d+ failed to "
                     r"compile; \d+ more autotune configs are dropped by the autotuner", summary), summary
    assert "x?" not in summary


def test_report_md_counts_dropped_and_not_selected_rows_in_their_own_words(audited):
    _, out = audited
    text = (out / "report.md").read_text()
    verdicts = next(ln for ln in text.splitlines() if re.match(r"\d+ configs: ", ln))
    assert ", 0 over the opt-in limit," in verdicts, verdicts
    assert re.search(r", \d+ dropped by the autotuner \(", verdicts), verdicts
    assert "1 not selected (the engine runs another kernel there)" in verdicts, verdicts
    assert re.search(r", \d+ failed to compile", verdicts), verdicts
    assert "other (compile error, unsupported)" not in text and "x?" not in text
    assert "autotune dropped" in text  # the column that says which
