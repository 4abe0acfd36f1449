"""What every family shares: tiles and their spellings, the Family record, and the structured Config.

A config is data: explicit fields (family, tile, schedule, stages, epilogue, swap, arch, cluster and whatever a
family adds in `extra`). Its readable name is derived from those fields and never parsed back; rows and known-good
files store the fields themselves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from tileprobe.errors import UnsupportedConfig, UsageError
from tileprobe.families.columns import CUTLASS_REPORT, ReportSpec

SCHEDULE_IDS = {"auto": 0, "cooperative": 1, "pingpong": 2}
SCHEDULE_SHORT = {"auto": "auto", "cooperative": "coop", "pingpong": "pp", "triton": "triton"}  # triton: Triton families
EPILOGUES = {"no-c": 0, "with-c": 1}  # bf16 D only / bf16 D = alpha*acc + beta*C with a bf16 C source
# The sweep options (as spelled on the command line) a family takes; the sweep driver refuses any other one given.
SWEEP_OPTIONS = frozenset({"--target", "--out", "--jobs", "--predict-only", "--rebuild", "--static-only", "--resume",
                           "--shard", "--gpus", "--cache-dir", "--workload", "--batch", "--tp", "--ep", "--seed"})
CUTLASS_OPTIONS = SWEEP_OPTIONS | {"--tiles", "--schedules", "--stages", "--epilogue", "--swap-ab", "--cluster",
                                   "--dtypes", "--compile", "--peer", "--model-skip", "--compile-timeout",
                                   "--run-timeout", "--cutlass-dir", "--nvcc", "--shape", "--routing"}
TRITON_OPTIONS = SWEEP_OPTIONS | {"--engine", "--quant", "--engine-wheel", "--config-dir", "--device-name",
                                  "--any-triton", "--rules-off", "--compile-all", "--verify"}


@dataclass(frozen=True)
class Tile:
    m: int
    n: int
    k: int  # in elements

    def __str__(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    def bytes_k(self, bits: int) -> str:
        """TensorRT-LLM / FlashInfer spelling, K in bytes: 128x256x128 FP4 -> 128x256x64B."""
        return f"{self.m}x{self.n}x{self.k * bits // 8}B"


_TILE_RE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*[xX]\s*(\d+)\s*([bB]?)\s*$")


def parse_tile(text: str, bits: int) -> Tile:
    """'128x256x128' (elements) or '128x256x64B' (K in bytes, converted with the family's operand width)."""
    m = _TILE_RE.match(str(text))
    if not m:
        raise UsageError(f"malformed tile {text!r}: expected MxNxK in elements (128x256x128) or K in bytes (128x256x64B)")
    tm, tn, tk = (int(g) for g in m.groups()[:3])
    if m.group(4):
        if (tk * 8) % bits:
            raise UsageError(f"tile {text!r}: {tk} bytes of K is not a whole number of {bits}-bit elements")
        tk = tk * 8 // bits
    if min(tm, tn, tk) <= 0:
        raise UsageError(f"malformed tile {text!r}: extents must be positive")
    return Tile(tm, tn, tk)


def expand_tile_specs(text: str) -> list[str]:
    """Tiles with per-dimension lists and ranges: '128,256x8..256x128,256' is M in {128, 256}, N in 8..256 (step 8,
    the range's start; 'a..b:s' for another step), K in {128, 256}. Plain lists ('128x128x128,128x256x64B') still
    work: a comma starts a new tile when the text after it has its own 'x'."""
    specs: list[list[str]] = []
    for tok in (t.strip() for t in str(text).split(",")):
        if not tok:
            continue
        if not specs or ("x" in tok.lower() and sum(p.lower().count("x") for p in specs[-1]) >= 2):
            specs.append([tok])
        else:
            specs[-1].append(tok)
    out: list[str] = []
    for parts in specs:
        spec = ",".join(parts)
        suffix = "B" if spec.rstrip().endswith(("B", "b")) else ""
        dims = re.split(r"[xX]", spec.rstrip("Bb") if suffix else spec)
        if len(dims) != 3:
            raise UsageError(f"malformed tile {spec!r}: expected MxNxK (lists and a..b ranges allowed per dimension)")
        values = [_dim_values(d, spec) for d in dims]
        out += [f"{m}x{n}x{k}{suffix}" for m in values[0] for n in values[1] for k in values[2]]
    return out


def _dim_values(text: str, spec: str) -> list[int]:
    vals: list[int] = []
    for item in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:\.\.\s*(\d+)\s*(?::\s*(\d+))?)?\s*", item)
        if not m:
            raise UsageError(f"malformed tile {spec!r}: {item!r} is not a number or a range a..b[:step]")
        a = int(m.group(1))
        if m.group(2) is None:
            vals.append(a)
            continue
        b, step = int(m.group(2)), int(m.group(3) or a)
        if step <= 0 or b < a or (b - a) // step > 4096:
            raise UsageError(f"malformed tile {spec!r}: range {item.strip()!r} is empty or too long")
        vals += list(range(a, b + 1, step))
    return list(dict.fromkeys(vals))


