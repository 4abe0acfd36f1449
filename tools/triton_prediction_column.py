"""Fill the prediction columns of committed triton-moe rows: predicted_smem_bytes and `prediction`, from the one
predictor call every command uses (tileprobe.triton.predicted.predict_launch), as a sweep or check-configs now writes
them for a compiled row: the bytes and `exact` / `MODEL ERROR: ...`, or `cannot predict: <why>`.

Rewrites in place, touching only those two fields: results.jsonl (or results.jsonl.gz), results.csv (the cells of
its existing predicted_smem_bytes / prediction columns; the header is left as it is), then re-renders report.md with
`tileprobe report DIR --format md` where the folder has one. Every other value of every row is checked unchanged
(the byte figures above all) after the rewrite; the tool stops on the first difference.

A row is filled only when it holds bytes Triton measured (evidence compiled) or predicted; runtime rows (launched,
verified) and not-compiled rows (unsupported) keep their empty columns.

    PYTHONPATH=. python3 tools/triton_prediction_column.py [DIR ...]   (default: every committed triton-moe folder)
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from tileprobe.families import triton_moe as tm
from tileprobe.triton.predicted import predict_launch, prediction_columns

ROOT = Path(__file__).resolve().parent.parent
FIELDS = ("predicted_smem_bytes", "prediction")


class _Build:  # what prediction_columns compares a prediction with: the compiled metadata.shared
    def __init__(self, shared: int) -> None:
        self.shared = shared


class _Kernel:
    """The kernel a folder's rows were compiled from, as the predictor needs it: its sha256 (run.json)."""

    def __init__(self, sha256: str) -> None:
        self.sha256 = sha256


def kernel_of(folder: Path) -> str | None:
    meta = json.loads((folder / "run.json").read_text()) if (folder / "run.json").is_file() else {}
    return meta.get("kernel_sha256") or (meta.get("toolchain") or {}).get("kernel_sha256")


def folders() -> list[Path]:
    found = set()
    for p in list((ROOT / "results").rglob("results.jsonl")) + list((ROOT / "results").rglob("results.jsonl.gz")):
        text = gzip.decompress(p.read_bytes()).decode() if p.suffix == ".gz" else p.read_text()
        first = text.split("\n", 1)[0]
        if first and json.loads(first).get("family") == tm.NAME:
            found.add(p.parent)
    return sorted(found)


def columns_for(row: dict, kernel_sha256: str | None = None) -> dict | None:
    """The two fields for one row (None: the row is left as it is); `kernel_sha256`: its run.json's kernel (the
    predictor is keyed by it; None: cannot predict)."""
    if row.get("family") != tm.NAME or row.get("evidence") not in ("compiled", "predicted") or \
            row.get("smem_bytes") is None:
        return None
    bm, bn, bk = (int(x) for x in str(row["tile"]).split("x"))
    entry = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": int(row["group_size_m"]),
             "num_warps": int(row["num_warps"]), "num_stages": int(row["stages"])}
    engine = str(row["engine"]).split()[0]
    # older check-configs rows carry N and K in `problem` only ("M=1 E=128 N=3712 K=4096 (...)"); experts, top_k and
    # ep do not enter the prediction
    prob = dict(re.findall(r"\b([EKN])=(\d+)", str(row.get("problem") or "")))
    n, k = int(row.get("gemm_n") or prob["N"]), int(row.get("gemm_k") or prob["K"])
    cfg = tm.make_config(engine, row["quant"], row["gemm"], int(row.get("experts") or prob.get("E") or 1), n, k,
                         int(row.get("top_k") or 1), entry, row["arch"], str(row.get("config_source")),
                         int(row.get("ep") or 1))
    # the row's own engine release (another than tileprobe reproduces: the predictor says so itself)
    cfg = replace(cfg, extra=tuple((k, row["engine"] if k == "engine" else v) for k, v in cfg.extra))
    pred = predict_launch(cfg, _Kernel(kernel_sha256) if kernel_sha256 else None, str(row["triton_version"]))
    return prediction_columns(pred, None if row["evidence"] == "predicted" else _Build(int(row["smem_bytes"])))


def rewrite(folder: Path) -> dict:
    src = folder / "results.jsonl"
    gz = not src.is_file()
    if gz:
        src = folder / "results.jsonl.gz"
    text = gzip.decompress(src.read_bytes()).decode() if gz else src.read_text()
    old = [json.loads(line) for line in text.splitlines() if line]
    kernel = kernel_of(folder)
    new, filled = [], {"rows": len(old), "filled": 0, "exact": 0, "model_error": 0, "cannot_predict": 0,
                       "not_measured": 0}
    for r in old:
        cols = columns_for(r, kernel)
        if cols is None:
            new.append(r)
            continue
        assert set(cols) <= set(r), (folder, "a row without the prediction columns")
        new.append({k: (cols[k] if k in cols else v) for k, v in r.items()})
        filled["filled"] += 1
        p = cols["prediction"]
        filled["exact" if p == "exact" else "model_error" if p.startswith("MODEL ERROR") else
               "cannot_predict" if p.startswith("cannot") else "not_measured"] += 1
    for a, b in zip(old, new):  # nothing but the two fields changed; every byte figure is the same
        assert list(a) == list(b) and {k: v for k, v in a.items() if k not in FIELDS} == \
            {k: v for k, v in b.items() if k not in FIELDS}, folder
    body = "".join(json.dumps(r) + "\n" for r in new)
    if gz:
        src.write_bytes(gzip.compress(body.encode(), mtime=0))
    else:
        src.write_text(body)
    csv_path = folder / "results.csv"
    if csv_path.is_file():
        with open(csv_path, newline="") as fh:
            raw = fh.read()
        term = "\r\n" if "\r\n" in raw else "\n"
        rows = list(csv.reader(io.StringIO(raw, newline="")))
        header = rows[0]
        at = {f: header.index(f) for f in FIELDS if f in header}
        by_key = {(r["config"], r.get("device_name"), str(r.get("gemm")), str(r.get("batch")), str(r.get("timestamp"))):
                  r for r in new}
        key_at = [header.index(k) for k in ("config", "device_name", "gemm", "batch", "timestamp")]
        out = [header]
        for cells in rows[1:]:
            r = by_key[tuple(cells[i] for i in key_at)]
            cells = list(cells)
            for f, i in at.items():
                if r.get(f) is not None:
                    cells[i] = str(r[f])
            out.append(cells)
        buf = io.StringIO(newline="")
        csv.writer(buf, lineterminator=term).writerows(out)
        with open(csv_path, "w", newline="") as fh:
            fh.write(buf.getvalue())
        before = list(csv.reader(io.StringIO(raw, newline="")))
        for b, a in zip(before, out):  # only the two columns' cells differ
            assert [x for i, x in enumerate(b) if i not in at.values()] == \
                [x for i, x in enumerate(a) if i not in at.values()], csv_path
    if (folder / "report.md").is_file():
        subprocess.run([sys.executable, "-m", "tileprobe", "report", str(folder), "--format", "md"], check=True,
                       cwd=ROOT, capture_output=True, timeout=600)
    return filled


def main() -> None:
    targets = [Path(a).resolve() for a in sys.argv[1:]] or folders()
    for folder in targets:
        print(json.dumps({"folder": str(folder.relative_to(ROOT)), **rewrite(folder)}))


if __name__ == "__main__":
    main()
