"""`tileprobe export triton-configs`: a folder of engine config files for a GPU without one to tune on, in the
engine's own names and layout, every entry fitting the target (predicted or compiled, not timed).

Input: engine config files (a file or folder: e.g. the shipped H200 file for the model), or, with none, what the
engine loads on the target today for a model (tileprobe.triton.resolve: Inputs built there). Output, for every device
name of the target: vLLM `OUT/E=..,N=..,device_name=<name>[,dtype=..][,block_shape=..].json` (use with
VLLM_TUNED_CONFIG_FOLDER=OUT); SGLang `OUT/configs/triton_3_8_0/<name>[_down].json` (SGLANG_MOE_CONFIG_DIR=OUT).
Entries keep their batch-size keys. The provenance goes beside them in OUT/tileprobe-provenance.json: the engines read
every key of a config file as a batch size, so nothing else can go inside one. Nothing is written until every file is
made: they are staged beside OUT and put in place together, provenance first (tileprobe.staged); a failure leaves
OUT as it was, and files in OUT that the export does not write are never touched.

The substitution rule, for an entry over the target's limit (compiled bytes, both GEMMs it serves): the first of
these that fits, each compiled: (1) the same tile with fewer stages (num_stages - 1 down to 1); (2) BLOCK_SIZE_K
halved (down to 32; not below the fp8 block's 128 / 4), with stages from the original down; (3) BLOCK_SIZE_N halved
(down to 32), with stages from the original down; BLOCK_SIZE_M, GROUP_SIZE_M and num_warps are kept (the M tile
follows the engine's moe_align_block_size, shared by both GEMMs). Nothing is timed: the substitute is the nearest
fitting config by that order, not the fastest.

Bytes come predictor first (tileprobe.triton.predicted): a launch the predictor answers exactly is not compiled (the
provenance says `predicted` per entry), the others are; --compile-all compiles every one, --verify N a seeded sample
of N predicted launches too, and a mismatch stops the export before anything is written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from tileprobe import preflight, progress
from tileprobe.backends.triton.compile import TritonBuild, compile_many
from tileprobe.triton import captured
from tileprobe.triton import predicted as pred_mod
from tileprobe.backends.triton.toolchain import require_triton
from tileprobe.engines import sglang
from tileprobe.engines import triton_configs as tc
from tileprobe.engines import triton_lookup
from tileprobe.errors import UsageError
from tileprobe.families import triton_moe as tm
from tileprobe.staged import Staged
from tileprobe.targets import profile
from tileprobe.triton.audit import arch_of, canonical, constexpr_positions, guess_engine, problem_for
from tileprobe.triton.sweep import engine_release, kernel_source, rules_off_policy

PROVENANCE = "tileprobe-provenance.json"


def candidates(entry: dict, scheme: tc.Scheme) -> list[dict]:
    """The substitutes for an over-limit entry, nearest first (the module docstring's rule)."""
    out = []
    s0 = entry["num_stages"]
    out += [entry | {"num_stages": s} for s in range(s0 - 1, 0, -1)]
    floor_k = 32
    bk = entry["BLOCK_SIZE_K"] // 2
    while bk >= floor_k:
        out += [entry | {"BLOCK_SIZE_K": bk, "num_stages": s} for s in range(s0, 0, -1)]
        bk //= 2
    bn = entry["BLOCK_SIZE_N"] // 2
    while bn >= 32:
        out += [entry | {"BLOCK_SIZE_N": bn, "num_stages": s} for s in range(s0, 0, -1)]
        bn //= 2
    return out


@dataclass
class Written:
    path: Path
    entries: int
    substituted: int
    notes: list[str]
    evidence: str = "compiled, not timed"
    banner: str = ""  # --rules-off: the engine release the manifest does not match, every launch compiled


@dataclass
class Inputs:
    """What an export (or a tune) starts from, every part checked: the engine and its module, the target, its arch
    and compute capability, the SKU names written for, and the input config files."""
    engine: str
    mod: object
    target: object
    arch: str
    cc: int
    devs: list[str]
    files: list
    devs_of: dict = field(default_factory=dict)  # a file's path -> the SKU names it is written for (default: devs)
    resolved: dict | None = None  # without an input file: what the engine loads today (tileprobe.triton.resolve)


def read_inputs(inputs: Path, engine: str | None, target_name: str, device_names: list[str] | None) -> Inputs:
    """Bad input first (one line, exit 2), before Triton is looked for."""
    if not Path(inputs).exists():
        raise UsageError(f"{inputs}: no such file or folder")
    names_in = [p.name for p in ([Path(inputs)] if Path(inputs).is_file() else Path(inputs).rglob("*.json"))]
    engine = engine or guess_engine(names_in)
    mod = triton_lookup.engine_module(engine)
    target = profile(target_name)
    arch = arch_of(target)
    if arch is None:
        raise UsageError(f"triton-moe compiles for {', '.join(tm.ARCHS)}; not {target.name}")
    devs = triton_lookup.device_names(target, device_names)
    return Inputs(engine, mod, target, arch, tm.arch_cc(arch), devs, tc.read_tree(Path(inputs), engine))


def output_path(out: Path, inp: Inputs, f, scheme: tc.Scheme, dev: str) -> Path:
    """Where the engine looks for this file for SKU `dev`: vLLM's name in OUT, SGLang's configs/triton_X_Y_Z/."""
    if inp.engine == "vllm":
        return out / inp.mod.config_file_name(f.name.E, f.name.N, scheme, dev)
    vdir = f"triton_{sglang.TRITON_VERSION.replace('.', '_')}"
    return out / "configs" / vdir / inp.mod.config_file_name(f.name.E, f.name.N, scheme, dev, f.name.down)


def run(inputs: Path | None, engine: str | None, wheel: str | None, target_name: str, out: Path,
        device_names: list[str] | None, hidden: int | None, jobs: int, cache_dir: str | None,
        any_triton: bool, prepared: Inputs | None = None, problem=None,
        policy: pred_mod.Policy = pred_mod.Policy(), rules_off: bool = False) -> list[Written]:
    """`prepared`: inputs already resolved (tileprobe.triton.resolve) instead of read from `inputs`; `problem`: the
    model's audit.Problem, when known, instead of one guessed from each file's E and N; `policy`: predictor first
    (default), --compile-all, --verify N. PredictionMismatch (nothing written) when a --verify compile differs."""
    if jobs < 1:
        raise UsageError("--jobs must be at least 1")
    policy.check()
    inp = prepared or read_inputs(inputs, engine, target_name, device_names)
    engine, target, arch, cc, devs, files = inp.engine, inp.target, inp.arch, inp.cc, inp.devs, inp.files
    triton = require_triton(any_triton)
    preflight.check_triton(triton, cc, cache_dir)  # a Triton that compiles nothing: one line
    # the one release rule (tileprobe.engines.manifest); vLLM's launch is its own launcher's (captured.needs)
    src, banner = engine_release(engine, wheel, rules_off, needs=captured.needs(engine))
    source = kernel_source(src)
    capture = not captured.retyped(src, banner)  # the engine's own launch (tileprobe.triton.captured), else re-typed
    formed: dict = {}  # captured.Request -> captured.Captured
    policy = rules_off_policy(policy, banner)
    consts = constexpr_positions(source)
    written: list[Written] = []
    predicted_launches: list[tuple[str, object, int]] = []  # (name, job, bytes) of every launch answered predicted
    texts: dict[Path, str] = {}  # path -> text, written together at the end
    provenance: dict = {"tool": "tileprobe export triton-configs", "engine": src.label(), "target": target.name,
                        "smem_limit_bytes": target.smem_optin, "arch": arch, "evidence": "compiled, not timed",
                        "answers": {"policy": policy.name, "verify": policy.verify, "verify_seed": None,
                                    "predicted": 0, "sized": 0, "compiled": 0, "cannot_predict": 0,
                                    "verified": 0},
                        "rule": __doc__.split("The substitution rule, ")[1].split("\n\n")[0].replace("\n", " "),
                        "files": {}}
    if inp.resolved is not None:
        provenance["resolved"] = inp.resolved
    if banner:
        provenance["rules_off"] = banner
    downs = {(f.triton_dir, f.name) for f in files if f.name.down}
    for f in files:
        scheme = tc.scheme_of(f.name)
        if scheme is None or scheme.name not in tm.QUANTS:
            raise UsageError(f"{f.rel}: a scheme tileprobe does not size (dtype={f.name.dtype}, "
                             f"block_shape={f.name.block_shape}); export handles {', '.join(tm.QUANTS)}")
        prob = problem or problem_for(f.name.E, f.name.N, hidden)
        # vLLM: one config serves both GEMMs; SGLang: a _down file the down GEMM, an up file the gate_up GEMM
        # and the down GEMM too when no _down file comes with it (the engine reuses it).
        gemms = ("down",) if f.name.down else ("gate_up",) if (f.triton_dir, replace(f.name, down=True)) in downs \
            else tm.GEMMS

        def configs_for(entry: dict, key: int) -> list:
            return [tm.make_config(engine, scheme.name, g, prob.experts_global, *tm.gemm_shape(g, prob.hidden,
                                                                                              f.name.N),
                                   prob.top_k, entry, arch, f"{f.rel}#{key}", prob.ep) for g in gemms]

        def requests_for(entry: dict, key: int) -> list:
            """The captured launches of `entry` at M = key (the file's entry's engine keys, USE_TMA, kept)."""
            return [captured.request(scheme.name, g, prob.experts_global, *tm.gemm_shape(g, prob.hidden, f.name.N),
                                     key, prob.top_k, entry, raw_keep.get(key), prob.ep) for g in gemms]

        def form(pairs: list[tuple[int, dict]]) -> None:
            """The engine's own launches of these entries, captured in one session (capture only)."""
            todo = list(dict.fromkeys(r for key, e in pairs for r in requests_for(e, key) if r not in formed))
            if capture and todo:
                formed.update(zip(todo, captured.launches(src, source, target, cc, todo, cache_dir)))

        def launches_for(entry: dict, key: int):
            if capture:
                return [(c, formed[r].job) for c, r in zip(configs_for(entry, key), requests_for(entry, key))]
            return [(c, canonical(tm.launch_job(engine, source, scheme.name, g, prob.experts_global,
                                                *tm.gemm_shape(g, prob.hidden, f.name.N), key, prob.top_k, entry,
                                                cc, prob.ep), consts)) for c, g in zip(configs_for(entry, key), gemms)]

        def said(entry: dict, key: int) -> dict:
            """Per GEMM, the launch as the engine made it (its line and path: TMA or pointer); {} when re-typed."""
            return {r.gemm: formed[r].said for r in requests_for(entry, key)} if capture else {}

        def sized(pairs: list[tuple[int, dict]], label: str) -> list[tuple[list, str]]:
            """Per (key, entry): its launches' answers (bytes predicted, or Triton's build) and their evidence."""
            form(pairs)
            launches = [x for key, e in pairs for x in launches_for(e, key)]
            ans = pred_mod.answer([c for c, _ in launches], [j for _, j in launches], source, triton.version,
                                  pred_mod.Policy(policy.compile_all))  # --verify: a sample at the end
            names = [f"{f.rel} [M={key}] {progress.entry(e)} {g}" for key, e in pairs for g in gemms]
            todo = [i for i, yes in enumerate(ans.compile) if yes]
            with progress.track(len(todo), label) as bar:
                built = iter(compile_many([launches[i][1] for i in todo], jobs, cache_dir, on_result=bar.each(
                    [names[i] for i in todo], progress.against(target.smem_optin))))
            builds = [next(built) if yes else None for yes in ans.compile]
            predicted_launches.extend((names[i], launches[i][1], ans.predicted(i)) for i in range(len(launches))
                                      if ans.predicted(i) is not None)
            tally = provenance["answers"]
            for k, v in ans.counts([j for _, j in launches]).items():
                tally[k] += v
            got = [b if b is not None else ans.predicted(i) for i, b in enumerate(builds)]
            return [(got[i * per:(i + 1) * per],
                     "compiled" if any(ans.compile[i * per:(i + 1) * per]) else "predicted")
                    for i in range(len(pairs))]

        entries: dict[int, dict] = {}
        raw_keep: dict[int, dict] = {}
        for key, raw in f.entries.items():
            e, why = tm.check_entry(raw, tma=capture)  # a captured launch: the engine's launcher reads USE_TMA
            if e is None:
                raise UsageError(f"{f.rel} [{key}]: cannot size this entry ({why})")
            entries[key], raw_keep[key] = e, raw
        def fit_prefix(cs: list[dict], key: int) -> list[dict]:
            """The candidates up to the first the predictor says fits (nothing after it needs a compile)."""
            if policy.compile_all:
                return cs
            for i, c in enumerate(cs):
                got = [pred_mod.predict_launch(cfg, source, triton.version) for cfg in configs_for(c, key)]
                if all(isinstance(g, int) for g in got) and max(got) <= target.smem_optin:
                    return cs[:i + 1]
            return cs

        per = len(gemms)
        first = sized(list(entries.items()), f"export {f.rel}")
        out_entries: dict[str, dict] = {}
        prov_entries: dict[str, dict] = {}
        subs = 0
        over_keys = []
        for (key, e), (bs, how) in zip(entries.items(), first):
            bad = [b for b in bs if not isinstance(b, (TritonBuild, int))]
            if bad:
                raise UsageError(f"{f.rel} [{key}]: does not compile: {bad[0]}")
            need = max(_bytes(b) for b in bs)
            if need <= target.smem_optin:
                out_entries[str(key)] = raw_keep[key]
                prov_entries[str(key)] = {"original": e, "original_bytes": need, "original_evidence": how,
                                          "kept": True, **({"launches": said(e, key)} if capture else {})}
            else:
                over_keys.append((key, e, need, how))
        # Substitutes, nearest first: each round compiles the next few candidates of every entry still open (in
        # parallel), and an entry takes the first candidate, in the rule's order, that fits.
        cand = {key: candidates(e, scheme) for key, e, _, _ in over_keys}
        chosen: dict[int, tuple[dict, int, str]] = {}
        step = max(2, jobs)
        for start in range(0, max((len(c) for c in cand.values()), default=0), step):
            flat = [(key, c) for key, cs in cand.items() if key not in chosen for c in fit_prefix(cs[start:start + step], key)]
            if not flat:
                break
            for (key, c), (bs, how) in zip(flat, sized(flat, f"export {f.rel}: substitutes")):
                if key in chosen:
                    continue
                if all(isinstance(b, (TritonBuild, int)) for b in bs) and \
                        max(_bytes(b) for b in bs) <= target.smem_optin:
                    chosen[key] = (c, max(_bytes(b) for b in bs), how)
        for key, e, need, how in over_keys:
            if key not in chosen:
                raise UsageError(f"{f.rel} [{key}]: no substitute by the rule fits {target.smem_optin} B "
                                 f"(original {need} B)")
            c, got, sub_how = chosen[key]
            # the engine keys the entry carried (USE_TMA) go with the substitute: it was sized launched with them
            out_entries[str(key)] = c | {k: raw_keep[key][k] for k in captured.ENGINE_KEYS
                                         if capture and k in raw_keep[key]}
            prov_entries[str(key)] = {"original": e, "original_bytes": need, "original_evidence": how,
                                      "substitute": c, "substitute_bytes": got, "substitute_evidence": sub_how,
                                      "kept": False, **({"launches": said(c, key)} if capture else {})}
            subs += 1
        out_entries = {str(k): out_entries[str(k)] for k in f.entries}  # the input's key order (the tie rule's)
        for dev in inp.devs_of.get(f.path, devs):
            path = output_path(out, inp, f, scheme, dev)
            texts[path] = json.dumps(out_entries, indent=4) + "\n"
            provenance["files"][str(path.relative_to(out))] = {"from": f.path, "device_name": dev,
                                                               "problem": prob.how, "gemms": list(gemms),
                                                               "entries": prov_entries}
            written.append(Written(path, len(out_entries), subs, [], banner=banner))
    tally = provenance["answers"]
    if policy.verify:  # a seeded sample of the predicted launches compiled; a wrong byte count: nothing is written
        seed, n, mismatches = pred_mod.verify_sample(predicted_launches, policy.verify, policy.seed, jobs, cache_dir)
        tally.update(verify_seed=seed, verified=n, compiled=tally["compiled"] + n)
        if mismatches:
            raise pred_mod.PredictionMismatch(mismatches)
    words = [w for w in ("predicted", "compiled") if tally[w]]
    provenance["evidence"] = f"{' and '.join(words) or 'compiled'}, not timed"
    for w in written:
        w.evidence = provenance["evidence"]
    write_folder(out, {PROVENANCE: json.dumps(provenance, indent=1) + "\n"} | {
        str(p.relative_to(out)): t for p, t in texts.items()})
    return written


def _bytes(b) -> int:
    """A launch's metadata.shared: predicted (an int) or compiled (a TritonBuild)."""
    return b if isinstance(b, int) else b.shared


def write_folder(out: Path, texts: dict[str, str]) -> None:
    """Every file of `texts` (relative path -> text) into `out` in one step, the provenance first (tileprobe.staged)."""
    with Staged(out) as st:
        for rel, text in texts.items():
            st.write_text(rel, text)
        st.commit(first=[PROVENANCE])