def version_tuple(version: str | None) -> tuple[int, ...]:
    """'4.5.0' -> (4, 5, 0); unknown -> ()."""
    nums = re.findall(r"\d+", version or "")
    return tuple(int(x) for x in nums[:3])


@dataclass(frozen=True)
class Config:
    family: str
    tile: Tile
    schedule: str
    stages: int  # 0 = auto carveout
    epilogue: str
    swap_ab: bool
    arch: str
    cluster: tuple[int, int, int] = (1, 1, 1)
    extra: tuple[tuple[str, str], ...] = ()  # family-specific fields, e.g. (("dtypes", "nvfp4xnvfp4"),)
    unsupported_reason: str | None = field(default=None, compare=False)

    @property
    def stages_label(self) -> str:
        return "auto" if self.stages == 0 else str(self.stages)

    def get(self, name: str, default: str | None = None) -> str | None:
        return dict(self.extra).get(name, default)

    @property
    def name(self) -> str:
        """Procedural kernel name, CUTLASS-library style: every parameter, readable (derived, never parsed)."""
        fam = self.family.replace("-", "_")
        extra = "".join(f"_{v.replace(' ', '-')}" for _, v in self.extra)  # "vllm <release>" -> vllm-<release>
        cluster = "" if self.cluster == (1, 1, 1) else "_c" + "x".join(map(str, self.cluster))
        return (f"{fam}{extra}_{self.tile}_{SCHEDULE_SHORT.get(self.schedule, self.schedule)}_s{self.stages_label}_"
                f"{self.epilogue.replace('-', '')}_{'swap' if self.swap_ab else 'noswap'}{cluster}_{self.arch}")

    @property
    def key(self) -> str:
        """Identity of a config inside a results file (resume, merge, diff)."""
        return self.name

    def fields(self) -> dict:
        """The config as explicit row/known-good fields (`stages_configured` is 'auto' or the count asked for)."""
        return {"family": self.family, "tile": str(self.tile), "schedule": self.schedule,
                "stages_configured": self.stages_label, "epilogue": self.epilogue, "swap_ab": self.swap_ab,
                "arch": self.arch, "cluster": "x".join(map(str, self.cluster)), **dict(self.extra)}


@dataclass(frozen=True)
class Accumulation:
    """How a kernel accumulates its products (tileprobe.results.tolerance derives the check's bound from it): `kind`
    "fp32" (round-to-nearest fp32 partial sums) or "fp8-reduced" (the sm_90 fp8 MMA accumulator, ~14 bits,
    truncated); `span` the K elements summed that way before promotion to fp32 (None: all of K); `why` its source."""
    kind: str = "fp32"
    span: int | None = None
    why: str = "fp32 accumulation"


