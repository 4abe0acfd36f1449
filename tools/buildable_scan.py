"""Which configs does nvcc accept? Compiles describe.cu once for all configs (host only) and reads the error log.

usage: python tools/buildable_scan.py FAMILY CUTLASS_INCLUDE OUT.jsonl CFG [CFG...]   (CFG as in layout_dump.py)
A config that appears in an error's instantiation context failed; the first error message for it is kept. Configs
that build are described (stages and sizes) by running the binary when the whole batch compiled.
"""
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _configs import parse_specs

from tileprobe.families import FAMILIES

HARNESS = Path(__file__).resolve().parent.parent / "cutlass_harness"


def main() -> None:
    fam, inc, out, *cfgs = sys.argv[1:]
    family = FAMILIES[fam]
    arch = family.archs[0].removeprefix("sm_").removesuffix("a")
    rows, lines = [], []
    for i, (key, fields) in enumerate(parse_specs(cfgs)):
        rows.append((key, fields))
        lines.append(f"TP_CFG({i}, {', '.join(map(str, key))})\n")
    tmp = Path(tempfile.mkdtemp(prefix="tpscan-"))
    (tmp / "tp_configs.inc").write_text("".join(lines))
    root = Path(inc)
    cmd = ["nvcc", "-std=c++17", "-DNDEBUG", "--expt-relaxed-constexpr", "-diag-suppress", "20012,20013,20014,20015",
           f"-gencode=arch=compute_{arch}a,code=compute_{arch}a", "-O0", f"-DTP_FAMILY_KERNEL={family.kernel_template}",
           "-I", str(HARNESS), "-I", str(tmp), "-I", str(root), "-I", str(root.parent / "tools" / "util" / "include"),
           str(HARNESS / "describe.cu"), "-o", str(tmp / "describe")]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    log = p.stdout + p.stderr
    print(f"compiled in {time.monotonic() - t0:.0f} s, rc {p.returncode}", file=sys.stderr)
    (Path(out).with_suffix(".log")).write_text(log)
    failed: dict[tuple, str] = {}
    pat = re.compile(family.kernel_template + r"<(\d+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+)>")
    for block in re.split(r"\n(?=\S.*error)", log):
        msg = next((ln.strip() for ln in block.splitlines() if "error" in ln), "")
        for mt in pat.finditer(block):
            failed.setdefault(tuple(int(g) for g in mt.groups()), msg[:300])
    desc = {}
    if p.returncode == 0:
        for line in subprocess.run([str(tmp / "describe")], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("{"):
                d = json.loads(line)
                desc[d["index"]] = d
    with open(out, "a") as f:
        for i, (key, row) in enumerate(rows):
            rec = {**row, "cutlass_include": inc, "batch_ok": p.returncode == 0,
                   "built": True if p.returncode == 0 else (False if key in failed else None),
                   "error": failed.get(key)}
            if i in desc:
                rec.update({k: desc[i][k] for k in ("stages", "smem_bytes", "smem_mainloop_bytes", "smem_epilogue_bytes")})
            f.write(json.dumps(rec) + "\n")
            print(json.dumps(rec)[:400])


if __name__ == "__main__":
    main()
