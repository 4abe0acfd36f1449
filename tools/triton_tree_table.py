"""The docs/triton-moe.md table "which shipped Triton MoE files fail on which GPU": from check-configs rows folders.

Per folder, per (device the file is named after, scheme): files, files with at least one entry over the limit,
entries (a file's batch-size keys), entries over (either GEMM's launch over). Prints markdown.

PYTHONPATH=. python3 tools/triton_tree_table.py results/triton-moe/check-configs/<folder> [...]
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from tileprobe.results.writer import read_rows


def table(folder: Path) -> str:
    rows = read_rows(folder)[0]
    run = json.loads((folder / "run.json").read_text())
    per_file: dict[str, dict] = defaultdict(lambda: {"keys": set(), "over": set(), "quant": None, "dev": None,
                                                     "target": set(), "max": 0})
    for r in rows:
        f = per_file[r["workload"]]
        f["keys"].add(r["batch"])
        f["quant"], f["dev"] = r["quant"], r["device_name"]
        f["target"].add(r["target"])
        f["max"] = max(f["max"], r["smem_bytes"] or 0)
        if r["verdict"] != "fits":
            f["over"].add(r["batch"])
    groups: dict[tuple, list] = defaultdict(lambda: [0, 0, 0, 0, 0, set()])
    for f in per_file.values():
        g = groups[(f["dev"], f["quant"])]
        g[0] += 1
        g[1] += bool(f["over"])
        g[2] += len(f["keys"])
        g[3] += len(f["over"])
        g[4] = max(g[4], f["max"])
        g[5] |= f["target"]
    out = [f"{run['engine']}, {run['checked']} ({len(rows)} entry launches, Triton {run['toolchain']['triton_version']}, "
           "evidence compiled)", "",
           "| file's device | scheme | judged on | files | files with an entry over | entries | entries over | "
           "largest entry (B) |", "|---|---|---|---|---|---|---|---|"]
    for (dev, quant), g in sorted(groups.items()):
        out.append(f"| {dev} | {quant} | {', '.join(sorted(g[5]))} | {g[0]} | {g[1]} | {g[2]} | {g[3]} | {g[4]} |")
    tot = [sum(g[i] for g in groups.values()) for i in range(4)]
    out.append(f"| **all** | | | {tot[0]} | {tot[1]} | {tot[2]} | {tot[3]} | |")
    return "\n".join(out)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(table(Path(arg)) + "\n")
