"""The sweep's terminal tables at 120 columns: nothing cut, and engine variants told apart."""

from rich.console import Console

from tileprobe.reports.terminal import WIDTH, static_table


def _engine_row(rng, cluster):
    return {"tactic": rng.choice(["CtaShape128x256x128B", "CtaShape128x128x128B", "CtaShape256x128x64B"]),
            "dtypes": rng.choice(["nvfp4xnvfp4", "mxfp8xmxfp4", "fp8xfp8"]), "tile": "128x256x256",
            "tile_bytes_k": "128x256x128B", "schedule": rng.choice(["auto", "cooperative"]),
            "epilogue": "finalize", "swap_ab": True, "cluster": cluster, "stages_configured": "auto",
            "stages": rng.randint(10, 12), "smem_bytes": rng.randint(100000, 232448),
            "headroom_bytes": -rng.randint(100000, 131072), "verdict": "smem-over-limit", "evidence": "sized",
            "reason": "x"}


def test_engine_static_table_cuts_nothing_at_120_columns_and_shows_the_cluster(rng):
    rows = [_engine_row(rng, "1x1x1"), _engine_row(rng, "2x1x1")]
    rows[1].update(tactic=rows[0]["tactic"], dtypes=rows[0]["dtypes"])  # two cluster variants of one tactic
    console = Console(width=WIDTH, record=True, force_terminal=False)
    console.print(static_table(rows))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    lines = [line for line in text.splitlines() if rows[0]["tactic"] in line]
    assert len(lines) == 2 and lines[0] != lines[1]  # the cluster tells them apart
    for r, line in zip(rows, lines):
        for cell in (r["tactic"], r["dtypes"], "finalize swap", r["cluster"], f"auto→{r['stages']}",
                     str(r["smem_bytes"]), str(r["headroom_bytes"]), "smem-over-limit"):
            assert cell in line, (cell, line)
    header = next(line for line in text.splitlines() if "tactic" in line)
    assert "verdict" in header and "cluster" in header
