"""Families and configs: what can be built, how tiles are spelled, and which shapes CUTLASS cannot build."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

from tileprobe.errors import UnsupportedConfig, UsageError

SCHEDULE_IDS = {"auto": 0, "cooperative": 1, "pingpong": 2}
SCHEDULE_SHORT = {"auto": "auto", "cooperative": "coop", "pingpong": "pp"}
EPILOGUES = {"no-c": 0, "with-c": 1}  # bf16 D only / bf16 D = alpha*acc + beta*C with a bf16 C source


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
    m = _TILE_RE.match(text)
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


@dataclass(frozen=True)
class Family:
    name: str
    kernel_template: str  # template in cutlass_harness/kernels.cuh
    archs: tuple[str, ...]  # arch-specific targets it builds for
    ab_bits: int  # operand width, for K-byte notation and byte counts
    sf_vector: int  # scale-factor vector length along K (0: no block scales)
    schedules: tuple[str, ...]  # schedules it accepts
    default_schedules: tuple[str, ...]
    default_tiles: tuple[str, ...]
    mma_k: int  # K granularity of the MMA instruction, in elements
    rel_tol: float  # tolerance on relative Frobenius error vs the reference
    description: str

    def check(self, tile: Tile, schedule: str, cluster: tuple[int, int, int]) -> None:
        """Raise UnsupportedConfig with the reason when CUTLASS cannot build this for the family."""
        if schedule not in self.schedules:
            raise UnsupportedConfig(f"{self.name} takes schedules {', '.join(self.schedules)}; not {schedule}")
        if cluster != (1, 1, 1):
            why = "SM120/121 support cluster 1x1x1 only" if self.name.startswith("sm120") else (
                "tileprobe's sm90 harness builds cluster 1x1x1 only")
            raise UnsupportedConfig(f"cluster {'x'.join(map(str, cluster))}: {why}")
        if tile.k % self.mma_k:
            raise UnsupportedConfig(f"K={tile.k} is not a multiple of the MMA K ({self.mma_k} elements)")
        _FAMILY_CHECKS[self.name](tile, schedule)


def _check_sm120(tile: Tile, schedule: str) -> None:
    if tile.m not in (128, 256):
        raise UnsupportedConfig(f"M={tile.m}: the SM120 block-scaled scale-factor atom is 128 rows, so M is 128 or 256")
    if tile.n % 8 or tile.n < 8 or tile.n > 256:
        raise UnsupportedConfig(f"N={tile.n}: the SM120 block-scaled builder needs N a multiple of 8, 8..256")
    if schedule == "pingpong" and tile.n < 16:
        raise UnsupportedConfig(f"N={tile.n}: the SM120 pingpong schedule needs N >= 16")


def _check_sm90(tile: Tile, schedule: str) -> None:
    if schedule == "cooperative" and tile.m % 128:
        raise UnsupportedConfig(f"M={tile.m}: the cooperative schedule splits M over two warp groups (M % 128 == 0)")
    if tile.m % 64:
        raise UnsupportedConfig(f"M={tile.m}: wgmma needs M a multiple of 64")
    if tile.n % 8 or tile.n > 256:
        raise UnsupportedConfig(f"N={tile.n}: wgmma needs N a multiple of 8, at most 256")


_FAMILY_CHECKS = {"sm120-nvfp4": _check_sm120, "sm90-fp8": _check_sm90}

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            name="sm120-nvfp4",
            kernel_template="Sm120Nvfp4Kernel",
            archs=("sm_120a", "sm_121a"),
            ab_bits=4,
            sf_vector=16,
            schedules=("auto", "cooperative", "pingpong"),
            default_schedules=("cooperative", "pingpong"),
            default_tiles=("128x128x128", "128x256x128", "256x128x128", "128x128x256", "128x64x128", "128x32x128",
                           "128x128x64", "128x256x64", "256x128x64"),
            mma_k=64,
            rel_tol=2e-2,
            description="NVFP4 x NVFP4 (e2m1, ue4m3 SF per 16) -> bf16, Sm120 block-scaled ptr-array grouped GEMM",
        ),
        Family(
            name="sm90-fp8",
            kernel_template="Sm90Fp8Kernel",
            archs=("sm_90a",),
            ab_bits=8,
            sf_vector=0,
            schedules=("cooperative", "pingpong"),
            default_schedules=("cooperative", "pingpong"),
            default_tiles=("64x64x128", "64x128x128", "64x256x128", "128x64x128", "128x128x128", "128x256x128",
                           "256x128x128"),
            mma_k=32,
            rel_tol=2e-2,
            description="FP8 e4m3 x e4m3 -> bf16, Sm90 ptr-array TMA warp-specialized grouped GEMM (fast accum)",
        ),
    )
}


def family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise UsageError(f"unknown family {name!r}; known: {', '.join(FAMILIES)}") from None


def family_for_cc(cc: str) -> Family:
    """The family a device runs by default: sm_90 -> sm90-fp8, sm_120/121 -> sm120-nvfp4."""
    return FAMILIES["sm90-fp8"] if cc.startswith("9.") else FAMILIES["sm120-nvfp4"]


def arch_for(fam: Family, cc: str) -> str:
    """The arch-specific target the family builds for a device/target of compute capability `cc`."""
    wanted = f"sm_{cc.replace('.', '')}a"
    if wanted in fam.archs:
        return wanted
    return fam.archs[0]


@dataclass(frozen=True)
class Config:
    family: str
    tile: Tile
    schedule: str
    stages: int  # 0 = auto carveout
    epilogue: str
    swap_ab: bool
    arch: str
    unsupported_reason: str | None = field(default=None, compare=False)

    @property
    def fam(self) -> Family:
        return FAMILIES[self.family]

    @property
    def stages_label(self) -> str:
        return "auto" if self.stages == 0 else str(self.stages)

    @property
    def name(self) -> str:
        """Procedural kernel name, CUTLASS-library style: every parameter, readable."""
        fam = self.family.replace("-", "_")
        return (f"{fam}_{self.tile}_{SCHEDULE_SHORT[self.schedule]}_s{self.stages_label}_"
                f"{self.epilogue.replace('-', '')}_{'swap' if self.swap_ab else 'noswap'}_{self.arch}")

    @property
    def key(self) -> str:
        """Identity of a config inside a results file (resume, merge, diff)."""
        return self.name

    def cfg_macro(self, index: int) -> str:
        t = self.tile
        return (f"TP_CFG({index}, {t.m}, {t.n}, {t.k}, {SCHEDULE_IDS[self.schedule]}, {self.stages}, "
                f"{EPILOGUES[self.epilogue]}, {int(self.swap_ab)})")


def expand_configs(
    fam: Family,
    arch: str,
    tiles: list[str] | None = None,
    schedules: list[str] | None = None,
    stages: list[int] | None = None,
    epilogues: list[str] | None = None,
    swap_ab: list[bool] | None = None,
    cluster: tuple[int, int, int] = (1, 1, 1),
) -> list[Config]:
    """Every combination, in a stable order. Unbuildable ones are kept, marked with their reason."""
    parsed = [parse_tile(t, fam.ab_bits) for t in (tiles or fam.default_tiles)]
    for s in schedules or ():
        if s not in SCHEDULE_IDS:
            raise UsageError(f"unknown schedule {s!r}; known: {', '.join(SCHEDULE_IDS)}")
    for e in epilogues or ():
        if e not in EPILOGUES:
            raise UsageError(f"unknown epilogue {e!r}; known: {', '.join(EPILOGUES)}")
    for s in stages or ():
        if s < 0 or s > 32:
            raise UsageError(f"stage count {s} out of range: 0 (auto) or 1..32")
    if arch not in fam.archs:
        raise UsageError(f"{fam.name} builds for {', '.join(fam.archs)}, not {arch}")
    out: list[Config] = []
    seen: set[str] = set()
    for tile, sched, st, epi, swap in itertools.product(
        parsed, schedules or fam.default_schedules, stages or [0], epilogues or ["no-c"], swap_ab or [False]
    ):
        reason = None
        try:
            fam.check(tile, sched, cluster)
        except UnsupportedConfig as exc:
            reason = str(exc)
        cfg = Config(fam.name, tile, sched, st, epi, swap, arch, reason)
        if cfg.key not in seen:
            seen.add(cfg.key)
            out.append(cfg)
    return out


def parse_cluster(text: str) -> tuple[int, int, int]:
    m = re.match(r"^(\d+)x(\d+)x(\d+)$", text.strip())
    if not m:
        raise UsageError(f"malformed cluster {text!r}: expected MxNxK such as 1x1x1")
    return tuple(int(g) for g in m.groups())  # type: ignore[return-value]
