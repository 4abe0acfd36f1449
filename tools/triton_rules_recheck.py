"""Re-check every stated Triton rule against the installed Triton's own bytes, and write the result as data.

    python tools/triton_rules_recheck.py [--per-kernel N] [--seed S] [--family triton-ssd ...] [--out FILE]

With Triton R installed, for each rule of tileprobe.predict.triton_{moe,ssd,conv,attention,ogs} (kernel and table key
of the engines the pin table names), draws random launches the rule answers (the tests' draws: tests/_triton_rules.py
and tests/predict/test_triton_*.py; the audit's captured launches on the tests' targets, half of them varied), asks
the rule as checked on Triton FROM (the pinned engine Triton, tileprobe.backends.triton.toolchain.ENGINE_TRITON), and
compares with R's own metadata.shared: its allocation pass alone where tileprobe.backends.triton.allocate runs
under R, else (and for --full launches) a full compile. Writes tileprobe/predict/rechecked/<R>.json: per (family,
kernel, key) the launches checked, compiled in full, and differing, with the engine release, the date and the
command. tileprobe.predict.recheck reads it: a rule listed with differ 0 answers under R; any other declines.

Review the file's diff before committing it: it is what moves the rules to R.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "predict"), str(ROOT)]

FAMILIES = ("triton-moe", "triton-ssd", "triton-conv", "triton-attention", "triton-ogs")
# the file names no engine release (tests/test_release_facts.py): a rule's key is its kernel file's sha256
ENGINES_NOTE = "the releases the rule tables were checked on (tileprobe.engines.pins.READ_FROM); keys are file sha256"


def _unreleased(label: str) -> str:
    """'vllm <release> lightning_attn.py' -> 'vllm lightning_attn.py' (the key's sha256 names the content)."""
    from tileprobe.engines import pins
    for engine in pins.READ_FROM:
        label = label.replace(pins.label(engine), engine)
    return label


def capture(target_name: str, plans, wheels: dict | None = None):
    """tests/_triton_rules.capture without its skips (the allocation pass need not run under this Triton); `wheels`:
    engine -> the wheel to capture from (default: the engine tileprobe finds, its pinned release)."""
    import dataclasses

    from tileprobe.audit.kernels import KERNELS
    from tileprobe.audit.run import AuditOptions, capture_all, gpu_name
    from tileprobe.engines.triton_configs import find_engine
    from tileprobe.models import attention_model
    from tileprobe.targets import resolve_target

    target, _ = resolve_target(target_name)
    target = dataclasses.replace(target, device_name=gpu_name(target, None))
    out = []
    for engine, model, entries, *batches in plans:
        m = attention_model(str(ROOT / model) if model.endswith(".json") else model)
        opts = AuditOptions(engine, m.name, target.name, batches=batches[0] if batches else (1,))
        cap = capture_all(find_engine(engine, (wheels or {}).get(engine)), target, m, [KERNELS[e] for e in entries], opts, target.cc_int)
        out += [(p.launch, p.job) for p in cap.planned]
    return out


def captured_families(families, wheels: dict | None = None):
    """family -> (table, the rule's kernels, draw(kernel, rng, varied) -> (launch, job, bytes), key(launch, job),
    the captured (launch, job) pairs); captured from `wheels` (capture)."""
    from tileprobe.audit import mamba_rule, ogs_rule
    from tileprobe.predict import triton_attention, triton_conv, triton_moe, triton_ogs, triton_ssd

    out = {}
    if "triton-ssd" in families:
        import test_triton_ssd as t
        cap = capture("rtx-pro-6000", [("vllm", "nemotron-h-8b", t.ENTRIES)], wheels)
        out["triton-ssd"] = (triton_ssd.CHECKED, t.RULED, lambda k, r, v, c=cap, t=t: t._draw(r, c, k, v),
                             lambda la, j: (mamba_rule.source_sha256(la, j),), cap)
    if "triton-conv" in families:
        import test_triton_conv as t
        plans = [("vllm", m, e, t.BATCHES.get(m, (1,))) for m, e in t.MODELS.items()]
        cap = [(la, j) for la, j in capture("rtx-pro-6000", plans, wheels) if la.kernel in t.RULED]
        out["triton-conv"] = (triton_conv.CHECKED, t.RULED, lambda k, r, v, c=cap, t=t: t._draw(r, c, k, v),
                              lambda la, j: (mamba_rule.source_sha256(la, j),), cap)
    if "triton-attention" in families:
        import test_triton_attention as t
        cap = capture("rtx-pro-6000", t.CAPTURES, wheels)
        out["triton-attention"] = (triton_attention.CHECKED, t.RULED,
                                   lambda k, r, v, c=cap, t=t: t._draw(r, c, k, v),
                                   lambda la, j: (mamba_rule.source_sha256(la, j),), cap)
    if "triton-ogs" in families:
        import test_triton_ogs as t
        cap = capture("h200", [("vllm", "gpt-oss-120b", ("vllm-moe-mxfp4-decode",))], wheels)
        out["triton-ogs"] = (triton_ogs.CHECKED, t.RULED, lambda k, r, v, c=cap, t=t: t.draw_ruled(r, c, k, v),
                             lambda la, j: (la.kernel, ogs_rule.source_sha256(la, j)), cap)
    if "triton-moe" in families:
        cap = moe_capture(wheels)
        out["triton-moe"] = (triton_moe.CHECKED, ("fused_moe_kernel",),
                             lambda k, r, v, c=cap, w=wheels: moe_draw(r, c, v, w),
                             lambda la, j: (j.source.sha256,), cap)
    return out


# vLLM's fused_experts_impl, asked for these layers with an entry of its own (the engine's override config), on these
# targets: (quant, hidden, intermediate per rank, experts, M, top_k); three shapes of real models (Qwen3-30B-A3B,
# DeepSeek-V3 at tp 8, gpt-oss-120b's dense sizes), each quantization the rule states, decode and prefill sizes.
MOE_LAYERS = (("bf16", 2048, 768, 128, 8, 8), ("bf16", 2048, 768, 128, 512, 8), ("fp8", 2048, 768, 128, 64, 8),
              ("fp8-block", 7168, 256, 256, 16, 8), ("fp8-block", 7168, 256, 256, 1024, 8),
              ("bf16", 2880, 2880, 128, 4, 4))
MOE_TARGETS = ("rtx-pro-6000", "dgx-spark-gb10", "h200", "b200")
MOE_ENTRIES = ({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
                "num_stages": 3},
               {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 16, "num_warps": 4,
                "num_stages": 4})


def moe_capture(wheels: dict | None = None, entries=MOE_ENTRIES, layers=MOE_LAYERS, targets=MOE_TARGETS):
    """(launch, job) of vLLM's own fused_moe_kernel launches (tileprobe.triton.captured's way: fused_experts_impl from
    the wheel with `entry` as the override config get_config returns), both GEMMs of each layer, for each entry and
    target; the job cut from the kernel's file as the audit cuts it (its key is the audit's)."""
    import dataclasses

    from tileprobe.audit import capture as audit_capture
    from tileprobe.audit import jobs as audit_jobs
    from tileprobe.audit.entries import vllm_moe
    from tileprobe.audit.run import gpu_name
    from tileprobe.engines.triton_configs import find_engine
    from tileprobe.targets import resolve_target
    from tileprobe.triton import captured as cap

    src = find_engine("vllm", (wheels or {}).get("vllm"))
    out = []
    for name in targets:
        target, _ = resolve_target(name)
        target = dataclasses.replace(target, device_name=gpu_name(target, None))
        with audit_capture.engine_session(src, target, vllm_moe.ALLOW, vllm_moe.vllm_moe_stand_ins.STAND_INS) as s:
            impl = s.module(vllm_moe.MODULE).fused_experts_impl
            scope = sys.modules[cap.PACKAGE].get_config.__globals__
            for quant, hidden, inter, experts, m, top_k in layers:
                for entry in entries:
                    start = len(s.launches)
                    scope["_config"] = dict(entry)
                    try:
                        args, kwargs = cap.layer_arguments((quant, hidden, inter, experts, 1, m, top_k,
                                                       tuple(sorted(entry.items()))))
                        impl(*args, **kwargs)
                    finally:
                        scope["_config"] = None
                    out += [(la, audit_jobs.job_of(src, la, target.cc_int)) for la in s.launches[start:]]
    return out


def moe_draw(rng, cap, varied: bool, wheels: dict | None = None):
    """A captured fused_moe_kernel launch the rule answers, asked of tileprobe.audit.moe_rule (the audit's own
    question): as captured, or (varied) the engine's launch of the same layer for a random entry."""
    from tileprobe.audit import moe_rule
    from tileprobe.backends.triton.toolchain import ENGINE_TRITON
    from tileprobe.predict import CannotPredict
    from tileprobe.targets import profile

    for _ in range(40):
        la, job = rng.choice(cap)
        try:
            said = moe_rule.predict(la, job, ENGINE_TRITON)
        except CannotPredict:  # a launch the rule does not state (a TMA path on sm_90 / sm_100): not varied either
            continue
        if not varied:
            return la, job, said
        entry = {"BLOCK_SIZE_M": rng.choice([16, 32, 64, 128]), "BLOCK_SIZE_N": rng.choice([32, 64, 128, 256]),
                 "BLOCK_SIZE_K": rng.choice([32, 64, 128, 256]), "GROUP_SIZE_M": rng.choice([1, 16, 32]),
                 "num_warps": rng.choice([4, 8]), "num_stages": rng.choice([2, 3, 4, 5])}
        quant, n, k = moe_rule.quant_of(la), int(la.arg("N")), int(la.arg("K"))
        layer = next(ly for ly in MOE_LAYERS if ly[0] == quant and (n, k) in ((2 * ly[2], ly[1]), (ly[1], ly[2])))
        target = next(t for t in MOE_TARGETS if profile(t).cc_int == job.cc)
        got = moe_capture(wheels, (entry,), (layer,), (target,))
        la, job = got[0] if (n, k) == (2 * layer[2], layer[1]) else got[1]
        try:
            return la, job, moe_rule.predict(la, job, ENGINE_TRITON)
        except CannotPredict:
            continue
    raise AssertionError("no fused_moe_kernel launch the triton-moe rule answers in 40 draws")


def moe_draws(base: str):
    """triton-moe: per engine, tests/predict/test_triton_predict.py's draw (a real model's GEMM, a random entry and
    capability) asked of the rule as checked on `base`, built by the family's launch_job."""
    import test_triton_predict as t

    from tileprobe.families import triton_moe as tm
    from tileprobe.predict import CannotPredict
    from tileprobe.predict.triton_moe import predict
    from tileprobe.triton.sweep import engine_kernel_source

    rows = []
    for engine in ("vllm", "sglang"):
        src, ks = engine_kernel_source(engine, None)

        def draw(rng, varied, engine=engine, src=src, ks=ks):
            for _ in range(200):
                quant, (gemm, e, n, k, top_k), entry, cc, m = (
                    rng.choice(tm.QUANTS), t._random_gemm(rng), t._random_entry(rng), rng.choice(t.ARCHS),
                    rng.choice([1, 8, 64, 512]))
                try:
                    b = predict(src.label(), quant, entry, cc, base, n, k, kernel_sha256=ks.sha256)
                except CannotPredict:
                    continue
                job = tm.launch_job(engine, ks, quant, gemm, e, n, k, m, top_k, entry, cc)
                return {"quant": quant, "N": n, "K": k, **entry}, job, b
            raise AssertionError("no launch the triton-moe rule answers in 200 draws")
        rows.append(("fused_moe_kernel", (ks.sha256,), draw))
    return rows


def tritons_bytes(job, full: bool, cache: str):
    """(metadata.shared or None, 'allocate' / 'cubin', error text)."""
    from tileprobe.backends.triton.compile import TritonBuild, compile_job
    job = job.compiled() if full else job.sized()
    build = compile_job(job, cache)
    if isinstance(build, TritonBuild):
        return build.shared, job.upto, None
    return None, job.upto, str(build)[:300]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-kernel", type=int, default=2, help="launches per rule kernel (half captured, half varied)")
    ap.add_argument("--full", type=int, default=1, help="of them, how many compiled in full when the allocation "
                    "pass runs alone (all of them otherwise)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--family", action="append", choices=FAMILIES, help="only these families (default: all)")
    ap.add_argument("--out", default=None, help="default: tileprobe/predict/rechecked/<installed Triton>.json")
    ap.add_argument("--keep", action="store_true", help="keep the file's earlier rows for keys this run does not "
                    "reach (each row keeps its own counts; the file lists every command that wrote it)")
    args = ap.parse_args(argv)

    import triton

    from tileprobe.backends.triton import allocate
    from tileprobe.backends.triton.toolchain import ENGINE_TRITON
    from tileprobe.engines import pins

    release, base = triton.__version__, ENGINE_TRITON
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    families = tuple(args.family or FAMILIES)
    why_not_sized = allocate.unavailable()
    print(f"Triton {release}: re-checking the Triton {base} rules, seed {seed}; Triton's bytes by "
          f"{'its allocation pass' if why_not_sized is None else 'full compiles (' + why_not_sized + ')'}",
          flush=True)
    cache = tempfile.mkdtemp(prefix="tileprobe-recheck-")
    rows: dict[tuple, dict] = {}
    failures = []

    def check(family, kernel, key, engine_label, launch_desc, job, predicted, full):
        got, upto, err = tritons_bytes(job, full or why_not_sized is not None, cache)
        r = rows.setdefault((family, kernel, key), {
            "family": family, "kernel": kernel, "key": list(key), "from": base, "engine": _unreleased(engine_label),
            "checked": 0, "compiled": 0, "differ": 0, "differences": []})
        r["checked"] += 1
        r["compiled"] += upto == "cubin"
        ok = got == predicted
        if not ok:
            r["differ"] += 1
            r["differences"].append({"launch": launch_desc, "cc": job.cc, "rule": predicted, "triton": got,
                                     "error": err})
        print(f"  {family} {kernel} [{key[-1][:12]}] sm_{job.cc}: rule {predicted} B, Triton {release} "
              f"{got if got is not None else err} ({upto}){'' if ok else '  DIFFERS'}", flush=True)

    t0 = time.time()
    if "triton-moe" in families:
        from tileprobe.predict import triton_moe
        for kernel, key, draw in moe_draws(base):
            for i in range(args.per_kernel):
                desc, job, b = draw(rng, True)
                check("triton-moe", kernel, key, triton_moe.CHECKED.get((base, *key)), desc, job, b,
                      i < args.full)
    for family, (table, ruled, draw, key_of, _) in captured_families(families).items():
        for kernel in ruled:
            for i in range(args.per_kernel):
                try:
                    launch, job, b = draw(kernel, rng, i % 2 == 1)
                except AssertionError as exc:
                    failures.append(f"{family} {kernel}: {exc}")
                    print(f"  {family} {kernel}: no draw ({exc})", flush=True)
                    break
                key = key_of(launch, job)
                check(family, kernel, key, table.get((base, *key)),
                      {k: (v.dtype if hasattr(v, "dtype") else v) for k, v in launch.args}
                      | dict(launch.options), job, b, i < args.full)

    stated = {f: t for f, t in (("triton-moe", "triton_moe"), ("triton-ssd", "triton_ssd"),
                                ("triton-conv", "triton_conv"), ("triton-attention", "triton_attention"),
                                ("triton-ogs", "triton_ogs")) if f in families}
    import importlib
    reached = {(f, key) for f, _kernel, key in rows}
    unreached = sorted(f"{f} {k[-1][:16]}" for f, mod in stated.items()
                       for k in importlib.import_module(f"tileprobe.predict.{mod}").CHECKED
                       if k[0] == base and (f, k[1:]) not in reached)
    doc = {"triton": release, "from": base, "date": datetime.date.today().isoformat(),
           "engines": ENGINES_NOTE, "seed": seed,
           "command": "python tools/triton_rules_recheck.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "tritons_bytes": "allocation pass (full compile for --full)" if why_not_sized is None
           else f"full compile: {why_not_sized}",
           "rules": sorted(rows.values(), key=lambda r: (r["family"], r["kernel"], r["key"])),
           "not_drawn": failures, "keys_not_rechecked": unreached}
    out = Path(args.out) if args.out else ROOT / "tileprobe" / "predict" / "rechecked" / f"{release}.json"
    if args.keep and out.is_file():
        before = json.loads(out.read_text())
        kept = [r for r in before["rules"] if (r["family"], r["kernel"], tuple(r["key"])) not in rows]
        doc["rules"] = sorted(doc["rules"] + kept, key=lambda r: (r["family"], r["kernel"], r["key"]))
        have = {(r["family"], tuple(r["key"])) for r in doc["rules"]}
        doc["keys_not_rechecked"] = sorted(k for k in set(unreached) | set(before.get("keys_not_rechecked", ()))
                                           if not any(f == k.split()[0] and key[-1].startswith(k.split()[1])
                                                      for f, key in have))
        doc["earlier"] = before.get("earlier", []) + [{k: before.get(k) for k in ("date", "seed", "command",
                                                                                  "tritons_bytes")}
                                                      | {"rows_kept": len(kept)}]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    n = sum(r["checked"] for r in rows.values())
    bad = [r for r in rows.values() if r["differ"]]
    print(f"{len(rows)} rules, {n} launches, {sum(r['differ'] for r in rows.values())} differ "
          f"({len(bad)} rules decline), {len(unreached)} table keys not re-checked, {time.time() - t0:.0f} s -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
