"""Launch the engines' own Triton attention kernels on a GPU with real tensors and check every output element.

For each case of tileprobe.audit.runtime_cases (SGLang extend / prefill / decode attention, vLLM unified attention
2D and 3D, vLLM's Triton MLA decode), on the one GPU here:
1. the engine's launcher is imported from its wheel through tileprobe.audit.capture's finder (`serving`: the
   engine's modules from the wheel, the same stand-ins for its platform helpers answering as this device, and
   neither the torch.cuda stand-in nor the launch recording: the launches are real);
2. its launches are first captured once under capture.engine_session with this device as the target, only to
   name what the engine picked (kernels, BLOCK sizes, warps, stages, the engine line that set them);
3. the output is poisoned with NaN, the launcher runs once on fresh random inputs (a new seed each run), and every
   element is checked against the fp64 reference (runtime_cases.reference) with tileprobe.results.tolerance's one
   rule |out - ref| <= atol * rms(ref over the element's output row) + rtol * |ref| (a row: one query token's head,
   one softmax average); a NaN left anywhere fails;
4. the launcher call is timed with triton.testing.do_bench (median and 20-80 % spread of its repetitions:
   us_median, us_spread; at these small sizes that is mostly the launcher's host-side Python and Triton's launch
   path) and replayed from a CUDA graph with do_bench_cudagraph (us_graph_median, us_graph_spread: the kernels).

Bound (tolerance.derive's form, fp32 accumulation): rtol = the triton-audit family's 2e-2, atol = 4 * 2^-8 =
0.0156 (P_ROUNDING) instead of its 1e-2. The kernels read bf16 q/k/v (the reference reads the same values in fp64)
and accumulate q.k and P.V in fp32; what they round is P to bf16 before the P.V dot and O to bf16 once. O's
rounding is relative (<= 2^-8 |ref|: rtol's 4 * 2^-8 lies under the 2e-2 floor). P's rounding, each weight's own
relative error delta_j (|delta_j| <= u = 2^-8, independent signs), gives an element error sum_j delta_j p_j v_jd of
standard deviation u / sqrt(3) * sqrt(sum_j p_j^2 v_jd^2), which is u / sqrt(3) = 2.3e-3 of the output row's rms
(sum_j p_j^2 both ways): the measured rel_err of every case is that 2e-3. atol is therefore in units of the
element's output row (one query token's head, one softmax average: a row of 2 keys is ~10 times the size of one of
300, so a sequence-wide rms misjudges short rows) and set at 4 u, the margin tolerance.py gives rtol: ~7 standard
deviations, where an element that cancels to ~0 has no rtol slack. The first H200 runs showed why: with atol 1e-2
of a sequence's rms, 16 of 3.1M SGLang prefill elements stood at 1.5-1.7 times the bound; per row at 1e-2 the worst
stood at 0.94 (4.2 standard deviations). A key shifted in or out of the window moves a row by ~1/sqrt(keys) of its
rms (0.09 at 128 keys), a dropped sink or a wrong KV head by O(1), all far outside; `--corrupt` shows flipped
elements are caught, and an output left unwritten (the NaN poison) fails.

Rows go through tileprobe's results writer (results.jsonl, results.csv, run.json): verdict ok (evidence verified)
or incorrect, launch-error when the kernel does not build or run here (the reason says why); a printed line carries
numbers only where they were measured (a dry run's or a failed launch's says "not measured").
Run: PYTHONPATH=. python3 -m tileprobe.audit.runtime --out DIR [--wheels DIR] [--case NAME ...] [--model M]
[--slim DIR]. Exit codes (EXIT_CODES): 0 every case verified and every corruption control caught; 1 a case
incorrect or launch-error, or a control NOT CAUGHT; 2 bad input (one line); 3 not run: no GPU here (nothing is
written), or --dry-run (captured, nothing checked).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tileprobe.audit import capture, runtime_cases
from tileprobe.audit.run import BLOCK_NAMES, branch_line
from tileprobe.backends.triton.toolchain import cache_root
from tileprobe.engines.triton_configs import EngineSource, find_engine
from tileprobe.errors import TileprobeError, UsageError
from tileprobe.models import attention_model
from tileprobe.families import arch_for, family
from tileprobe.families import triton_audit as fam
from tileprobe.families.base import Accumulation
from tileprobe.lazy import LazyModule
from tileprobe.results import tolerance
from tileprobe.results.rows import Outcome, StaticInfo, make_row
from tileprobe.results.writer import recording
from tileprobe.targets import NoDevice, Target, profile, query_devices
from tileprobe.verdict import Verdict

torch = LazyModule("torch")
triton = LazyModule("triton")
_testing = LazyModule("triton.testing")

ACCUMULATION = Accumulation("fp32", None, "bf16 q/k/v, fp32 q.k and P.V accumulation, P rounded to bf16 (atol "
                                           "4*2^-8: P's rounding); ref_group = one output row (a query token's head)")
# atol in units of the output row's rms: P's bf16 rounding at the margin tolerance.py gives rtol (module docstring)
P_ROUNDING = tolerance.RTOL_MARGIN * tolerance.UNIT_ROUNDOFF["bf16"]


def bound_for(keys: int) -> tolerance.Bound:
    return tolerance.derive(max(fam.FAMILY.atol, P_ROUNDING), fam.FAMILY.rtol, keys, ACCUMULATION)


@contextlib.contextmanager
def serving(source: EngineSource, target: Target, allow, stand_ins: dict):
    """A capture.Session whose `module(name)` imports the engine's module from the wheel (capture's finder and
    stand-ins), with nothing patched: its launches are real. The engine's modules leave sys.modules on exit (not
    Triton's that a launch imported: its extension's submodules cannot be imported twice)."""
    session = capture.Session(source, target, frozenset(allow), dict(stand_ins),
                              cache_root() / "audit-src" / f"{source.engine}-{source.version}")
    before = dict(sys.modules)
    finder = capture._Finder(session)
    sys.meta_path.insert(0, finder)
    try:
        yield session
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n not in before and n.split(".")[0] == source.engine]:
            del sys.modules[name]  # the engine's modules only: what a launch imported of Triton stays
        importlib.invalidate_caches()


def captured(src: EngineSource, target: Target, case, built) -> list[capture.Launch]:
    """The launches the engine's launcher makes for these arguments on this device, recorded, not made."""
    with capture.engine_session(src, target, case.allow, case.stand_ins) as session:
        getattr(session.module(case.module), case.launcher)(*built.args, **built.kwargs)
        return list(session.launches)


