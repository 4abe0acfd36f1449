"""`tileprobe check-configs`: every entry of an engine's Triton fused-MoE config files, compiled for a target, with
its exact shared bytes; which would raise OutOfResources at the engine's first launch on that GPU.

A file named after a device is checked against that device's limit unless --target says otherwise. The file name
gives E and N (the per-shard intermediate size); the hidden size K is not in it: it comes from the workload preset
whose experts and intermediate size match (E = experts / ep, N = inter / tp), else --hidden, else 4096 (recorded in
the row as assumed). Each entry is compiled as the engine launches it for M = its key: both GEMMs for vLLM (one
config serves both) and for an SGLang up file with no _down file beside it, the down GEMM only for a _down file.

Predictor first (tileprobe.triton.predicted): an entry launch the predictor answers exactly is answered by it
(evidence `predicted`); only the others are compiled, unless --compile-all; --verify N compiles a seeded sample of N
predicted launches too and fails naming each whose bytes differ. Compiled rows carry the prediction beside the bytes.

Compiles are shared across files: ints the kernel does not take as constexprs enter Triton's specialisation only as
"equal to 1", "divisible by 16" or neither, so they are replaced by 1, 16 or 17 before the cache key is taken.
"""

from __future__ import annotations

import ast
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from tileprobe import preflight, progress
from tileprobe.backends.triton.compile import KernelJob, compile_many
from tileprobe.backends.triton.source import KernelSource
from tileprobe.backends.triton.toolchain import require_triton
from tileprobe.engines import triton_configs as tc
from tileprobe.engines import moe_choice, triton_lookup
from tileprobe.errors import UsageError
from tileprobe.families import arch_for, family
from tileprobe.families import triton_moe as tm
from tileprobe.results.rows import make_row
from tileprobe.results.writer import recording
from tileprobe.targets import Target, profile
from tileprobe.triton import captured
from tileprobe.triton import predicted as pred_mod
from tileprobe.triton.sweep import (engine_release, kernel_source, outcome, predicted_outcome, rules_off_policy,
                                    toolchain_columns)
from tileprobe.workloads import PRESETS

ASSUMED_HIDDEN = 4096
ASSUMED_TOP_K = 8


@dataclass(frozen=True)
class Problem:
    hidden: int
    top_k: int
    experts_global: int
    ep: int
    how: str  # "qwen3-30b-a3b tp1" or "assumed"


def problem_for(E: int, N: int, hidden: int | None) -> Problem:
    """The preset whose experts (E, or E * ep) and intermediate size (N * tp) match, one of the given hidden size
    first; where only another hidden size's preset matches, its top_k and ep are used and the label says the hidden
    size was given (a file name carries E and N, never the hidden size)."""
    matches = [(m, ep) for m in PRESETS.values() for ep in (1, 2, 4, 8, 16, 32)
               if m.experts % ep == 0 and m.experts // ep == E and m.inter % N == 0 and m.inter // N in (1, 2, 4, 8, 16)]
    for m, ep in sorted(matches, key=lambda me: hidden is not None and me[0].hidden != hidden):
        how = f"{m.name} tp{m.inter // N}" + (f" ep{ep}" if ep > 1 else "")
        if hidden is not None and m.hidden != hidden:
            how = f"E={E} N={N} as {how} (top_k {m.top_k}), hidden {hidden} given"
        return Problem(hidden or m.hidden, m.top_k, m.experts, ep, how)
    return Problem(hidden or ASSUMED_HIDDEN, ASSUMED_TOP_K, E, 1,
                   f"hidden {hidden} given" if hidden else f"no preset has E={E}, N={N}: hidden {ASSUMED_HIDDEN} "
                                                          "assumed")


def guess_engine(files_names: list[str]) -> str:
    """SGLang's spellings (block_shape=[128, 128], per_channel_quant=True, _down) mark a SGLang file; else vLLM."""
    if any(", " in n or "per_channel_quant=" in n or n.endswith("_down.json") for n in files_names):
        return "sglang"
    return "vllm"


def device_targets(engine: str) -> dict[str, Target]:
    """The engine's file-name spelling of every known device name, to its target profile."""
    mod = triton_lookup.engine_module(engine)
    return {mod.device_file_name(n): profile(t) for n, t in triton_lookup.known_device_names().items()}


def arch_of(target: Target) -> str | None:
    """The triton-moe arch for a target: the arch-specific one (sm_120a, sm_90a) where the family lists it, else the
    plain one (sm_89, sm_80: Ada and Ampere have no arch-specific features)."""
    fam = family(tm.NAME)
    plain = f"sm_{target.cc_int}"
    return arch_for(fam, target.cc) or (plain if plain in fam.archs else None)


def constexpr_positions(source: KernelSource) -> set[int]:
    """Positions of the kernel's tl.constexpr parameters (the launcher passes some positionally: group_n, group_k)."""
    tree = ast.parse(source.text)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == source.function)
    return {i for i, a in enumerate(fn.args.args) if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)}


