"""Dump every SharedStorage member's offset and size for a few configs (calibration for tileprobe.predict).

usage: python tools/layout_dump.py FAMILY CUTLASS_INCLUDE OUT.jsonl CFG [CFG...]
  CFG = MxNxK:schedule:stages:epilogue:swap, e.g. 128x64x128:cooperative:0:no-c:0
Compiles cutlass_harness/layout.cu once (host only, no GPU) and writes one JSON object per config, with the config.
"""
import json
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
        rows.append(fields)
        lines.append(f"TP_CFG({i}, {', '.join(map(str, key))})\n")
    tmp = Path(tempfile.mkdtemp(prefix="tplayout-"))
    (tmp / "tp_configs.inc").write_text("".join(lines))
    root = Path(inc)
    util = root.parent / "tools" / "util" / "include"
    cmd = ["nvcc", "-std=c++17", "-DNDEBUG", "--expt-relaxed-constexpr", "-diag-suppress", "20012,20013,20014,20015",
           f"-gencode=arch=compute_{arch}a,code=compute_{arch}a", "-O0", "-Xcompiler", "-Wno-invalid-offsetof",
           f"-DTP_FAMILY_KERNEL={family.kernel_template}", f"-DTP_FAMILY_SM={120 if fam.startswith('sm120') else 90}",
           "-I", str(HARNESS), "-I", str(tmp), "-I", str(root), "-I", str(util), str(HARNESS / "layout.cu"),
           "-o", str(tmp / "layout")]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit(p.stdout[-6000:] + p.stderr[-6000:])
    print(f"compiled in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    res = subprocess.run([str(tmp / "layout")], capture_output=True, text=True, check=True).stdout
    with open(out, "a") as f:
        for line in res.splitlines():
            d = json.loads(line)
            f.write(json.dumps({**rows[d["index"]], **d}) + "\n")
    print(res)


if __name__ == "__main__":
    main()
