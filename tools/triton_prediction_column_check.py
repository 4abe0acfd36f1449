"""Check tools/triton_prediction_column.py's rewrite against a copy of results/ taken before it: in every
results.jsonl(.gz) only predicted_smem_bytes / prediction differ (same keys, same order, every other value equal, and
a compiled row's predicted bytes equal its smem_bytes wherever it has them); in every results.csv only those two
columns' cells; every report.md is the old one once its two new table columns (predicted B, prediction) are taken out.

    cp -r results /tmp/before && PYTHONPATH=. python3 tools/triton_prediction_column.py
    python3 tools/triton_prediction_column_check.py /tmp/before results
"""

from __future__ import annotations

import csv
import gzip
import json
import sys
from pathlib import Path

FIELDS = ("predicted_smem_bytes", "prediction")


def _lines(p: Path) -> list[str]:
    return (gzip.decompress(p.read_bytes()).decode() if p.suffix == ".gz" else p.read_text()).splitlines()


def main(old_root: Path, new_root: Path) -> None:
    rows = exact = 0
    for new in sorted(list(new_root.rglob("results.jsonl")) + list(new_root.rglob("results.jsonl.gz"))):
        old = old_root / new.relative_to(new_root)
        a, b = _lines(old), _lines(new)
        assert len(a) == len(b), new
        for x, y in zip(a, b):
            x, y = json.loads(x), json.loads(y)
            assert list(x) == list(y), new
            assert {k: v for k, v in x.items() if k not in FIELDS} == {k: v for k, v in y.items() if k not in FIELDS}, new
            rows += x != y
            if y.get("evidence") == "compiled" and y.get("predicted_smem_bytes") is not None:
                assert y["predicted_smem_bytes"] == y["smem_bytes"] and y["prediction"] == "exact", (new, y["config"])
                exact += 1
    cells = 0
    for new in sorted(new_root.rglob("results.csv")):
        old = old_root / new.relative_to(new_root)
        with open(old, newline="") as fa, open(new, newline="") as fb:
            a, b = list(csv.reader(fa)), list(csv.reader(fb))
        assert a[0] == b[0] and len(a) == len(b), new
        skip = {i for i, h in enumerate(a[0]) if h in FIELDS}
        for x, y in zip(a[1:], b[1:]):
            assert [v for i, v in enumerate(x) if i not in skip] == [v for i, v in enumerate(y) if i not in skip], new
            cells += x != y
    reports = 0
    for new in sorted(new_root.rglob("report.md")):
        old = old_root / new.relative_to(new_root)
        out, drop = [], None
        for line in new.read_text().splitlines():
            if line.startswith("|"):
                parts = line.split("|")
                if drop is None and any(c.strip() in ("predicted B", "prediction") for c in parts):
                    drop = {i for i, c in enumerate(parts) if c.strip() in ("predicted B", "prediction")}
                if drop:
                    line = "|".join(c for i, c in enumerate(parts) if i not in drop)
            else:
                drop = None
            out.append(line)
        assert "\n".join(out) + "\n" == old.read_text(), new
        reports += 1
    print(f"ok: {rows} rows gained the prediction ({exact} compiled rows predicted exactly, 0 model errors), "
          f"{cells} CSV rows only in those two columns, {reports} report.md equal but for the two new columns")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