def canonical(job: KernelJob, constexprs: set[int]) -> KernelJob:
    """The same launch with each non-constexpr int replaced by its specialisation class (1, 16-divisible, other)."""
    def cls(i, a):
        if i in constexprs or isinstance(a, bool) or not isinstance(a, int) or not -2**31 <= a < 2**31:
            return a
        return 1 if a == 1 else 16 if a % 16 == 0 else 17
    return replace(job, args=tuple(cls(i, a) for i, a in enumerate(job.args)))


@dataclass(frozen=True)
class Check:
    file: tc.ConfigFile
    key: int
    gemm: str
    target: Target
    config: object | None  # families.base.Config, None when the entry is not a launchable config
    job: KernelJob | None
    problem: Problem
    why_not: str = ""  # the entry is not compiled: why
    said: str = ""  # the launch as the engine made it (tileprobe.triton.captured: its line and path), if captured


def plan(files: list[tc.ConfigFile], engine: str, source: KernelSource, target: Target | None, hidden: int | None,
         src: tc.EngineSource | None = None, banner: str = "", cache_dir=None) -> tuple[list[Check], list[str]]:
    """Every (file, entry, GEMM) to compile, and notes for files skipped (scheme not sized, device unknown). With the
    engine's files `src` (and the --rules-off `banner`), a vLLM launch is the engine's own where tileprobe's
    re-typed one was not checked on the release (tileprobe.triton.captured); else it is re-typed (launch_job)."""
    by_device = device_targets(engine)
    consts = constexpr_positions(source)
    capture = src is not None and not captured.retyped(src, banner)
    checks, notes, asks = [], [], []
    downs = {(f.triton_dir, replace(f.name, down=False)) for f in files if f.name.down}
    for f in files:
        scheme = tc.scheme_of(f.name)
        if scheme is None or scheme.name not in tm.QUANTS:
            notes.append(f"{f.rel}: not sized (dtype={f.name.dtype}, block_shape={f.name.block_shape}, "
                         f"per_channel_quant={f.name.per_channel_quant}, backend={f.name.backend}: a launch "
                         f"tileprobe does not reproduce)")
            continue
        if engine == "vllm" and f.name.down:
            notes.append(f"{f.rel}: a vLLM _down file, read only by TritonExperts' sorted-activation TMA down "
                         "launch (DeepGEMM E8M0 scales, capability 9.0), which tileprobe does not drive: not checked")
            continue
        t = target or by_device.get(f.name.device_name)
        if t is None:
            notes.append(f"{f.rel}: device {f.name.device_name} unknown to tileprobe: pass --target")
            continue
        arch = arch_of(t)
        if arch is None:
            notes.append(f"{f.rel}: triton-moe does not compile for {t.name} (sm_{t.cc_int})")
            continue
        cc = tm.arch_cc(arch)
        prob = problem_for(f.name.E, f.name.N, hidden)
        if engine == "vllm":
            gemms = tm.GEMMS
        elif f.name.down:
            gemms = ("down",)
        else:
            gemms = ("gate_up",) if (f.triton_dir, f.name) in downs else tm.GEMMS
        for key, raw in f.entries.items():
            e, why = tm.check_entry(raw, tma=capture)  # the engine's launcher reads USE_TMA itself
            for gemm in gemms:
                if e is None:
                    checks.append(Check(f, key, gemm, t, None, None, prob, why))
                    continue
                n, k = tm.gemm_shape(gemm, prob.hidden, f.name.N)
                cfg = tm.make_config(engine, scheme.name, gemm, prob.experts_global, n, k, prob.top_k, e, arch,
                                     f"{f.rel}#{key}", prob.ep)
                if capture:
                    asks.append((len(checks), t, cc, captured.request(scheme.name, gemm, prob.experts_global, n, k,
                                                                      key, prob.top_k, e, raw, prob.ep)))
                    checks.append(Check(f, key, gemm, t, cfg, None, prob))
                    continue
                job = tm.launch_job(engine, source, scheme.name, gemm, prob.experts_global, n, k, key, prob.top_k,
                                    e, cc, prob.ep)
                checks.append(Check(f, key, gemm, t, cfg, canonical(job, consts), prob))
    for (t, cc), group in _by_target(asks):
        for i, got in zip([i for i, _ in group], captured.launches(src, source, t, cc, [r for _, r in group],
                                                                   cache_dir)):
            checks[i] = replace(checks[i], job=got.job, said=got.said)
    return checks, notes


