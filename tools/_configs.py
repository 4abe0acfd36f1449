"""Config specs shared by the calibration tools: 'TILE:SCHEDULE:STAGES:EPILOGUE:SWAP', e.g. 128x64x128:cooperative:0:no-c:0."""

from __future__ import annotations

from tileprobe.families import EPILOGUES, SCHEDULE_IDS


def parse_specs(specs: list[str]) -> list[tuple[tuple[int, ...], dict]]:
    """(template arguments in TP_CFG order, the row fields) for each spec."""
    out = []
    for c in specs:
        tile, sched, stages, epi, swap = c.split(":")
        m, n, k = (int(x) for x in tile.split("x"))
        key = (m, n, k, SCHEDULE_IDS[sched], int(stages), EPILOGUES[epi], int(swap))
        out.append((key, dict(tile=tile, schedule=sched, stages_req=int(stages), epilogue=epi,
                              swap_ab=bool(int(swap)))))
    return out
