"""`tileprobe export triton-configs --tune`: on a GPU of the target's arch, each entry of the engine's config files
becomes the best *verified* config of the engine tuner's own search space that fits, measured.

The search space is data (tileprobe's statement of it, not the engines' code):
- vLLM: `benchmarks/kernels/benchmark_moe.py`, get_configs_compute_bound, CUDA branch (vllm-project/vllm at
  71acd375): BLOCK_SIZE_M {16,32,64,128,256} x BLOCK_SIZE_N {32,64,128,256} x BLOCK_SIZE_K {64,128,256} x
  GROUP_SIZE_M {1,16,32,64} x num_warps {4,8} x num_stages {2,3,4,5} = 1920 configs. With fp8 block quantization
  [block_n, block_k] it keeps only configs with `BLOCK_SIZE_K % block_k == 0 and BLOCK_SIZE_N % block_n == 0`
  (multiples of the block: 640 of 1920 for [128, 128]).
- SGLang: `benchmark/kernels/fused_moe_triton/common_utils.py` get_configs_compute_bound (the same 1920 on CUDA) and
  `tuning_fused_moe_triton.py`, which with a block shape keeps only `block_k % BLOCK_SIZE_K == 0` (divisors of the
  block: 1280 of 1920 for [128, 128]) (sgl-project/sglang at 00e96592 / 00f0b462).

The tune, per output file and batch size M (a key of the input file; `batches` picks a subset):
1. Prune: every config is compiled for the GPU's own arch, for each GEMM the file serves (as export does), in worker
   processes (`jobs`), cached by content; a config that does not compile, or whose `metadata.shared` exceeds the
   device's opt-in limit, is pruned and never launched.
2. Screen: every config left is launched once on fresh random inputs (the routing rotated as runtime.run_point
   rotates it, so the weights read span 4x the L2 or every expert); SCREEN RULE: one CUDA graph of those launches
   (both GEMMs), replayed once to warm, then `screen_reps` replays timed with CUDA events; the screen time is their
   median per launch set. A launch that raises is recorded and dropped.
3. Confirm: the `confirm_top` fastest by the screen get runtime.run_point on fresh inputs for each GEMM: every
   element checked against the fp64 reference under the bound the sweep uses (tileprobe.results.tolerance: the
   family's floor, raised with K for fp8 on sm_90), then graph-timed over rotated routings. The winner is the fastest
   config whose every GEMM is verified; a config with a wrong element is never chosen (the provenance lists it).
   A time per M (`us_graph_median`) is the sum over the GEMMs the file serves (vLLM: one entry serves both).
Only the M keys tuned are written. Result rows (rows.make_row, evidence `verified`) of every confirmed launch go to
OUT/tileprobe-rows/ (added to the rows there). Everything is staged beside OUT and put in place together at the end,
provenance first (tileprobe.staged): a failure leaves OUT as it was; its other files are never touched. `prune_only` stops after step 1 (no GPU needed; the caches are filled for a later tune).
Not handled: an SGLang `_down` file is tuned on its own, but the engine runs its entry with the up entry's
BLOCK_SIZE_M (down_config), so tune the up file without a `_down` file beside it (one config for both GEMMs).

Triton's cache: the workers compile with TRITON_CACHE_DIR set to one folder (`<cache>/triton-jit`), which the
launching process uses too. The JIT launch (`JITFunction.run` -> `_do_compile` -> `triton.compile(ASTSource(fn,
signature, constexprs, attrs), target=driver target, options=options.__dict__)`) computes its file-cache key from
the same source hash, backend (target) hash and options hash as tileprobe's own `triton.compile(ASTSource(...))`
with the binder's signature, constexprs and attrs (tileprobe.backends.triton.compile), and `GPUTarget("cuda", 90,
32)` is what the H200's driver reports; so the launch of a pruned-in config finds its cubin and is not compiled
again. Measured on the CPU machine with Triton 3.8.0 (tests/triton/test_triton_tune.py): Triton's own JIT warmup,
run with the engine launch's real integers and a driver stub that reports that target, computes the key of the entry
tileprobe's worker wrote and adds nothing to the shared cache. On the device (Triton 3.6.0 on the lent H200) the
provenance's `jit_entries_added_by_launches` says whether any launch compiled again (0: none). A tileprobe cache
entry from an earlier run whose Triton folder was removed is still valid for pruning; its launch then JIT-compiles
(slower only).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from tileprobe import progress
from tileprobe.backends.triton import runtime as rt
from tileprobe import preflight
from tileprobe.backends.triton.compile import KernelJob, TritonBuild, compile_many, one_line
from tileprobe.backends.triton.source import load
from tileprobe.backends.triton.toolchain import cache_root, require_triton
from tileprobe.engines import triton_configs as tc
from tileprobe.errors import UsageError
from tileprobe.families import family
from tileprobe.families import triton_moe as tm
from tileprobe.lazy import LazyModule
from tileprobe.results import tolerance
from tileprobe.results.classify import correctness
from tileprobe.results.rows import Outcome, StaticInfo, make_row
from tileprobe.results.writer import ResultsWriter, row_key
from tileprobe.staged import Staged
from tileprobe.targets import Target, resolve_target
from tileprobe.triton.audit import canonical, constexpr_positions, problem_for
from tileprobe.triton.export import PROVENANCE, output_path, read_inputs
from tileprobe.triton.sweep import engine_kernel_source, toolchain_columns
from tileprobe.workloads import PRESETS

torch = LazyModule("torch")

GRID = (("BLOCK_SIZE_M", (16, 32, 64, 128, 256)), ("BLOCK_SIZE_N", (32, 64, 128, 256)),
        ("BLOCK_SIZE_K", (64, 128, 256)), ("GROUP_SIZE_M", (1, 16, 32, 64)), ("num_warps", (4, 8)),
        ("num_stages", (2, 3, 4, 5)))
SPACE_SOURCE = {
    "vllm": "vLLM benchmarks/kernels/benchmark_moe.py get_configs_compute_bound (CUDA); fp8 block: BLOCK_SIZE_K "
            "and BLOCK_SIZE_N multiples of the block",
    "sglang": "SGLang benchmark/kernels/fused_moe_triton common_utils.get_configs_compute_bound (CUDA) + "
              "tuning_fused_moe_triton.py; fp8 block: BLOCK_SIZE_K divides block_k",
}


def search_space(engine: str, scheme: tc.Scheme) -> list[dict]:
    """The engine tuner's own CUDA search space for this scheme (the module docstring's statement)."""
    keys = [k for k, _ in GRID]
    space = [dict(zip(keys, values)) for values in itertools.product(*(v for _, v in GRID))]
    if scheme.block_shape and all(scheme.block_shape):
        bn, bk = scheme.block_shape
        if engine == "vllm":
            space = [c for c in space if c["BLOCK_SIZE_K"] % bk == 0 and c["BLOCK_SIZE_N"] % bn == 0]
        else:
            space = [c for c in space if bk % c["BLOCK_SIZE_K"] == 0]
    return space


@dataclass
class TuneOptions:
    batches: list[int] | None = None  # a subset of the input files' M keys (default: every key)
    confirm_top: int = 8
    screen_reps: int = 3
    jobs: int = 1
    cache_dir: str | None = None
    any_triton: bool = False
    rules_off: bool = False  # --rules-off: an engine release (or copy) the manifest does not match (tuning compiles)
    seed: int | None = None
    # for tests on Triton's CPU interpreter only: no GPU; launches on "cpu" with these kwargs replaced (e.g. fp32
    # compute, no PDL) and activations of `dtype`; the compile (pruning) is the real one for the target's arch
    device: str = "cuda"
    dtype: object = None
    launch_overrides: dict = field(default_factory=dict)
    space: list[dict] | None = None  # replaces the engine's space (tests: a small one)
    prune_only: bool = False  # compile and prune only (fills the caches; no GPU needed, nothing launched)
    tolerance: tuple[float, float] | None = None  # floors (atol, rtol) of the bound; default the family's; the CPU
    # interpreter computes in fp32, so its tests check to 1e-4 as tests/backends/triton/test_triton_runtime.py does


@dataclass
class Tuned:
    path: Path
    keys: list[int]


def require_device(target: Target) -> Target:
    """The GPU to tune on: torch with CUDA, a visible GPU, of the target's compute capability. UsageError else."""
    try:
        has_cuda = bool(torch.cuda.is_available())
    except ImportError:
        raise UsageError("--tune needs torch (with CUDA): it is not installed") from None
    if not torch.version.cuda:
        raise UsageError(f"--tune needs torch with CUDA; this torch ({torch.__version__}) has none")
    if not has_cuda:
        raise UsageError("--tune launches on a GPU of the target's arch: no CUDA GPU is visible")
    _, devices = resolve_target(target.name)
    if not devices:
        cc = ".".join(map(str, torch.cuda.get_device_capability()))
        raise UsageError(f"--tune on this GPU ({torch.cuda.get_device_name()}, sm_{cc.replace('.', '')}) cannot "
                         f"tune for {target.name} (sm_{target.cc_int}): the GPU must be of the target's arch")
    return devices[0]