@dataclass(frozen=True)
class Family:
    name: str
    kernel_template: str  # C++ template in the family's header
    header: str  # cutlass_harness/families/<header>
    archs: tuple[str, ...]  # arch-specific targets it builds for
    ab_bits: int  # operand width (A and B, unless weight_bits says otherwise), for K-byte notation and byte counts
    sf_vector: int  # scale-factor vector length along K (0: no block scales)
    schedules: tuple[str, ...]  # schedules it accepts
    default_schedules: tuple[str, ...]
    default_tiles: tuple[str, ...]
    mma_k: int  # K granularity of the MMA instruction, in elements
    # element-wise tolerance floor: |out - ref| <= atol * rms(ref_group) + rtol * |ref| (tileprobe.results.tolerance
    # raises atol with K where the accumulation is reduced-precision)
    atol: float
    rtol: float
    description: str
    rules: Callable[[Tile, str, str | None], None]  # raises UnsupportedConfig (tile, schedule, cutlass version)
    resolves: dict[str, str] = field(default_factory=dict)  # schedule aliases the builder resolves, e.g. auto->coop
    extra_fields: tuple[str, ...] = ()
    epilogues: tuple[str, ...] = tuple(EPILOGUES)
    render: Callable[[Config], list[int]] | None = None  # template arguments, when not the default seven
    include_dirs: Callable[[], list[str]] | None = None  # -I folders the header needs (before CUTLASS's)
    # A light header (cutlass_harness/families/) naming the reference's operand types (tileprobe::DevicePassOps): a
    # split harness's host half then compiles only the harness's own kernels in its device pass (device_pass.cuh)
    device_pass_header: str | None = None
    expand: Callable[..., list[Config]] | None = None  # configs from elsewhere (an engine's tactics)
    operand_bits: Callable[[Config], int] | None = None  # when a config's activation width is not ab_bits
    weight_bits: Callable[[Config], int] | None = None  # when a config's weight (B) width is not its activation width
    scale_vector: Callable[[Config], int] | None = None  # when a config's scale-factor vector is not sf_vector
    engine: Callable[[], tuple[str, str]] | None = None  # (label, header-tree hash) of the engine it mirrors
    cutlass_root: Callable[[], str] | None = None  # the CUTLASS the family must compile against, if fixed
    runs_point: Callable[[Config, object], bool] | None = None  # which workload points a config runs (None: all)
    harness_args: Callable[[Config, list], list[str]] | None = None  # extra runtime-harness options for its points
    # Why a config must not be launched even where its arch is present (None: it may be): a check whose reference
    # is not yet verified for it would blame a correct kernel. Such points get `unsupported` with this reason.
    launch_refusal: Callable[[Config], str | None] | None = None
    explicit_stages: bool = True  # False: configs are built with the engine's stage rule only (no StageCount<N>)
    # Output elements a full check of a point compares (config, point, harness answer), when not sum M x N.
    checked_count: Callable[[Config, object, dict], int | None] | None = None
    backend: str = "cutlass"  # how a config becomes bytes and a launch: "cutlass" (nvcc) or "triton"
    # How a config accumulates on a device of compute capability cc (None: its arch's); None: fp32 accumulation
    accumulation: Callable[[Config, int | None], Accumulation] | None = None
    report: ReportSpec = CUTLASS_REPORT  # the columns and words its tables and report use (families.columns)
    row_fields: Callable[[Config], dict] | None = None  # more row fields a config fills (Triton: BLOCK_*, kernel)
    options: frozenset[str] = CUTLASS_OPTIONS  # the sweep options it takes (sweep.check_options refuses others)

    def bits(self, cfg: Config) -> int:
        """Width of the activation elements (operand A before any swap): tile K bytes are spelled in it."""
        return self.operand_bits(cfg) if self.operand_bits else self.ab_bits

    def wbits(self, cfg: Config) -> int:
        """Width of the weight elements (operand B before any swap)."""
        return self.weight_bits(cfg) if self.weight_bits else self.bits(cfg)

    def sf(self, cfg: Config) -> int:
        return self.scale_vector(cfg) if self.scale_vector else self.sf_vector

    def check(self, tile: Tile, schedule: str, cluster: tuple[int, int, int], cutlass_version: str | None = None) -> None:
        """Raise UnsupportedConfig with the reason when CUTLASS cannot build this for the family."""
        if schedule not in self.schedules:
            raise UnsupportedConfig(f"{self.name} takes schedules {', '.join(self.schedules)}; not {schedule}")
        if cluster != (1, 1, 1) and self.expand is None:  # an engine's tactics carry their own clusters
            why = "SM120/121 support cluster 1x1x1 only" if "sm_120a" in self.archs else (
                "tileprobe's sm90 harness builds cluster 1x1x1 only")
            raise UnsupportedConfig(f"cluster {'x'.join(map(str, cluster))}: {why}")
        if tile.k % self.mma_k:
            raise UnsupportedConfig(f"K={tile.k} is not a multiple of the MMA K ({self.mma_k} elements)")
        self.rules(tile, schedule, cutlass_version)

    def schedule_label(self, schedule: str) -> str:
        """'auto->cooperative' where the builder resolves auto to a named schedule."""
        return f"{schedule}->{self.resolves[schedule]}" if schedule in self.resolves else schedule

    def template_args(self, cfg: Config) -> list[int]:
        """The numbers the C++ template takes, in its order (see the family's header)."""
        if self.render is not None:
            return self.render(cfg)
        t = cfg.tile
        return [t.m, t.n, t.k, SCHEDULE_IDS[cfg.schedule], cfg.stages, EPILOGUES[cfg.epilogue], int(cfg.swap_ab)]

    def cfg_macro(self, cfg: Config, index: int) -> str:
        return f"TP_CFG({index}, {', '.join(str(a) for a in self.template_args(cfg))})"