def check(built, bound) -> dict:
    ref, groups = runtime_cases.reference(built)
    dv = built.out.shape[-1]
    return tolerance.check(built.out.reshape(-1, dv), ref.reshape(-1, dv), groups.reshape(-1), bound)


def corrupt(built, bound, n: int, gen) -> dict:
    """The check of a copy of the verified output with `n` elements flipped in sign (the largest |ref| of random
    rows): it must fail."""
    ref, groups = runtime_cases.reference(built)
    dv = built.out.shape[-1]
    bad = built.out.reshape(-1, dv).clone()
    rows = torch.randperm(bad.shape[0], generator=gen, device="cpu")[:n].to(bad.device)
    cols = ref.reshape(-1, dv)[rows].abs().argmax(dim=1)
    bad[rows, cols] = -bad[rows, cols]
    return tolerance.check(bad, ref.reshape(-1, dv), groups.reshape(-1), bound)


def _blocks(launch: capture.Launch) -> tuple[int, int, int]:
    return tuple(next((int(launch.arg(k)) for k in names if isinstance(launch.arg(k), int)), 0)  # type: ignore
                 for names in BLOCK_NAMES)


def _config(src, case, launches, arch):
    first = launches[0]
    m, n, d = _blocks(first)
    key = hashlib.sha256(json.dumps([case.name, [l.identity() for l in launches]], default=str).encode())
    kernels = "+".join(dict.fromkeys(l.kernel for l in launches))
    return fam.make_config(src.label(), kernels, case.launcher, m, n, d, int(first.arg("num_warps", 4) or 4),
                           int(first.arg("num_stages", 3) or 3), arch, branch_line(first), key.hexdigest()[:10])


