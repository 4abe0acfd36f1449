"""`tileprobe export triton-configs` without an input file: what the engine loads on the target today, for the
model's MoE layer (a workload preset or a config.json), on each SKU name of the target, becomes the export's input.

For every device name, the engine's own lookup (tileprobe.engines.triton_lookup.picks, with no user folder set)
says, per GEMM, what runs:
- `shipped`: the file the engine ships for that device name, in SGLang possibly from another Triton release's
  folder (its fallback across configs/triton_X_Y_Z, newest first; the note says which);
- `default`: no file, so the engine's default heuristic (get_default_config) runs; it is written out as a file at
  the engine tuner's batch sizes (DEFAULT_KEYS), each entry the default config for that M, so that the folder pins
  those configs (between two keys the engine's nearest-key rule picks the nearer one).
That file goes through the same export as a user's file (tileprobe.triton.export: every entry compiled for the target,
an over-limit entry replaced by the rule's nearest fitting config), written under that device name only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from tileprobe.engines import moe_choice
from tileprobe.engines import triton_configs as tc
from tileprobe.engines import triton_lookup
from tileprobe.errors import UsageError
from tileprobe.families import triton_moe as tm
from tileprobe.models import read_config
from tileprobe.targets import profile
from tileprobe.triton.audit import Problem, arch_of
from tileprobe.triton import export
from tileprobe.workloads import PRESETS, MoEModel, check_split

# vLLM's benchmarks/kernels/benchmark_moe.py batch sizes, which its shipped files are keyed by (SGLang's tuner uses
# the same list).
DEFAULT_KEYS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)
ENV_VARS = moe_choice.ENV_VARS


@dataclass(frozen=True)
class Today:
    """What one GEMM runs on one device name today, by the engine's lookup."""

    device_name: str
    gemm: str  # gate_up | down (vLLM: one file, both GEMMs: gate_up only)
    source: str  # shipped | default
    path: str | None  # the shipped file (wheel!member or a path)
    note: str

    def line(self, label: str) -> str:
        what = f"the shipped {self.path.rsplit('/', 1)[-1]}" if self.path else "no file: its default heuristic"
        return f"{self.device_name} {self.gemm}: {label} loads {what}" + (f" ({self.note})" if self.note else "")

    def record(self) -> dict:
        return {"device_name": self.device_name, "gemm": self.gemm, "source": self.source, "path": self.path,
                "note": self.note}


@dataclass
class Resolved:
    inputs: export.Inputs
    problem: Problem
    today: list[Today]
    src: tc.EngineSource
    env_var: str


def model_of(workload: str | None, model: str | None) -> MoEModel:
    """The MoE shape: a preset by name, or a config.json's fields (tileprobe.models); exactly one of them."""
    if (workload is None) == (model is None):
        raise UsageError("without an input file, name the model: --workload PRESET or --model config.json (one)")
    if model is not None:
        return read_config(model).moe()
    if workload not in PRESETS:
        raise UsageError(f"unknown --workload {workload!r}; known: {', '.join(PRESETS)}")
    return PRESETS[workload]


def quant_of(quant: str | None, model: str | None) -> str:
    """--quant, else a config.json's quantization_config, else bf16; a --quant against the config.json's is refused."""
    from_file = read_config(model).scheme() if model is not None else None
    if quant is not None and from_file is not None and quant != from_file:
        raise UsageError(f"--quant {quant}, but {model}'s quantization_config is {from_file}")
    return quant or from_file or "bf16"


def _default_file(engine: str, mod, src: tc.EngineSource, E: int, N: int, scheme: tc.Scheme, dev: str,
                  ps: list[triton_lookup.Pick], gemm: str) -> tc.ConfigFile:
    """The default heuristic's configs at DEFAULT_KEYS, as a config file named for `dev`."""
    def at(m: int) -> dict:
        p = next(p for p in ps if p.gemm == gemm and p.m_lo <= m and (p.m_hi is None or m <= p.m_hi))
        return dict(p.config)

    name = mod.config_file_name(E, N, scheme, dev) if engine == "vllm" else \
        mod.config_file_name(E, N, scheme, dev, gemm == "down")
    where = f"{src.label()} get_default_config for {dev} at M={','.join(map(str, DEFAULT_KEYS))}"
    return tc.ConfigFile(engine, tc.parse_name(name), where, name, {m: at(m) for m in DEFAULT_KEYS})


