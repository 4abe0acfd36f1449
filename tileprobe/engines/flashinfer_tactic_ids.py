"""The integers FlashInfer's autotuner calls tactics, for its CUTLASS fused-MoE runner on SM120/SM121.

FlashInfer's binding (`flashinfer_cutlass_fused_moe_binding.cu`) builds one profile list per runner:
`getTactics(GEMM_1)` followed by `getTactics(GEMM_2)`, and a tactic is an index into it (gemm2's start after
gemm1's). `CutlassMoeFCRunner::getTactics` -> `MoeGemmRunner::getConfigs(sm, gemm2 && finalize fusion)` ->
`getTmaWarpSpecializedConfigs`: the `get_candidate_configs_sm120` tiles that survive its grouped-GEMM pruning (the
pruned tiles get no number at all), then, when finalize fusion is on for gemm2, a FINALIZE copy of each, then a
swap-AB copy of everything so far. No Ampere configs are appended for FP4 weights
(`isValidAmpereMOESpecialisation` is false for Fp4Type).

tileprobe derives that list here from the flashinfer-moe family's configs (the engine's candidate order, read
from its sources) so that every integer names the very config whose SharedStorage a sweep row measured.
`tests/engines/test_engine_tactic_ids.py` compiles FlashInfer's own enumeration with nvcc and compares the whole map.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tileprobe.engines import flashinfer as engine
from tileprobe.errors import UsageError
from tileprobe.families import flashinfer_moe as fam
from tileprobe.families.base import Config

SM120_ARCHS = ("sm_120a", "sm_121a")
PAIRS = ("nvfp4xnvfp4", "mxfp8xmxfp4")
FINALIZE_MODES = {"on": True, "off": False}
# The autotuner's keys for the two GEMMs of the CUTLASS fused MoE (fused_moe/core.py: tuner.choose_one(
# "trtllm::fused_moe::gemm1" / "...::gemm2", [moe_runner], ...) with `class MoERunner(TunableRunner)`).
OP_KEYS = {"gemm1": "trtllm::fused_moe::gemm1::MoERunner", "gemm2": "trtllm::fused_moe::gemm2::MoERunner"}


@dataclass(frozen=True)
class TacticId:
    """One integer of the engine's profile list and the config it selects."""

    id: int
    gemm: str  # gemm1 / gemm2
    tactic: str  # engine tile name, CtaShape128x256x64B
    epilogue: str  # the engine's fusion type: none / finalize
    swap_ab: bool
    dtypes: str
    config: Config  # the flashinfer-moe config (epilogue 'default' for the engine's NONE fusion)

    @property
    def tile_bytes(self) -> str:
        """The engine's spelling of the tile, K in bytes (CtaShape128x256x64B -> 128x256x64)."""
        return self.tactic.removeprefix("CtaShape").removesuffix("B")

    def key(self) -> tuple:
        """What the integer means, for comparing two enumerations."""
        return (self.gemm, self.tile_bytes, self.epilogue, self.swap_ab, self.dtypes)

    def label(self) -> str:
        return (f"{self.gemm} {self.tactic} {self.epilogue} epilogue, swap-AB {'on' if self.swap_ab else 'off'}, "
                f"{self.dtypes}")


@contextmanager
def using_flashinfer(flashinfer_dir: str | Path | None):
    """The flashinfer-moe family reads TILEPROBE_FLASHINFER_DIR; point it at `flashinfer_dir` for a while."""
    old = os.environ.get("TILEPROBE_FLASHINFER_DIR")
    if flashinfer_dir is not None:
        os.environ["TILEPROBE_FLASHINFER_DIR"] = str(flashinfer_dir)
    try:
        yield
    finally:
        if flashinfer_dir is not None:
            if old is None:
                os.environ.pop("TILEPROBE_FLASHINFER_DIR", None)
            else:
                os.environ["TILEPROBE_FLASHINFER_DIR"] = old


def tactic_ids(dtypes: str, finalize: bool, arch: str = "sm_120a",
               flashinfer_dir: str | Path | None = None) -> list[TacticId]:
    """The runner's whole profile list for one dtype pair and finalize-fusion mode, in the engine's order, for
    the installed flashinfer or the one at `flashinfer_dir`."""
    if arch not in SM120_ARCHS:
        raise UsageError(f"FlashInfer tactic numbering is derived for SM120/SM121 only, not {arch}")
    if dtypes not in PAIRS:
        raise UsageError(f"unknown dtype pair {dtypes!r} for SM120; known: {', '.join(PAIRS)}")
    with using_flashinfer(flashinfer_dir):
        tree = fam.tree()
        configs = fam.expand(arch, None, None, None, [dtypes])
        pruned = {r.tactic for r in engine.sm120_pruned(fam.DTYPES[dtypes], tree)}
    by_variant = {(c.get("tactic"), c.epilogue, c.swap_ab): c for c in configs}
    # getTmaWarpSpecializedConfigs starts from get_candidate_configs_sm120's list after its erase().
    base = [t for t in dict.fromkeys(c.get("tactic") for c in configs) if t not in pruned]
    if not base:
        raise UsageError(f"flashinfer {tree.version} keeps no SM120 tactic for {dtypes}")

    def copies(epilogues: list[str]) -> list[tuple[str, str, bool]]:
        # [base (NONE) ... , FINALIZE copies ...] then a swap-AB copy of all of them, in that order.
        plain = [(t, e, False) for e in epilogues for t in base]
        return plain + [(t, e, True) for t, e, _ in plain]

    out: list[TacticId] = []
    gemm2_epis = ["default", "finalize"] if finalize else ["default"]
    for gemm, epis in (("gemm1", ["default"]), ("gemm2", gemm2_epis)):
        for tactic, epi, swap in copies(epis):
            cfg = by_variant.get((tactic, epi, swap))
            if cfg is None:
                raise UsageError(f"flashinfer-moe has no config for {tactic} {epi} swap={swap} ({dtypes})")
            out.append(TacticId(len(out), gemm, tactic, "finalize" if epi == "finalize" else "none", swap, dtypes,
                                cfg))
    return out


def counts(ids: list[TacticId]) -> dict[str, int]:
    return {g: sum(t.gemm == g for t in ids) for g in OP_KEYS}