def _by_target(asks: list) -> list[tuple[tuple, list]]:
    """The captures to make, one engine session per (target, capability)."""
    out: dict = {}
    for i, t, cc, r in asks:
        out.setdefault((t.name, cc), ((t, cc), []))[1].append((i, r))
    return list(out.values())


@dataclass
class AuditResult:
    """What check-configs found. Its exit rule (AuditResult.exit_code): 0 only when every entry of every file was
    compiled and fits; 2 (bad input) when nothing could be checked; 1 otherwise: an entry over the limit, one Triton
    could not compile, or one that could not be checked beside others that were."""
    rows: list[dict]
    over: list[str]  # one line per entry launch that does not fit
    notes: list[str]
    checked: int
    not_compiled: int
    seconds: dict
    compile_errors: list[str] = field(default_factory=list)  # one line per entry launch Triton did not compile
    not_checked: list[str] = field(default_factory=list)  # one line per file or entry launch not checked, and why
    mismatches: list[str] = field(default_factory=list)  # --verify: a sampled launch whose compile differs
    answers: dict = field(default_factory=dict)  # how the launches were answered (predicted.Answers.record)

    def exit_code(self) -> int:
        if self.checked == 0:
            return 2
        return 1 if self.over or self.compile_errors or self.not_checked or self.mismatches else 0

    @property
    def evidence(self) -> str:
        """What the rows claim together, in words (the summary line's)."""
        words = sorted({r["evidence"] for r in self.rows if r.get("evidence") in ("predicted", "compiled")})
        return (" and ".join(words) or "none") + ", not launched"