def _outcome(cfg, verdict: Verdict, reason: str) -> Outcome:
    return Outcome(cfg, verdict, reason, StaticInfo(stages=cfg.stages))


def _launch_text(launches) -> str:
    return "; ".join(f"{l.kernel} grid {'x'.join(map(str, l.grid))} warps {l.arg('num_warps') or 'default'} "
                     f"stages {l.arg('num_stages') or 'default'} BLOCK {'/'.join(map(str, _blocks(l)))}" for l in launches)


EXIT_CODES = ("exit codes: 0 every case verified and every corruption control caught; 1 a case incorrect or "
              "launch-error, or a control NOT CAUGHT; 2 bad input (one line); 3 not run: no GPU here (nothing is "
              "written), or --dry-run (captured, nothing checked)")
NOT_RUN = 3


class NotRun(TileprobeError):
    """The check cannot run here (no GPU): said in one line, exit NOT_RUN, nothing written."""


def gpu_target() -> Target | None:
    """The first GPU here, or None."""
    try:
        return query_devices()[0]
    except (NoDevice, IndexError, UsageError):
        return None


def device_target() -> Target:
    """The first GPU, else the h200 profile (a dry run's: capture and reference only, nothing launched)."""
    return gpu_target() or profile("h200")


def nvcc_version() -> str | None:
    try:
        out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return next((l.split("release ")[1].split(",")[0] for l in out.splitlines() if "release " in l), None)


def run_case(case, src, target, arch, seed, reps_ms, corrupt_n, launch: bool):
    """(row fields, printable line, corrupted-check result or None) of one case."""
    dev = "cuda" if launch else "cpu"
    gen = torch.Generator(device=dev).manual_seed(seed)
    model = runtime_cases.model_of(case)
    built = case.build(model, gen, dev)
    bound = bound_for(built.keys)
    launches = captured(src, target, case, built)
    cfg = _config(src, case, launches, arch)
    fields = {"problem": f"{model.name}: {case.what}", "workload": case.name, "seed": seed,
              "kernel_file": launches[0].kernel_file, "config_source": branch_line(launches[0]),
              "launch_reason": _launch_text(launches)}
    if not launch:
        return cfg, _outcome(cfg, Verdict.NOT_RUN, "dry run: captured, not launched"), fields, None
    try:
        with serving(src, target, case.allow, case.stand_ins) as session:
            fn = getattr(session.module(case.module), case.launcher)
            built.out.fill_(float("nan"))
            fn(*built.args, **built.kwargs)
            torch.cuda.synchronize()
            result = check(built, bound)
            ms = _testing.do_bench(lambda: fn(*built.args, **built.kwargs), warmup=reps_ms[0], rep=reps_ms[1],
                                   quantiles=[0.5, 0.2, 0.8])
            graph = graph_times(lambda: fn(*built.args, **built.kwargs), reps_ms[1])
    except Exception as exc:  # a kernel that does not build or run under this Triton: its row says so
        why = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
        fields.update(launch_status="error")
        return cfg, _outcome(cfg, Verdict.LAUNCH_ERROR, why), fields, None
    ok = result["bad_elements"] == 0
    fields.update({k: result[k] for k in ("rel_err", "atol", "rtol", "tolerance", "checked_elements",
                                          "bad_elements", "bad_groups", "worst_group", "worst_ratio")})
    fields.update(launch_status="ran", us_median=round(ms[0] * 1e3, 2), us_spread=round((ms[2] - ms[1]) * 1e3, 2))
    if graph is not None:
        fields.update(us_graph_median=round(graph[0] * 1e3, 2), us_graph_spread=round((graph[2] - graph[1]) * 1e3, 2))
    reason = (f"{result['checked_elements']} elements within the bound, worst {result['worst_ratio']:.3f} of it"
              if ok else f"{result['bad_elements']} of {result['checked_elements']} elements outside the bound "
                         f"({result['nonfinite']} not finite), worst {result['worst_ratio']:.3g} of it: row "
                         f"{result['worst_row']} col {result['worst_col']} out {result['worst_value']:.5g} ref "
                         f"{result['worst_ref']:.5g}")
    flipped = corrupt(built, bound, corrupt_n, torch.Generator().manual_seed(seed)) if corrupt_n and ok else None
    return cfg, _outcome(cfg, Verdict.OK if ok else Verdict.INCORRECT, reason), fields, flipped


