"""Types shared by the predictor's API and its family rule modules."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tileprobe.errors import TileprobeError


class CannotPredict(TileprobeError):
    """The model has no verified rules for this CUTLASS version or family: compile instead of guessing."""


class Unbuildable(TileprobeError):
    """CUTLASS itself rejects this config at compile time (a static_assert or a template that does not form).

    kind: 'too-few-stages' (the auto carveout leaves < 2 stages, or StageCount<1>: the collective's
    static_assert "Stages set to value 2 or more"), 'tile' (a builder's static_assert or a layout that does not form
    for this tile), 'unsupported' (outside what tileprobe's family builds: tileprobe.families.Family.check).
    at_two_stages: for 'too-few-stages', the prediction with StageCount<2>, to put bytes on why.
    """

    def __init__(self, reason: str, kind: str, at_two_stages: "Prediction | None" = None):
        super().__init__(reason)
        self.reason = reason
        self.kind = kind
        self.at_two_stages = at_two_stages


@dataclass(frozen=True)
class Prediction:
    family: str
    cutlass_version: str  # the rule set used: '4.2' or '4.5'
    stages: int
    smem_bytes: int  # sizeof(GemmKernel::SharedStorage)
    smem_mainloop_bytes: int  # sizeof(CollectiveMainloop::SharedStorage)
    smem_epilogue_bytes: int  # sizeof(CollectiveEpilogue::SharedStorage)
    kernel_level_bytes: int  # the kernel's storage outside its tensors member: pipelines, scheduler, tensormaps, padding
    layout: object = field(repr=False, compare=False)  # the kernel SharedStorage Struct (tileprobe.predict._layout)
    stage_bytes: int = 0  # what the builder's stage-count rule charges per stage
    carveout_bytes: int = 0  # StageCountAutoCarveout<bytes>: sizeof(CollectiveEpilogue::SharedStorage)
    capacity_bytes: int = 0  # the capacity the builder divides (after its own kernel-level reductions)
    auto_stages: bool = True

    @property
    def parts(self) -> dict[str, int]:
        """Kernel SharedStorage bytes by member path ('tensors.mainloop.SFB', 'pipelines.scheduler',
        'tensormaps.epilogue.tensormap_D', '<pad>' for padding); sums to smem_bytes."""
        return self.layout.parts()

    def fits(self, limit_bytes: int) -> bool:
        return self.smem_bytes <= limit_bytes


_VERSION_RE = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(\d+|x))?(?:\.\d+)?\s*$")


def version_key(version: str, known: dict[str, tuple[str, ...]]) -> str:
    """The rule-set key ('4.5') for a CUTLASS version string; CannotPredict unless verified.

    known maps a rule-set key to the exact patch versions it was verified against (compiled, byte-exact), e.g.
    {'4.5': ('4.5.0',)}. 'MAJOR.MINOR.x' and 'MAJOR.MINOR' mean that minor line and are accepted when the line has a
    verified rule set; an explicit patch version must be one that was verified: patch releases do change these
    rules (CUTLASS 4.4.2 changed the SM120 block-scaled stage carveout).
    """
    m = _VERSION_RE.match(str(version))
    if not m:
        raise CannotPredict(f"cannot parse CUTLASS version {version!r}: expected MAJOR.MINOR.PATCH such as 4.5.0")
    key = f"{m.group(1)}.{m.group(2)}"
    verified = ", ".join(v for vs in known.values() for v in vs)
    if key not in known:
        raise CannotPredict(f"no verified rules for CUTLASS {version}: the predictor knows {verified}; "
                            "compile it (tileprobe sweep --static-only) instead")
    patch = m.group(3)
    if patch not in (None, "x") and f"{key}.{patch}" not in known[key]:
        raise CannotPredict(f"no verified rules for CUTLASS {version}: the {key} rules were verified on "
                            f"{', '.join(known[key])} only, and patch releases have changed them before; compile it "
                            "(tileprobe sweep --static-only) instead")
    return key


def engine_key(family: str, engine: str | None, cutlass_version: str, cutlass_hash: str | None,
               engines: dict[str, tuple[str, str]], versions: dict[str, tuple[str, ...]]) -> str:
    """The rule-set key for a family whose kernels are an engine's own, compiled against the CUTLASS the engine bundles:
    keyed by the engine release they were checked against, never by a CUTLASS version alone.

    engines (a rule module's ENGINES) maps an engine release label as rows carry it ('flashinfer 0.7.4') to (rule-set
    key, content hash of the bundled CUTLASS tree that release was compiled with: the rows' cutlass_hash,
    tileprobe.backends.cutlass.toolchain). Any other release is CannotPredict (its launcher or its CUTLASS may differ), and so is the
    named release with another CUTLASS tree (cutlass_hash, when given, must be the checked one) or version.
    """
    trees: dict[str, list[str]] = {}
    for e, (_, h) in engines.items():
        trees.setdefault(h, []).append(e)
    checked = "; ".join(f"{', '.join(es)} (bundled CUTLASS tree {h})" for h, es in trees.items())
    if not engine:
        raise CannotPredict(f"{family} predictions are keyed by the engine release whose tree is compiled, and none "
                            f"was named; the rules were checked against {checked}")
    if engine not in engines:
        raise CannotPredict(f"no verified {family} rules for {engine}: they were checked (compiled, byte-exact) "
                            f"against {checked} only")
    key, tree = engines[engine]
    if cutlass_hash is not None and cutlass_hash != tree:
        raise CannotPredict(f"{engine}'s bundled CUTLASS tree is {cutlass_hash}, not the {tree} the {family} rules "
                            "were checked against (a modified or different copy)")
    if cutlass_version:
        try:
            version_key(cutlass_version, {key: versions[key]})
        except CannotPredict:
            raise CannotPredict(f"{engine}'s rules are for its bundled CUTLASS {', '.join(versions[key])}, not "
                                f"{cutlass_version}") from None
    return key


# The Triton rule modules (triton_ssd, triton_conv, triton_attention, triton_ogs): each rule was checked on one Triton
# release and one engine source; outside them it says which, and the launch is sized instead.

def release_checked(rules: str, releases: tuple[str, ...], triton_version: str) -> None:
    if triton_version not in releases:
        raise CannotPredict(f"{rules} rules were checked on Triton {', '.join(releases)} only, not {triton_version}: "
                            "another release lays shared memory out otherwise; size it")


def source_checked(rules: str, kernel: str, source_sha256: str, engines: str) -> CannotPredict:
    """What to raise for a kernel source the rules were not checked on (`engines`: the releases they were)."""
    return CannotPredict(f"{kernel}'s engine source {source_sha256[:16]} is not one the {rules} rules were checked on "
                         f"({engines}): a changed kernel changes the layout; size it")


def cc_checked(rules: str, ccs: tuple[int, ...], cc: int, why: str = "") -> None:
    if cc not in ccs:
        raise CannotPredict(f"{rules} rules were checked for sm_{', sm_'.join(map(str, ccs))} only, not sm_{cc}"
                            f"{why}; size it")
