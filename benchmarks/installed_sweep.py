"""Run inside an environment where tileprobe was installed from a wheel (never this checkout): a static sweep
(sizes read, evidence `sized`) of one config per registered CUTLASS family, each family's first buildable config as the
library expands it, judged against the first offline profile of that config's arch. Prints one JSON object: where
tileprobe and its harness were imported from, and per family the config, verdict, evidence and SharedStorage bytes.

Used by tests/test_packaging.py and benchmarks/install_check.py (run with `python -I`, from outside the checkout).
python -I installed_sweep.py OUT_DIR [CACHE_DIR [FAMILY]]
FAMILY is sized in a cache of its own (OUT_DIR/fresh-cache), so that one build from the wheel's harness happens
whatever CACHE_DIR holds (a shared cache may already hold every other family's sizes: described.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import tileprobe
from tileprobe import sweep
from tileprobe.backends.cutlass import build
from tileprobe.families import FAMILIES, arch_for, expand_configs
from tileprobe.results.writer import Recorder, ResultsWriter
from tileprobe.targets import PROFILES


def main() -> int:
    out = Path(sys.argv[1])
    cache = sys.argv[2] if len(sys.argv) > 2 else str(out / "cache")
    fresh = sys.argv[3] if len(sys.argv) > 3 else None
    rec: dict = {"tileprobe": tileprobe.__file__, "harness": str(build.HARNESS_DIR),
                 "harness_files": sorted(str(p.relative_to(build.HARNESS_DIR)) for p in build.harness_sources()),
                 "families": {}, "fresh": fresh, "fresh_cache": str(out / "fresh-cache")}
    for name, fam in FAMILIES.items():
        if fam.backend != "cutlass":  # Triton families compile engine kernels: tests/test_triton_*.py
            continue
        arch = fam.archs[0]
        cfg = next(c for c in expand_configs(fam, arch) if c.unsupported_reason is None)
        target = next(t for t in PROFILES.values() if arch_for(fam, t.cc) == arch)
        where = str(out / "fresh-cache") if name == fresh else cache
        opts = sweep.SweepOptions(family=name, target=target.name, out=out / name, jobs=1, static_only=True,
                                  cache_dir=where)
        tc = sweep.make_toolchain(fam.cutlass_root() if fam.cutlass_root else None, None, where)
        with ResultsWriter(opts.out) as writer:
            recorder = Recorder(writer, {})
            sweep.static_rows(opts, tc, target, [cfg], recorder)
        rows = recorder.rows
        rec["families"][name] = [{k: r.get(k) for k in ("config", "target", "verdict", "evidence", "smem_bytes",
                                                        "reason", "cutlass_version")} for r in rows]
    print(json.dumps(rec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
