"""Which Triton fused-MoE config an engine runs on a GPU, for every batch size M: the engine's own order (user
folder, shipped file for the exact device name, default heuristic), as tileprobe.engines.vllm / .sglang state it.

No compile here: the answer is the configs (and where they came from); the triton-moe family sizes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType

from tileprobe.engines import sglang, vllm
from tileprobe.engines import triton_configs as tc
from tileprobe.errors import UsageError
from tileprobe.targets import DEVICE_NAMES, Target

ENGINE_MODULES: dict[str, ModuleType] = {"vllm": vllm, "sglang": sglang}
GEMMS = ("gate_up", "down")
DEFAULT_MAX_M = 16384


def engine_module(name: str) -> ModuleType:
    try:
        return ENGINE_MODULES[name]
    except KeyError:
        raise UsageError(f"unknown --engine {name!r}; known: {', '.join(ENGINE_MODULES)}") from None


def known_device_names() -> dict[str, str]:
    """Every device name tileprobe knows, to the target profile it belongs to."""
    return {n: t for t, names in DEVICE_NAMES.items() for n in names}


def device_names(target: Target, explicit: list[str] | None = None) -> tuple[str, ...]:
    """The device names to answer for: `explicit` (each must be a known SKU name of `target`), else every SKU
    name of the target. An unknown name is a UsageError (the engine keys files by the exact name)."""
    known = known_device_names()
    own = tuple(n for n, t in known.items() if t == target.name)
    if not explicit:
        if not own:
            raise UsageError(f"no known device names for target {target.name!r}; pass --device-name with the exact "
                             f"name your GPU reports (known: {', '.join(sorted(known))})")
        return own
    for n in explicit:
        if n not in known:
            raise UsageError(f"unknown device name {n!r}: tileprobe knows {', '.join(sorted(known))}")
        if known[n] != target.name:
            raise UsageError(f"device name {n!r} is a {known[n]}, not a {target.name}")
    return tuple(explicit)


@dataclass(frozen=True)
class Pick:
    """For M in [m_lo, m_hi] (m_hi None: and every larger M), the config the engine launches for one GEMM."""

    engine: str
    device_name: str  # as the GPU reports it
    file_device: str  # as the engine spells it in file names
    gemm: str  # gate_up | down
    m_lo: int
    m_hi: int | None
    source: str  # user | shipped | default | engine-error
    path: str | None  # the config file, for user/shipped
    key: int | None  # the file entry's batch size, for user/shipped
    config: dict = field(compare=False)
    note: str = ""

    def m_text(self) -> str:
        if self.m_hi is None:
            return f"M>={self.m_lo}"
        return f"M={self.m_lo}" if self.m_lo == self.m_hi else f"M={self.m_lo}..{self.m_hi}"


def _entries(loaded: tc.Loaded) -> dict[int, dict] | None:
    """The engine's `if configs:`: a file with no entries counts as none."""
    return loaded.file.entries if loaded.file is not None and loaded.file.entries else None


def picks(engine: str, src: tc.EngineSource, E: int, N: int, K: int, topk: int, scheme: tc.Scheme,
          target: Target, device_name: str, user_dir=None, max_m: int = DEFAULT_MAX_M) -> list[Pick]:
    """Every M in 1..max_m, grouped into ranges by the config each GEMM gets. E: local experts, N: the per-shard
    intermediate size (the file's N), K: hidden size, topk: experts per token."""
    mod = engine_module(engine)
    fdev = mod.device_file_name(device_name)
    up = mod.load(src, E, N, scheme, device_name, user_dir, "gate_up")
    # vLLM launches both GEMMs with the one config; SGLang looks up a _down file for the second.
    down = up if engine == "vllm" else mod.load(src, E, N, scheme, device_name, user_dir, "down")
    up_e, down_e = _entries(up), _entries(down)
    out: list[Pick] = []
    for gemm, loaded in (("gate_up", up), ("down", down)):
        if loaded.source == "engine-error":
            out.append(Pick(engine, device_name, fdev, gemm, 1, None, "engine-error", None, None, {}, loaded.note))
            continue
        runs: list[list] = []
        for m in range(1, max_m + 1):
            if up_e:
                ukey = tc.nearest_key(list(up_e), m)
                ucfg, usrc = up_e[ukey], up.source
            else:
                ukey, ucfg, usrc = None, mod.default_config(m, E, N, K, topk, scheme, target.smem_optin), "default"
            if gemm == "gate_up" or engine == "vllm":
                key, cfg, source, path, note = ukey, ucfg, usrc, up.path if up_e else None, up.note
            elif down_e:
                dkey = tc.nearest_key(list(down_e), m)
                key, cfg, source, path, note = dkey, sglang.down_config(ucfg, down_e[dkey]), down.source, down.path, \
                    down.note
            else:  # no down file and no up file: `down_config or config`
                key, cfg, source, path, note = ukey, dict(ucfg), usrc, up.path if up_e else None, \
                    "the down GEMM runs the up config"
            sig = (source, path, key, tuple(sorted(cfg.items())))
            if runs and runs[-1][0] == sig:
                runs[-1][2] = m
            else:
                runs.append([sig, m, m, cfg, note])
        for i, (sig, lo, hi, cfg, note) in enumerate(runs):
            source, path, key, _ = sig
            last = i == len(runs) - 1
            # Beyond the largest key the nearest-key rule keeps picking it: the range is open.
            open_end = last and source != "default" and key == max((up_e if gemm == "gate_up" or engine == "vllm"
                                                                     or not down_e else down_e))
            out.append(Pick(engine, device_name, fdev, gemm, lo, None if open_end else hi, source, path, key, cfg,
                            note))
    return out


def distinct_configs(ps: list[Pick]) -> list[tuple[str, dict]]:
    """The distinct (gemm, config) pairs among picks, in first-seen order: what must be compiled to answer."""
    seen: dict[tuple, tuple[str, dict]] = {}
    for p in ps:
        if p.source == "engine-error":
            continue
        seen.setdefault((p.gemm, tuple(sorted(p.config.items()))), (p.gemm, p.config))
    return list(seen.values())