class _Counted:
    """A launch that records its config each time it runs (the tune's launch count)."""

    def __init__(self, fn, log: list, label: str):
        self.fn, self.log, self.label = fn, log, label

    def __call__(self):
        self.log.append(self.label)
        return self.fn()


ROWS_DIR = "tileprobe-rows"  # beside the config files: neither engine reads it


def write_rows(folder: Path, device: Target, triton, ctx: dict, arch: str, builds: list, pairs: list,
               space: list[dict], rel: str) -> int:
    """Result rows (the usual schema, rows.make_row) for every launch the confirm step checked and timed."""
    fam = family(tm.NAME)
    per = len(ctx["gemms"])
    index = {(m, i): n for n, (m, i) in enumerate(pairs)}
    n = 0
    with ResultsWriter(folder, resume=True) as writer:
        for entry, m, g, seed, got in ctx["runtime"]:
            nn, kk = tm.gemm_shape(g, ctx["hidden"], ctx["N"])
            cfg = tm.make_config(ctx["engine"], ctx["quant"], g, ctx["experts"], nn, kk, ctx["top_k"], entry, arch,
                                 f"tune:{Path(rel).name}#{m}")
            b = builds[index[(m, space.index(entry))] * per + ctx["gemms"].index(g)]
            info = StaticInfo(stages=b.num_stages, smem_bytes=b.shared, regs_per_thread=b.regs,
                              threads_per_cta=b.num_warps * 32, compiled=True)
            got = dict(got)
            got.pop("verified")
            judged = correctness(got, m * ctx["top_k"] * nn)  # the sweep's explanation (results/classify.py)
            verdict, reason = judged.verdict, judged.reason
            ident = f"{device.device_name}|{g}|{m}|{seed}|tune"
            point = {"workload": ctx["workload"], "gemm": g, "batch": m, "routing": "uniform", "experts_active": None,
                     "problem": f"M={m} E={ctx['experts']} N={nn} K={kk} top_k={ctx['top_k']} (tune of {rel})",
                     "problems_hash": hashlib.sha256(ident.encode()).hexdigest()[:12], "seed": seed}
            runtime = {**got, "gpu_index": device.gpu_index, "launch_status": "ok", "launch_reason": reason}
            row = make_row(cfg, device, toolchain_columns(triton), Outcome(cfg, verdict, reason, info), runtime, point)
            if not writer.has(row_key(row)):
                writer.write(row)
                n += 1
    return n