def run(path: Path | None, engine: str | None, wheel: str | None, target_name: str | None, out: Path | None,
        jobs: int, cache_dir: str | None, hidden: int | None, any_triton: bool, command: str,
        policy: pred_mod.Policy = pred_mod.Policy(), rules_off: bool = False, model: str | None = None
        ) -> AuditResult:
    if path is None and engine is None:
        raise UsageError("check-configs needs PATH (a config file or folder) or --engine vllm|sglang")
    if jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if hidden is not None and hidden < 1:
        raise UsageError("--hidden must be at least 1")
    policy.check()
    t0 = time.perf_counter()
    if path is not None:
        if not Path(path).exists():
            raise UsageError(f"{path}: no such file or folder")
        names = [p.name for p in ([Path(path)] if Path(path).is_file() else Path(path).rglob("*.json"))]
        engine = engine or guess_engine(names)
    mod = triton_lookup.engine_module(engine)
    target = profile(target_name) if target_name else None
    files = tc.read_tree(Path(path), engine) if path is not None else None  # bad input first: before Triton
    triton = require_triton(any_triton)
    # the one release rule (tileprobe.engines.manifest); vLLM's launch is its own launcher's (captured.needs)
    src, banner = engine_release(engine, wheel, rules_off, needs=captured.needs(engine))
    source = kernel_source(src)
    policy = rules_off_policy(policy, banner)
    files = files if files is not None else tc.read_source_tree(src, mod.CONFIGS_DIR)
    checks, notes = plan(files, engine, source, target, hidden, src, banner, cache_dir)
    choice = moe_choice.check_configs_note(src, target, model, cache_dir)  # does the engine read these files?
    t_plan = time.perf_counter() - t0
    todo = [c for c in checks if c.job is not None]
    ans = pred_mod.answer([c.config for c in todo], [c.job for c in todo], source, triton.version, policy)
    build_these = [c for c, yes in zip(todo, ans.compile) if yes]
    if build_these:
        preflight.check_triton(triton, build_these[0].job.cc, cache_dir)  # a Triton that compiles nothing: one line
    t1 = time.perf_counter()
    with progress.track(len(build_these), "check-configs") as bar:
        built = iter(compile_many([c.job for c in build_these], jobs, cache_dir, on_result=bar.each(
            [f"{progress.unit(c.config, c.key)} on {c.target.name}" for c in build_these],
            lambda i, b: outcome(build_these[i].config, b, build_these[i].target, triton,
                                 build_these[i].said or None))))
    builds = [next(built) if yes else None for yes in ans.compile]
    t_compile = time.perf_counter() - t1
    cols = toolchain_columns(triton)
    rows, over, errors = [], [], []
    for i, (c, b) in enumerate(zip(todo, builds)):
        shared = ans.predicted(i)
        o = outcome(c.config, b, c.target, triton, c.said or None) if shared is None else \
            predicted_outcome(c.config, c.target, shared, triton.version, c.said or None)
        point = {"workload": c.file.rel, "gemm": c.gemm, "batch": c.key, "routing": "config-file",
                 "device_name": c.file.name.device_name,
                 "problem": f"M={c.key} E={c.file.name.E} N={c.config.get('gemm_n')} K={c.config.get('gemm_k')} ({c.problem.how})",
                 "problems_hash": f"{c.file.rel}#{c.key}#{c.gemm}",
                 "config_origin": "shipped" if path is None else "user"}
        row = make_row(c.config, c.target, cols, o, point=point,
                       extra={"engine": src.label(), "engine_hash": source.sha256[:16]}
                       | pred_mod.prediction_columns(ans.predictions[i], b))
        rows.append(row)
        line = f"{c.file.rel} [M={c.key}] {c.gemm} on {c.target.name}: {row['verdict']}: {o.reason}"
        if row["verdict"] == "compile-error":
            errors.append(line)
        elif row["verdict"] != "fits":
            over.append(line)
    not_checked = notes  # plan's notes: files not sized, on unknown devices, for archs not compiled
    not_checked += [f"{c.file.rel} [M={c.key}] {c.gemm}: not compiled ({c.why_not})" for c in checks if c.job is None]
    distinct = {c.job: b for c, b in zip(todo, builds) if b is not None}
    seconds = {"plan_s": round(t_plan, 2), "compile_s": round(t_compile, 2),
               **{f"launches_{k}": v for k, v in ans.counts([c.job for c in todo]).items()},
               "compiled": sum(1 for b in distinct.values() if not getattr(b, "cached", True)),
               "cached": sum(1 for b in distinct.values() if getattr(b, "cached", False)),
               "distinct": len(distinct),
               "compiler_s": round(sum(getattr(b, "seconds", 0.0) for b in distinct.values()
                                       if not getattr(b, "cached", True)), 2)}
    mismatches = ans.mismatches(builds, [f"{c.file.rel} [M={c.key}] {c.gemm} on {c.target.name}" for c in todo])
    record = ans.record([c.job for c in todo])
    if out is not None:
        meta = {"answers": record, "family": tm.NAME, "target": (target or (todo[0].target if todo else profile("rtx-pro-6000"))).as_dict(),
                "devices": [], "configs": len(todo), "engine_origin": src.origin, "phases": seconds,
                "toolchain": cols | {"engine": src.label(), "kernel_sha256": source.sha256},
                "checked": str(path) if path is not None else f"{src.label()} shipped tree"}
        if banner:
            meta["rules_off"] = banner
        with recording(out, meta, ans.mode(), command) as rec:
            for row in rows:
                rec.write(row)
    return AuditResult(rows, over, ([banner] if banner else []) + choice, len(todo), len(checks) - len(todo), seconds, errors,
                       not_checked, mismatches, record)
