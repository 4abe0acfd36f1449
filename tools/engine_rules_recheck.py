"""Re-check every stated Triton rule on another engine release's own files, and write the result into that release's
manifest.

    python tools/engine_rules_recheck.py ENGINE WHEEL [--per-kernel N] [--moe N] [--full N] [--seed S] [--family F ...]

The rule tables (tileprobe.predict.triton_{moe,ssd,conv,attention,ogs}.CHECKED) are keyed by the sha256 of the kernel
files of the release they were checked on (tileprobe.engines.pins.READ_FROM). For the release in WHEEL (which needs a
manifest: tools/engine_manifest.py write), this captures the launches the tests' plans capture
(tests/predict/test_triton_*.py: the audit's own capture on the tests' targets) from both releases, pairs each rule
kernel's key in WHEEL with its key in the checked release (the same kernel of the same file), and asks the rule, with
the new key answering as the old (tileprobe.predict.recheck.provisionally), for --per-kernel random launches of WHEEL
(half as captured, half varied as the tests vary them). Each is held to the installed Triton's own metadata.shared
(its allocation pass; --full of them by a full compile). Every rule kernel is re-checked, the ones whose file stayed
byte-identical too: a helper it imports from another file may have changed (the row lists the files of its launch's
module that differ between the releases).

Writes `rules` into tileprobe/engines/manifests/<engine>-<version>.json: per (family, kernel, key) the key it answers
as (`from`), the Triton release, the launches checked, compiled in full and differing (with each difference). A row
with 0 differ makes the key answer; one that differed makes it decline (tileprobe.predict.recheck.engine_lookup). The
rule kernels no capture reached are printed and listed nowhere: they decline on that release. triton-moe's launches
are vLLM's own: fused_experts_impl served from each wheel with an entry as its override config (tools/
triton_rules_recheck.py moe_capture: three real layer shapes, bf16 / fp8 / fp8 block, four targets), varied by
random entries, each asked of the audit's own question (tileprobe.audit.moe_rule).

Review the manifest's diff before committing it: it is what makes the rules answer on the release.
"""

from __future__ import annotations

import argparse
import datetime
import random
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT)]

FAMILIES = ("triton-moe", "triton-ssd", "triton-conv", "triton-attention", "triton-ogs")


def _engine_of(job) -> str:
    """'vllm <release>': the engine release the job's kernel source was read from (KernelSource.origin)."""
    return " ".join(job.source.origin.split()[:2])


def _served_shas(job) -> dict[str, str]:
    """module -> sha256 of every engine module the job's kernel module imports (its header lines)."""
    return dict(re.findall(r"^# ([\w.]+): sha256 ([0-9a-f]{64})$", job.source.text, re.M))


