"""Does an engine's Triton fused-MoE config file fit the GPU it is named for? Per entry (batch size M), both GEMMs,
compiled with Triton for the device in the file's name, through the engine's own lookup (so a file the engine would
not read for that device, or an entry it would not pick, is said so). Used by the pytest plugin's
`--tileprobe-configs`; evidence `predicted` where tileprobe's predictor is exact (tileprobe.triton.predicted), else
`compiled` (a cubin per launch); nothing launched.

The file name gives E (local experts), N (per-shard intermediate size), the device and the quantization scheme; the
hidden size K comes from the model preset whose experts and intermediate size split into E and N (tp, ep in 1..8),
or from the workload named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tileprobe import progress
from tileprobe.triton import predicted as pred_mod
from tileprobe.triton import sweep as triton_sweep
from tileprobe.backends.triton.compile import compile_many
from tileprobe.backends.triton.toolchain import require_triton
from tileprobe.engines import triton_configs as tc
from tileprobe.engines import triton_lookup
from tileprobe.errors import UsageError
from tileprobe.families import arch_for, family
from tileprobe.families import triton_moe as tm
from tileprobe.targets import Target, profile
from tileprobe.verdict import Verdict
from tileprobe.workloads import PRESETS

SPLITS = (1, 2, 4, 8)


@dataclass
class ConfigCheck:
    """A config file read for checking: what it is for, and its entries' batch sizes."""
    path: Path
    engine: str
    name: tc.ConfigName
    scheme: tc.Scheme
    device_name: str  # as the GPU reports it
    target: Target
    entries: list[int]
    results: dict[int, list[str]] = field(default_factory=dict)  # M -> problems (empty: fits)
    notes: dict[int, list[str]] = field(default_factory=dict)
    not_checked: dict[int, list[str]] = field(default_factory=dict)  # M -> launches not reproduced (USE_TMA): why


def read(path: Path, engine: str) -> ConfigCheck:
    """The file's fields, the device and target it names, and its entries; UsageError (one line) otherwise."""
    mod = triton_lookup.engine_module(engine)
    cf = tc.read_file(Path(path), engine)
    scheme = tc.scheme_of(cf.name)
    if scheme is None:
        raise UsageError(f"{path.name}: a scheme tileprobe does not size (dtype {cf.name.dtype}, block_shape "
                         f"{cf.name.block_shape}); sized: {', '.join(tc.SCHEMES)}")
    if cf.name.down:
        raise UsageError(f"{path.name}: a _down file is checked with its gate_up file (name that one)")
    known = triton_lookup.known_device_names()
    devices = [n for n in known if mod.device_file_name(n) == cf.name.device_name]
    if not devices:
        raise UsageError(f"{path.name}: device {cf.name.device_name!r} is none tileprobe knows "
                         f"({', '.join(sorted(known))})")
    if not cf.entries:
        raise UsageError(f"{path.name}: no entries")
    return ConfigCheck(Path(path), engine, cf.name, scheme, devices[0], profile(known[devices[0]]), sorted(cf.entries))


def shape_of(name: tc.ConfigName, workload: str | None) -> triton_sweep.Shape:
    """The model (and tp, ep) whose local experts and per-shard intermediate size are the file's E and N."""
    presets = [workload] if workload else list(PRESETS)
    found = []
    for p in presets:
        if p not in PRESETS:
            raise UsageError(f"unknown workload {p!r}; known: {', '.join(PRESETS)}")
        m = PRESETS[p]
        for tp in SPLITS:
            for ep in SPLITS:
                if m.experts % ep == 0 and m.inter % tp == 0 and m.experts // ep == name.E and m.inter // tp == name.N:
                    found.append((p, tp, ep))
    models = sorted({p for p, _, _ in found})
    if len(models) != 1:
        raise UsageError(f"E={name.E},N={name.N}: " + (f"matches {', '.join(models)}: name one with "
                         "--tileprobe-workload" if models else "no model preset splits into these (name the model "
                         "with --tileprobe-workload)"))
    p, tp, ep = min((x for x in found if x[0] == models[0]), key=lambda x: (x[2], x[1]))
    return triton_sweep.shape_for([p], tp, ep)


def user_dir_for(check: ConfigCheck) -> Path:
    """The folder the engine would be pointed at for this file: vLLM's VLLM_TUNED_CONFIG_FOLDER is the file's folder;
    SGLang's SGLANG_MOE_CONFIG_DIR holds configs/triton_X_Y_Z/<file>."""
    if check.engine == "sglang":
        if check.path.parent.name.startswith("triton_") and check.path.parent.parent.name == "configs":
            return check.path.parent.parent.parent
        raise UsageError(f"{check.path}: an SGLang config file sits in configs/triton_X_Y_Z/ under the folder "
                         "SGLANG_MOE_CONFIG_DIR names")
    return check.path.parent


def run(check: ConfigCheck, workload: str | None, ms: list[int], jobs: int, cache_dir=None) -> ConfigCheck:
    """Compile the engine's launches for entries `ms` on the file's device; fill check.results / check.notes."""
    shape = shape_of(check.name, workload)
    triton = require_triton(False)
    src, source = triton_sweep.engine_kernel_source(check.engine, None)
    arch = arch_for(family(tm.NAME), check.target.cc)
    if arch is None:
        raise UsageError(f"triton-moe compiles for {', '.join(tm.ARCHS)}; not {check.target.name}")
    planned = triton_sweep.plan(shape, check.engine, check.scheme.name, source, src, check.target, arch,
                                (check.device_name,), sorted(ms), str(user_dir_for(check)), max(ms))
    ans = pred_mod.answer([p.config for p in planned], [p.job for p in planned], source, triton.version,
                          pred_mod.Policy())
    jobs_ = [p for i, p in enumerate(planned) if ans.compile[i]]  # predicted, or not reproduced (USE_TMA): not built
    with progress.track(len(jobs_), f"check {check.path.name}") as bar:
        done = iter(compile_many([p.job for p in jobs_], jobs, cache_dir, on_result=bar.each(
            [progress.unit(p.config, p.point["batch"]) for p in jobs_],
            lambda i, b: triton_sweep.outcome(jobs_[i].config, b, check.target, triton))))
    builds = [next(done) if ans.compile[i] else None for i in range(len(planned))]
    for i, (p, b) in enumerate(zip(planned, builds)):
        m, gemm = p.point["batch"], p.point["gemm"]
        problems = check.results.setdefault(m, [])
        notes = check.notes.setdefault(m, [])
        where = f"{check.path.name} M={m} {gemm} on {check.target.name} ({check.device_name})"
        if p.pick.source != "user" or Path(str(p.pick.path)).name != check.path.name:
            problems.append(f"{where}: {check.engine} would not launch this file's entry: it picks "
                            f"{p.pick.source} {p.pick.path or ''} {p.pick.m_text()}".rstrip())
            continue
        if p.pick.key != m:
            notes.append(f"{where}: the engine picks the entry for M={p.pick.key}")
        shared = ans.predicted(i)
        o = triton_sweep.outcome(p.config, b, check.target, triton) if shared is None else \
            triton_sweep.predicted_outcome(p.config, check.target, shared, triton.version)
        if o.verdict is Verdict.UNSUPPORTED:
            check.not_checked.setdefault(m, []).append(f"{where}: not checked: {o.reason}")
        elif o.verdict is not Verdict.FITS:
            problems.append(f"{where}: {o.verdict.value} ({'predicted' if shared is not None else 'compiled'}): "
                            f"{o.reason}")
        else:
            notes.append(f"{where}: {o.reason}")
    return check
