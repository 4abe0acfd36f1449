"""SGLang PR #28038's shared-memory estimate and tileprobe's triton-moe predictor against Triton's compiled bytes.

Reads triton-moe rows (results folders written by check-configs or a triton-moe sweep), one per distinct compiled
launch (engine, quant, GEMM, entry, arch, whether N and K are both 16-divisible), and reports:
- how often `(num_stages - 1) * (BM*BK + BK*BN) * bytes` differs from metadata.shared, by engine / quant / arch;
- where its verdict at 101376 B flips (estimate fits, compiled does not, or the reverse);
- the predictor (tileprobe.predict.triton_moe): how many it answers, and that every answer is exact.
Writes results/triton-moe/formula-check.json (or --out) and prints a summary.

PYTHONPATH=. python3 tools/triton_formula_check.py results/triton-moe/check-configs/* [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

from tileprobe.predict._common import CannotPredict
from tileprobe.results.writer import read_rows
from tileprobe.predict.triton_moe import estimate_pr28038, predict

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 101376


def entry(row: dict) -> dict:
    bm, bn, bk = (int(x) for x in row["tile"].split("x"))
    return {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "num_stages": int(row["stages"]),
            "num_warps": int(row["num_warps"]), "GROUP_SIZE_M": int(row["group_size_m"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "triton-moe" / "formula-check.json")
    a = ap.parse_args()
    distinct: dict[tuple, dict] = {}
    for folder in a.folders:
        kernel = json.loads((folder / "run.json").read_text())["kernel_sha256"]
        for r in read_rows(folder)[0]:
            r["_kernel"] = kernel
            if r.get("family") != "triton-moe" or r.get("smem_bytes") is None:
                continue
            e = entry(r)
            nk = re.search(r" N=(\d+) K=(\d+)", r["problem"])
            key = (r["engine"], r["quant"], r["gemm"], r["arch"], tuple(sorted(e.items())),
                   int(nk.group(1)) % 16 == 0 and int(nk.group(2)) % 16 == 0)
            r["_nk"] = (int(nk.group(1)), int(nk.group(2)))
            distinct.setdefault(key, r)
    groups: dict[str, Counter] = defaultdict(Counter)
    flips, misses, wrong_pred = [], [], []
    answered = 0
    cannot: Counter = Counter()
    for (engine, quant, gemm, arch, items, _), r in distinct.items():
        e = dict(items)
        est, got = estimate_pr28038(e, quant), r["smem_bytes"]
        g = groups[f"{engine} | {quant} | {arch}"]
        g["configs"] += 1
        g["exact" if est == got else "wrong"] += 1
        if est != got:
            g["max_under_by"] = max(g["max_under_by"], got - est)
            g["max_over_by"] = max(g["max_over_by"], est - got)
            misses.append({"engine": engine, "quant": quant, "gemm": gemm, "arch": arch, "entry": e,
                           "estimate": est, "compiled": got})
        if (est <= LIMIT) != (got <= LIMIT):
            flips.append({"engine": engine, "quant": quant, "gemm": gemm, "arch": arch, "entry": e,
                          "estimate": est, "compiled": got,
                          "flip": "estimate fits, compiled does not" if est <= LIMIT else
                          "estimate over, compiled fits"})
        cc = int(arch[3:].rstrip("a"))
        try:
            p = predict(engine, quant, e, cc, r["triton_version"], *r["_nk"], kernel_sha256=r["_kernel"])
        except CannotPredict as exc:
            cannot[str(exc)] += 1
            continue
        answered += 1
        if p != got:
            wrong_pred.append({"entry": e, "engine": engine, "quant": quant, "arch": arch, "predicted": p,
                               "compiled": got})
    doc = {
        "what": "SGLang PR #28038 estimate (num_stages-1)*(BM*BK+BK*BN)*bytes vs Triton's metadata.shared, per "
                "distinct compiled launch (engine, quant, GEMM, entry, arch, N and K 16-divisible or not); verdict flips at 101376 B; the "
                "triton-moe predictor's answers",
        "sources": [str(f) for f in a.folders], "limit_bytes": LIMIT, "distinct_launches": len(distinct),
        "by_group": {k: dict(v) for k, v in sorted(groups.items())},
        "estimate_wrong": len(misses), "verdict_flips": flips,
        "predictor": {"answered": answered, "cannot_predict": len(distinct) - answered, "wrong": wrong_pred,
                      "cannot_predict_why": dict(cannot.most_common())},
        "misses": misses,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(distinct)} distinct launches; estimate wrong on {len(misses)}; {len(flips)} verdict flip(s) at "
          f"{LIMIT} B; predictor answered {answered}, wrong on {len(wrong_pred)}")
    for k, v in sorted(groups.items()):
        print(f"  {k}: {dict(v)}")
    for f in flips:
        print(f"  FLIP {f['engine']} {f['quant']} {f['gemm']} {f['arch']} {f['entry']}: estimate {f['estimate']}, "
              f"compiled {f['compiled']} ({f['flip']})")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