def resolve(engine: str, wheel: str | None, model: MoEModel, tp: int, ep: int, quant: str, target_name: str,
            device_names: list[str] | None) -> Resolved:
    """The export's inputs for `model` split `tp` / `ep` ways: per device name of the target, what the engine loads
    today (the module docstring)."""
    mod = triton_lookup.engine_module(engine)
    check_split(model, tp, ep)
    scheme = tc.scheme(quant)
    if scheme.name not in tm.QUANTS:
        raise UsageError(f"--quant {quant}: export handles {', '.join(tm.QUANTS)}")
    target = profile(target_name)
    arch = arch_of(target)
    if arch is None:
        raise UsageError(f"triton-moe compiles for {', '.join(tm.ARCHS)}; not {target.name}")
    devs = list(triton_lookup.device_names(target, device_names))
    src = tc.find_engine(engine, wheel)
    E, N = model.experts // ep, model.inter // tp
    files: dict[str, tc.ConfigFile] = {}
    devs_of: dict[str, list[str]] = {}
    today: list[Today] = []
    for dev in devs:
        ps = triton_lookup.picks(engine, src, E, N, model.hidden, model.top_k, scheme, target, dev,
                                 max_m=max(DEFAULT_KEYS))
        for gemm in (("gate_up",) if engine == "vllm" else triton_lookup.GEMMS):
            mine = [p for p in ps if p.gemm == gemm]
            err = next((p for p in mine if p.source == "engine-error"), None)
            if err is not None:
                raise UsageError(f"{src.label()} on {dev}: the engine's own lookup fails ({err.note})")
            if mine[0].source == "default":
                if gemm == "down":
                    # No _down file and no up file: the down GEMM runs the up config (`down_config or config`), so
                    # the up file written for the default serves both.
                    today.append(Today(dev, gemm, "default", None, "the down GEMM runs the up config"))
                    continue
                f = _default_file(engine, mod, src, E, N, scheme, dev, ps, gemm)
            else:
                loaded = mod.load(src, E, N, scheme, dev, None, gemm)
                f = loaded.file
            today.append(Today(dev, gemm, mine[0].source, f.path if mine[0].source != "default" else None,
                               mine[0].note))
            files.setdefault(f.path, f)
            if dev not in devs_of.setdefault(f.path, []):
                devs_of[f.path].append(dev)
    how = f"{model.name} tp{tp}" + (f" ep{ep}" if ep > 1 else "")
    problem = Problem(model.hidden, model.top_k, model.experts, ep, how)
    inputs = export.Inputs(engine, mod, target, arch, tm.arch_cc(arch), devs, list(files.values()),
                    devs_of={k: tuple(v) for k, v in devs_of.items()},
                    resolved={"model": how, "E": E, "N": N, "hidden": model.hidden, "top_k": model.top_k,
                              "quant": scheme.name, "loaded_today": [t.record() for t in today]})
    return Resolved(inputs, problem, today, src, ENV_VARS[engine])


def run(engine: str | None, wheel: str | None, workload: str | None, model: Path | None, tp: int, ep: int,
        quant: str | None, target_name: str, out: Path, device_names: list[str] | None, jobs: int,
        cache_dir: str | None, any_triton: bool, policy: export.pred_mod.Policy | None = None,
        rules_off: bool = False) -> list[str]:
    """The command without an input file: resolve, export, and the lines to print (today's loads, the files written,
    the variable to set)."""
    if engine is None:
        raise UsageError("without an input file, name the engine: --engine vllm or --engine sglang")
    model_path = str(model) if model is not None else None
    res = resolve(engine, wheel, model_of(workload, model_path), tp, ep, quant_of(quant, model_path), target_name,
                  device_names)
    written = export.run(None, engine, wheel, target_name, out, None, None, jobs, cache_dir, any_triton,
                         prepared=res.inputs, problem=res.problem, policy=policy or export.pred_mod.Policy(),
                         rules_off=rules_off)
    target = profile(target_name)
    chosen = moe_choice.note(res.src, replace(target, device_name=res.inputs.devs[0]), model_of(workload, model_path),
                             res.inputs.resolved["quant"], res.env_var, cache_dir)
    banner = [written[0].banner] if written and written[0].banner else []
    return (banner + chosen + [f"today: {t.line(res.src.label())}" for t in res.today]
            + [f"{w.path}: {w.entries} entries, {w.substituted} substituted" for w in written]
            + [f"use: export {res.env_var}={Path(out).resolve()} (provenance: {out / export.PROVENANCE}; "
               f"{written[0].evidence if written else 'compiled, not timed'})"])