def _workload(E: int, N: int, hidden: int) -> str | None:
    """The preset whose experts, intermediate size (N = inter / tp) and hidden size match the file's problem."""
    for name, m in PRESETS.items():
        if m.experts == E and m.inter % N == 0 and m.hidden == hidden:
            return name
    return None


def _entries(folder: str) -> int:
    return len(os.listdir(folder)) if os.path.isdir(folder) else 0


def _label(c: dict) -> str:
    return ",".join(f"{k}={c[k]}" for k, _ in GRID)


def _screen(launches: list, device: str, reps: int) -> float:
    """The screen rule (module docstring): microseconds per pass over `launches`."""
    if device == "cpu":  # Triton's interpreter (tests): the wall time of one pass
        t0 = time.perf_counter()
        for f in launches:
            f()
        return (time.perf_counter() - t0) * 1e6
    for f in launches:
        f()
    torch.cuda.synchronize()
    stream, graph = torch.cuda.Stream(), torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            for f in launches:
                f()
    torch.cuda.synchronize()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(max(1, reps)):
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def _for_launch(job: KernelJob, overrides: dict) -> KernelJob:
    return replace(job, kwargs=tuple((k, overrides.get(k, v)) for k, v in job.kwargs))


def tune_key(ctx: dict, m: int, left: list[int], space: list[dict], log: list) -> dict:
    """Screen then confirm at one M; returns the provenance record (winner None when nothing verified)."""
    engine, quant, gemms, opts = ctx["engine"], ctx["quant"], ctx["gemms"], ctx["opts"]
    if not left:  # every config pruned at this M: nothing to launch (and no inputs to make)
        return {"winner": None, "us_graph_median": None, "bytes": None, "screened": 0, "screen_failed": [],
                "confirmed": [], "rejected_wrong": [], "confirm_failed": [], "screen_s": 0.0, "confirm_s": 0.0}
    fam = family(tm.NAME)
    probs = {g: rt.Problem(engine, quant, g, ctx["experts"], *tm.gemm_shape(g, ctx["hidden"], ctx["N"]), m,
                           ctx["top_k"]) for g in gemms}
    seed = ctx["seed"] + m
    tensors = {g: rt.make_tensors(probs[g], seed, opts.device, opts.dtype) for g in gemms}
    aligned: dict = {}
    prepared: dict = {}  # per GEMM: the confirm's inputs and their reference, made once for every config
    reps = {g: 1 if opts.device == "cpu" else rt.rotations(
        probs[g], len(set(tensors[g].topk_ids.reshape(-1).tolist())), ctx["l2"]) for g in gemms}

    def launches_of(i: int) -> list:
        out = []
        for g in gemms:
            p, t = probs[g], tensors[g]
            job = _for_launch(ctx["job"](space[i], m, g), opts.launch_overrides)
            kw = dict(job.kwargs)
            bm, naive = kw["BLOCK_SIZE_M"], bool(kw.get("naive_block_assignment", False))
            r = reps[g]
            for j in range(r):
                key = (g, bm, naive, j)
                if key not in aligned:
                    ids = (t.topk_ids + j * max(1, p.experts // r)) % p.experts if j else t.topk_ids
                    aligned[key] = rt.align(engine, ids, bm, p.experts, naive)
                out.append(_Counted(rt.launcher(ctx["kernel"], job, p, t, *aligned[key]), log, _label(space[i])))
        return out

    t0 = time.perf_counter()
    screened, failed = [], []
    for i in left:
        try:
            screened.append((_screen(launches_of(i), opts.device, opts.screen_reps), i))
        except Exception as exc:  # the launch's own error: the config is dropped, with its one line
            failed.append({"config": space[i], "error": one_line(exc)})
    screen_s = time.perf_counter() - t0
    screened.sort()
    t0 = time.perf_counter()
    confirmed = []
    for us_screen, i in screened[:max(1, opts.confirm_top)]:
        rec = {"config": space[i], "us_screen": round(us_screen, 3), "gemms": {}}
        try:
            for g in gemms:
                job = _for_launch(ctx["job"](space[i], m, g), opts.launch_overrides)
                naive = bool(dict(job.kwargs).get("naive_block_assignment", False))
                log.append(_label(space[i]))
                atol, rtol = opts.tolerance or (fam.atol, fam.rtol)
                bound = tolerance.derive(atol, rtol, probs[g].k,
                                         tm.accumulation(quant, ctx["cc"], space[i]["BLOCK_SIZE_K"]))
                if g not in prepared:
                    prepared[g] = rt.prepare(probs[g], seed + 1, opts.device, opts.dtype)
                got = rt.run_point(ctx["kernel"], job, probs[g], seed + 1, opts.device, bound,
                                   ctx["l2"], naive, opts.dtype, timed=opts.device != "cpu", prepared=prepared[g])
                rec["gemms"][g] = {k: got[k] for k in ("verified", "bad_elements", "checked_elements", "rel_err")
                                   if k in got} | {k: round(got[k], 3) for k in ("us_graph_median", "us_median")
                                                  if k in got}
                ctx["runtime"].append((space[i], m, g, seed + 1, got))
        except Exception as exc:
            rec["error"] = one_line(exc)
        rec["verified"] = "error" not in rec and all(v["verified"] for v in rec["gemms"].values())
        times = [v.get("us_graph_median") for v in rec["gemms"].values()]
        rec["us_graph_median"] = round(sum(times), 3) if rec["verified"] and None not in times else None
        confirmed.append(rec)
    confirm_s = time.perf_counter() - t0
    ok = [r for r in confirmed if r["verified"]]
    # the fastest verified by its graph time (on the CPU interpreter, tests only: by the screen time)
    best = min(ok, key=lambda r: (r["us_graph_median"] if r["us_graph_median"] is not None else r["us_screen"]),
               default=None)
    return {"winner": best["config"] if best else None,
            "us_graph_median": best["us_graph_median"] if best else None,
            "bytes": ctx["bytes"][(m, space.index(best["config"]))] if best else None,
            "screened": len(screened), "screen_failed": failed, "confirmed": confirmed,
            "rejected_wrong": [r["config"] for r in confirmed if not r["verified"] and "error" not in r],
            "confirm_failed": [{"config": r["config"], "error": r["error"]} for r in confirmed if "error" in r],
            "screen_s": round(screen_s, 2), "confirm_s": round(confirm_s, 2)}


def run(inputs: Path, engine: str | None, wheel: str | None, target_name: str, out: Path,
        device_names: list[str] | None, hidden: int | None, opts: TuneOptions) -> tuple[list[Tuned], dict]:
    """The tune (module docstring); returns the files written and the provenance written beside them."""
    wall0 = time.perf_counter()
    if opts.jobs < 1 or opts.confirm_top < 1 or opts.screen_reps < 1:
        raise UsageError("--jobs, --confirm-top and --screen-reps must be at least 1")
    inp = read_inputs(inputs, engine, target_name, device_names)
    engine, target, arch = inp.engine, inp.target, inp.arch
    device = require_device(target) if opts.device != "cpu" and not opts.prune_only else None
    limit = device.smem_optin if device else target.smem_optin
    triton = require_triton(opts.any_triton)
    preflight.check_triton(triton, inp.cc, opts.cache_dir)  # a Triton that compiles nothing: one line
    src, source = engine_kernel_source(engine, wheel, opts.rules_off)
    consts = constexpr_positions(source)
    cache = cache_root(opts.cache_dir)
    triton_cache = str(cache / "triton-jit")
    worker_env = {"TRITON_CACHE_DIR": triton_cache, "TRITON_INTERPRET": None}
    if device is not None:
        os.environ["TRITON_CACHE_DIR"] = triton_cache  # the launches read the cubins the workers wrote
    kernel = load(source, cache)
    seed = opts.seed if opts.seed is not None else random.randrange(2**31)
    gpu = device.device_name if device else "no GPU (Triton's CPU interpreter: a test run, not timed)"
    prov: dict = {"tool": "tileprobe export triton-configs --tune", "engine": src.label(), "target": target.name,
                  "smem_limit_bytes": limit, "arch": arch, "seed": seed,
                  "evidence": "compiled, not launched (--prune-only)" if opts.prune_only else
                  f"verified (timed on {gpu})" if device else "verified on Triton's CPU interpreter (test only; "
                                                              "not timed)",
                  "space_source": SPACE_SOURCE[engine] if opts.space is None else "given (test)",
                  "screen_rule": f"one CUDA graph of the launches over rotated routings, 1 warm + "
                                 f"{opts.screen_reps} timed replays, median; the {opts.confirm_top} fastest "
                                 f"confirmed by run_point (element-wise check, graph timing)",
                  "files": {}, "totals": {}}
    written: list[Tuned] = []
    with Staged(out) as st:  # nothing reaches OUT before the commit
        _tune_files(inp, opts, hidden, st, written, prov, device, limit, triton, src, source, consts, triton_cache,
                    worker_env, kernel, seed, wall0)
        st.commit(first=[PROVENANCE])
    prov["launch_log"] = prov.pop("_launch_log")  # returned to the caller (tests count launches); not written
    return written, prov


def _tune_files(inp, opts: TuneOptions, hidden: int | None, st: Staged, written: list, prov: dict, device,
                limit: int, triton, src, source, consts, triton_cache: str, worker_env: dict, kernel, seed: int,
                wall0: float) -> None:
    """Every input file tuned (the module docstring's steps): the config files, the rows and the provenance written
    into the staged OUT (`st`)."""
    engine, target, arch, cc, devs, files = inp.engine, inp.target, inp.arch, inp.cc, inp.devs, inp.files
    out = st.out
    rows_dir = None
    totals = {"space": 0, "pruned_over_limit": 0, "pruned_no_compile": 0, "left": 0, "compile_s": 0.0,
              "screen_s": 0.0, "confirm_s": 0.0, "launches": 0,
              "jit_entries_added_by_launches": 0, "rows": 0}
    launch_log: list[str] = []
    downs = {(f.triton_dir, f.name) for f in files if f.name.down}
    for f in files:
        scheme = tc.scheme_of(f.name)
        if scheme is None or scheme.name not in tm.QUANTS:
            raise UsageError(f"{f.rel}: a scheme tileprobe does not launch (dtype={f.name.dtype}, "
                             f"block_shape={f.name.block_shape}); --tune handles {', '.join(tm.QUANTS)}")
        prob = problem_for(f.name.E, f.name.N, hidden)
        gemms = ("down",) if f.name.down else ("gate_up",) if (f.triton_dir, replace(f.name, down=True)) in downs \
            else tm.GEMMS
        keys = sorted(f.entries)
        if opts.batches:
            missing = [b for b in opts.batches if b not in f.entries]
            if missing:
                raise UsageError(f"{f.rel}: --batches {missing} are not keys of the file (keys: "
                                 f"{', '.join(map(str, keys))})")
            keys = sorted(set(opts.batches))
        space = opts.space if opts.space is not None else search_space(engine, scheme)
        for c in space:
            if tm.check_entry(c)[0] is None:
                raise UsageError(f"search space entry {c}: not a fused_moe_kernel config")

        def job(c: dict, m: int, g: str, scheme=scheme, prob=prob, f=f) -> KernelJob:
            return tm.launch_job(engine, source, scheme.name, g, prob.experts_global,
                                 *tm.gemm_shape(g, prob.hidden, f.name.N), m, prob.top_k, c, cc, prob.ep)

        t0 = time.perf_counter()
        pairs = [(m, i) for m in keys for i in range(len(space))]
        # the input's own entries too: one is kept where nothing is verified at its M, and only if it fits
        own = [(m, e) for m in keys for e in [tm.check_entry(f.entries[m])[0]] if e is not None and not opts.prune_only]
        labels = ([f"M={m} {progress.entry(space[i])} {g}" for m, i in pairs for g in gemms]
                  + [f"M={m} input {progress.entry(e)} {g}" for m, e in own for g in gemms])
        with progress.track(len(labels), f"prune {f.rel}") as bar:
            all_builds = compile_many([canonical(job(space[i], m, g), consts) for m, i in pairs for g in gemms] +
                                      [canonical(job(e, m, g), consts) for m, e in own for g in gemms], opts.jobs,
                                      opts.cache_dir, triton_cache=triton_cache, worker_env=worker_env,
                                      on_result=bar.each(labels, progress.against(limit)))
        compile_s = time.perf_counter() - t0
        builds, own_builds = all_builds[:len(pairs) * len(gemms)], all_builds[len(pairs) * len(gemms):]
        input_need = {m: None for m in keys}  # M -> the input entry's bytes (the most of its GEMMs); None: no build
        for n, (m, _) in enumerate(own):
            bs = own_builds[n * len(gemms):(n + 1) * len(gemms)]
            if all(isinstance(b, TritonBuild) for b in bs):
                input_need[m] = max(b.shared for b in bs)
        entries_compiled = _entries(triton_cache)
        per = len(gemms)
        need: dict = {}
        errors: dict = {}  # (M, config index) -> the compiler's own one line, for the provenance
        per_m: dict[int, dict] = {m: {"over_limit": [], "no_compile": [], "left": []} for m in keys}
        for n, (m, i) in enumerate(pairs):
            bs = builds[n * per:(n + 1) * per]
            if not all(isinstance(b, TritonBuild) for b in bs):
                per_m[m]["no_compile"].append(i)
                errors[(m, i)] = next(b.line for b in bs if not isinstance(b, TritonBuild))
            elif max(b.shared for b in bs) > limit:
                per_m[m]["over_limit"].append(i)
            else:
                per_m[m]["left"].append(i)
                need[(m, i)] = max(b.shared for b in bs)
        totals["compile_s"] += compile_s
        # per file: a config counts as pruned when it is pruned at some M; left when launched at every M
        totals["space"] += len(space)
        for why in ("over_limit", "no_compile"):
            totals[f"pruned_{why}"] += len({i for m in keys for i in per_m[m][why]})
        totals["left"] += len(set.intersection(*(set(per_m[m]["left"]) for m in keys))) if keys else 0
        if opts.prune_only:  # the caches are filled; nothing is launched or written but the provenance
            prov["files"][f.rel] = {"from": f.path, "problem": prob.how, "gemms": list(gemms),
                                    "compile_s": round(compile_s, 2), "entries": {str(m): {
                                        **{k: len(v) for k, v in per_m[m].items()},
                                        "no_compile_errors": [{"config": space[i], "error": errors[(m, i)]}
                                                              for i in per_m[m]["no_compile"]]} for m in keys}}
            continue
        ctx = {"engine": engine, "quant": scheme.name, "gemms": gemms, "opts": opts, "experts": prob.experts_global,
               "cc": cc,
               "hidden": prob.hidden, "N": f.name.N, "top_k": prob.top_k, "seed": seed, "kernel": kernel,
               "l2": device.l2_bytes if device else 0, "job": job, "bytes": need, "runtime": [],
               "workload": _workload(f.name.E, f.name.N, prob.hidden)}
        out_entries: dict[str, dict] = {}
        prov_keys: dict[str, dict] = {}
        for m in progress.iterate(keys, f"tune {f.rel}", lambda m: f"M={m} screened and confirmed"):
            before = len(launch_log)
            rec = tune_key(ctx, m, per_m[m]["left"], space, launch_log)
            rec.update(space=len(space), pruned_over_limit=len(per_m[m]["over_limit"]),
                       pruned_no_compile=len(per_m[m]["no_compile"]), left=len(per_m[m]["left"]),
                       launches=len(launch_log) - before,
                       pruned_configs=[space[i] for i in per_m[m]["over_limit"] + per_m[m]["no_compile"]],
                       no_compile=[{"config": space[i], "error": errors[(m, i)]} for i in per_m[m]["no_compile"]])
            if rec["winner"] is not None:
                out_entries[str(m)] = rec["winner"]
            else:  # nothing verified: the input's entry stays if it fits, and the provenance says it is not the tune's
                need_in = input_need[m]
                if need_in is not None and need_in <= limit:
                    out_entries[str(m)] = f.entries[m]
                    rec["kept_input_unverified"] = f.entries[m]
                else:  # never write an entry that does not fit: the engine then takes the nearest key written
                    rec["dropped_input"] = {"entry": f.entries[m], "bytes": need_in,
                                            "why": "does not compile" if need_in is None else
                                            f"{need_in} B > {limit} B"}
            prov_keys[str(m)] = rec
            totals["launches"] += rec["launches"]
            totals["screen_s"] += rec["screen_s"]
            totals["confirm_s"] += rec["confirm_s"]
        if device is not None:
            rows_dir = rows_dir or st.seed(ROWS_DIR)  # the rows already there, added to
            totals["rows"] += write_rows(rows_dir, device, triton, ctx, arch, builds, pairs, space, f.rel)
        # Triton cache entries the launches added (0 when every launch found the workers' cubin; CPU: no cache)
        totals["jit_entries_added_by_launches"] += _entries(triton_cache) - entries_compiled
        if not out_entries:  # every M dropped: no file (an empty one would be read as having no entries)
            prov["files"][f.rel] = {"from": f.path, "problem": prob.how, "gemms": list(gemms), "entries": prov_keys,
                                    "not_written": "no M has a verified winner or an input entry that fits"}
            continue
        for dev in devs:
            path = output_path(out, inp, f, scheme, dev)
            st.write_text(path.relative_to(out), json.dumps(out_entries, indent=4) + "\n")
            prov["files"][str(path.relative_to(out))] = {"from": f.path, "device_name": dev, "problem": prob.how,
                                                        "gemms": list(gemms), "compile_s": round(compile_s, 2),
                                                        "entries": prov_keys}
            written.append(Tuned(path, keys))
    totals = {k: round(v, 2) if isinstance(v, float) else v for k, v in totals.items()}
    totals["wall_s"] = round(time.perf_counter() - wall0, 2)
    prov["totals"] = totals
    st.write_text(PROVENANCE, json.dumps(prov, indent=1) + "\n")
    prov["_launch_log"] = launch_log


def summary(tuned: list[Tuned], prov: dict) -> list[str]:
    """The lines `export triton-configs --tune` prints: totals, then per file and M the winner."""
    t = prov["totals"]
    out = [f"space {t['space']} configs: pruned {t['pruned_over_limit']} over {prov['smem_limit_bytes']} B, "
           f"{t['pruned_no_compile']} did not compile; {t['left']} left and launched "
           f"(wall {t['wall_s']} s: compile {t['compile_s']} s, screen {t['screen_s']} s, confirm {t['confirm_s']} s)"]
    if prov["evidence"].startswith("compiled"):
        return out + [f"{rel}: per M {info['entries']}" for rel, info in prov["files"].items()]
    for rel, info in prov["files"].items():
        out.append(f"{rel}:" + (f" not written ({info['not_written']})" if info.get("not_written") else ""))
        for m, rec in info["entries"].items():
            w = rec["winner"]
            what = (f"{_label(w)}  {rec['us_graph_median']} us, {rec['bytes']} B" if w else
                    "no verified config: the input's entry is kept (not verified)" if "dropped_input" not in rec else
                    f"no verified config, and the input's entry is not written: {rec['dropped_input']['why']}")
            wrong = f"; {len(rec['rejected_wrong'])} confirmed config(s) wrong, not chosen" if rec["rejected_wrong"] \
                else ""
            out.append(f"  M={m}: {what} (screened {rec['screened']}, confirmed {len(rec['confirmed'])}{wrong})")
    if not tuned:
        return out + ["nothing written: no entry of any file is verified or fits"]
    env = "VLLM_TUNED_CONFIG_FOLDER" if prov["engine"].startswith("vllm") else "SGLANG_MOE_CONFIG_DIR"
    folder = tuned[0].path.parent if prov["engine"].startswith("vllm") else tuned[0].path.parents[2]
    out.append(f"use: export {env}={Path(folder).resolve()} (provenance: {folder / PROVENANCE}; {prov['evidence']})")
    return out