def graph_times(call, rep_ms: int):
    """[median, 20 %, 80 %] ms of the launcher's launches replayed from a CUDA graph (the kernels without the
    launcher's Python and Triton's launch path, which dominate do_bench at these sizes), or None when the launcher
    cannot be captured."""
    try:
        return _testing.do_bench_cudagraph(call, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
    except Exception:  # noqa: BLE001 (a launcher that syncs or allocates outside the graph: no graph time)
        torch.cuda.synchronize()
        return None


def slim(out: Path, cases) -> list[Path]:
    """Small wheels in `out` holding only the files the cases import (and each wheel's METADATA, which
    EngineSource reads for the name and version)."""
    out.mkdir(parents=True, exist_ok=True)
    made = []
    for engine in sorted({c.engine for c in cases}):
        src = find_engine(engine)
        files = {m.replace(".", "/") + ".py" for c in cases if c.engine == engine for m in c.allow}
        files |= {r for c in cases if c.engine == engine for r in c.reads}
        with zipfile.ZipFile(src.origin) as whl:
            meta = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA") and n.startswith(engine + "-")]
            dest = out / Path(src.origin).name
            with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as small:
                for name in sorted(files) + meta:
                    small.writestr(name, whl.read(name))
        made.append(dest)
    return made


def _num(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def line_of(name: str, outcome: Outcome, row: dict) -> str:
    """A case's printed line: its numbers only where they were measured."""
    head = f"{name:34s} {outcome.verdict.value:13s}"
    if row.get("checked_elements") is None:  # a dry run, or a launch that failed: nothing was measured
        return f"{head} not measured  {outcome.reason[:100]}"
    return (f"{head} worst/bound {_num(row['worst_ratio'], '7.4f')} rel_err {_num(row['rel_err'], '.2e')} median "
            f"{_num(row['us_median'], '8.2f')} us graph {_num(row['us_graph_median'], '8.2f')} us  "
            f"{outcome.reason[:60]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tileprobe.audit.runtime", description=__doc__.split("\n")[0],
                                 epilog=EXIT_CODES)
    ap.add_argument("--out", type=Path, help="results folder (results.jsonl, results.csv, run.json)")
    ap.add_argument("--wheels", help="a folder of engine wheels (default: TILEPROBE_ENGINE_WHEELS or the cache)")
    ap.add_argument("--case", action="append", help="run only these cases (repeatable)")
    ap.add_argument("--model", help="a preset of tileprobe.models (qwen3-30b-a3b, gpt-oss-120b, kimi-k2, ...) or a "
                                    "config.json: the cases that apply to it, with its dimensions (default: each "
                                    "case's preset)")
    ap.add_argument("--seed", type=int, help="the random inputs' seed (default: a fresh one)")
    ap.add_argument("--reps", default="25,200", help="do_bench warmup,rep in milliseconds")
    ap.add_argument("--corrupt", type=int, default=8, help="elements flipped in each verified output's control check")
    ap.add_argument("--dry-run", action="store_true", help="no launch: build inputs on the CPU, capture, reference "
                                                           "(exit 3: nothing checked)")
    ap.add_argument("--slim", type=Path, help="write small engine wheels for the cases into this folder and stop")
    a = ap.parse_args(argv)
    gpu = gpu_target()
    target = gpu or profile("h200")  # no GPU: inputs on the CPU, the launches captured for an H200 (--dry-run)
    model = attention_model(a.model) if a.model else None
    every = runtime_cases.cases(target.sms, model)
    if model is not None and not every:
        raise UsageError(f"--model {a.model}: none of the cases applies to {model.name} (no attention layer)")
    chosen = [c for c in every if not a.case or c.name in a.case]
    if a.case and len(chosen) != len(set(a.case)):
        known = f"the cases for {model.name} are" if model else "known cases are"
        raise UsageError(f"--case {', '.join(n for n in a.case if n not in {c.name for c in every})}: {known} "
                         f"{', '.join(c.name for c in every)}")
    if a.slim:
        for p in slim(a.slim, chosen):
            print(f"{p} {p.stat().st_size} B")
        return 0
    if a.out is None:
        raise UsageError("--out DIR is required")
    if gpu is None and not a.dry_run:
        raise NotRun("not run: no GPU (no CUDA device visible); nothing was launched, checked or written "
                     "(--dry-run captures the launches without one)")
    launch = not a.dry_run
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    reps = tuple(int(x) for x in a.reps.split(","))
    arch = arch_for(family(fam.NAME), target.cc)
    columns = {"triton_version": triton.__version__, "nvcc_version": nvcc_version()}
    sources = {e: find_engine(e, a.wheels) for e in sorted({c.engine for c in chosen})}
    meta = {"family": fam.NAME, "target": target.as_dict(), "toolchain": columns | {"torch": torch.__version__},
            "engines": {e: [s.label(), Path(s.origin).name] for e, s in sources.items()}, "launched": launch,
            "controls": [], "configs": len(chosen), **({"model": model.name} if model else {})}
    failed = 0
    with recording(a.out, meta, "verified" if launch else "none", " ".join(sys.argv), seed=seed) as rec:
        for case in chosen:
            src = sources[case.engine]
            cfg, outcome, fields, flipped = run_case(case, src, target, arch, seed, reps, a.corrupt, launch)
            digest = hashlib.sha256(src.read_text(case.module.replace(".", "/") + ".py").encode()).hexdigest()
            row = make_row(cfg, target, columns, outcome, runtime=fields,
                           extra={"engine": src.label(), "engine_hash": digest[:16], "driver": target.driver})
            rec.write(row)
            failed += outcome.verdict is not Verdict.OK
            print(line_of(case.name, outcome, row), flush=True)
            if flipped is not None:
                control = {"case": case.name, "flipped": a.corrupt, "bad_elements": flipped["bad_elements"],
                           "worst_ratio": flipped["worst_ratio"], "caught": flipped["bad_elements"] > 0}
                rec.meta["controls"].append(control)
                failed += not control["caught"]  # a check that misses flipped elements verifies nothing
                print(f"{'':34s} corrupted control: {a.corrupt} flipped -> {flipped['bad_elements']} outside the "
                      f"bound ({'caught' if control['caught'] else 'NOT CAUGHT'})", flush=True)
    if not launch:
        return NOT_RUN
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UsageError as exc:  # bad input (a missing engine wheel, an unknown --case): one line, exit 2, as the CLI's
        sys.stderr.write(f"python -m tileprobe.audit.runtime: error: {exc}\n")
        sys.exit(2)
    except NotRun as exc:  # no GPU: one line, exit 3, nothing written
        sys.stderr.write(f"python -m tileprobe.audit.runtime: {exc}\n")
        sys.exit(NOT_RUN)