def pairs(cap_new, cap_old, key_of, engine_new: str, engine_old: str) -> dict:
    """(kernel, kernel file) -> (new key, old key, modules whose sha differs) for every launch of the two releases."""
    old = {(la.kernel, la.kernel_file): (key_of(la, j), _served_shas(j))
           for la, j in cap_old if _engine_of(j) == engine_old}
    out = {}
    for la, j in cap_new:
        if _engine_of(j) != engine_new or (la.kernel, la.kernel_file) not in old:
            continue
        okey, oshas = old[(la.kernel, la.kernel_file)]
        changed = sorted(m for m, sha in _served_shas(j).items() if oshas.get(m) not in (None, sha))
        out[(la.kernel, la.kernel_file)] = (key_of(la, j), okey, changed)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("engine", choices=("vllm", "sglang"))
    ap.add_argument("wheel", help="the release's wheel (or install)")
    ap.add_argument("--per-kernel", type=int, default=4, help="launches per rule kernel (half captured, half varied)")
    ap.add_argument("--moe", type=int, default=24, help="launches of triton-moe's one rule kernel (half as "
                    "captured, half for random entries)")
    ap.add_argument("--full", type=int, default=1, help="of them, how many compiled in full")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--family", action="append", choices=FAMILIES, help="only these families (default: all)")
    args = ap.parse_args(argv)

    import triton
    import triton_rules_recheck as trr

    from tileprobe.backends.triton import allocate
    from tileprobe.backends.triton.toolchain import ENGINE_TRITON
    from tileprobe.engines import manifest, pins
    from tileprobe.engines.triton_configs import find_engine
    from tileprobe.errors import UsageError
    from tileprobe.predict import CannotPredict, recheck

    try:
        src = find_engine(args.engine, args.wheel)
        manifest.check(src)
        if src.version == pins.READ_FROM[args.engine]:
            raise UsageError(f"{src.label()} is the release the rule tables were checked on: nothing to re-check")
        if triton.__version__ != ENGINE_TRITON or allocate.unavailable():
            raise UsageError(f"the rule tables were checked on Triton {ENGINE_TRITON}; this is Triton "
                             f"{triton.__version__} ({allocate.unavailable() or 'allocation pass available'})")
    except UsageError as exc:
        sys.stderr.write(f"engine_rules_recheck: {exc}\n")
        return 2
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    families = tuple(args.family or FAMILIES)
    new, old = src.label(), pins.label(args.engine)
    print(f"{new}: re-checking the rules stated on {old}'s files, Triton {ENGINE_TRITON}, seed {seed}", flush=True)
    t0 = time.time()
    got_new = trr.captured_families(families, {args.engine: args.wheel})
    got_old = trr.captured_families(families)
    print(f"captured both releases in {time.time() - t0:.0f} s", flush=True)
    cache = tempfile.mkdtemp(prefix="tileprobe-engine-recheck-")
    rows, unreached = [], []
    for family in families:
        table, ruled, draw, key_of, cap = got_new[family]
        paired = pairs(cap, got_old[family][4], key_of, new, old)
        ours = [(la, j) for la, j in cap if _engine_of(j) == new]
        by_kernel: dict[str, list] = {}
        for (kernel, kfile), (key, okey, changed) in paired.items():
            if kernel in ruled and (ENGINE_TRITON, *okey) in table:
                by_kernel.setdefault(kernel, []).append((kfile, key, okey, changed))
        theirs = {la.kernel for la, j in got_old[family][4] if _engine_of(j) == old}
        unreached += [f"{family} {k}" for k in ruled if k in theirs and k not in by_kernel]
        for kernel, files in sorted(by_kernel.items()):
            for kfile, key, okey, changed in files:
                row = {"family": family, "kernel": kernel, "file": kfile, "key": list(key), "from": list(okey),
                       "triton": ENGINE_TRITON, "changed": changed, "checked": 0, "compiled": 0, "differ": 0,
                       "differences": []}
                mine = [(la, j) for la, j in ours if la.kernel == kernel and la.kernel_file == kfile]
                with recheck.provisionally([{**row, "checked": 1}]):
                    for i in range(args.moe if family == "triton-moe" else args.per_kernel):
                        try:
                            launch, job, predicted = draw(kernel, rng, i % 2 == 1, c=mine)
                        except (AssertionError, CannotPredict) as exc:
                            print(f"  {family} {kernel}: no draw ({exc})", flush=True)
                            break
                        shared, upto, err = trr.tritons_bytes(job, i < args.full, cache)
                        row["checked"] += 1
                        row["compiled"] += upto == "cubin"
                        if shared != predicted:
                            row["differ"] += 1
                            row["differences"].append({
                                "launch": {k: (v.dtype if hasattr(v, "dtype") else v) for k, v in launch.args}
                                | dict(launch.options), "cc": job.cc, "rule": predicted, "triton": shared,
                                "error": err})
                        print(f"  {family} {kernel} [{key[-1][:12]} as {okey[-1][:12]}] sm_{job.cc}: rule "
                              f"{predicted} B, Triton {shared if shared is not None else err} ({upto})"
                              f"{'' if shared == predicted else '  DIFFERS'}", flush=True)
                if row["checked"]:
                    rows.append(row)
    made_by = {"command": "python tools/engine_rules_recheck.py " + " ".join(
        [args.engine, Path(args.wheel).name] + (argv if argv is not None else sys.argv[1:])[2:]),
        "seed": seed, "date": datetime.date.today().isoformat(), "triton": ENGINE_TRITON, "not_reached": unreached}
    p = manifest.write_rules(src.engine, src.version, rows, made_by)
    n = sum(r["checked"] for r in rows)
    bad = [r for r in rows if r["differ"]]
    print(f"{len(rows)} rule keys, {n} launches, {sum(r['differ'] for r in rows)} differ ({len(bad)} keys decline); "
          f"not reached: {', '.join(unreached) or 'none'}; {time.time() - t0:.0f} s -> {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
