"""Predict CUTLASS's stage count and every byte of sizeof(GemmKernel::SharedStorage) without compiling.

Pure Python (no nvcc, no GPU, no torch): each family is a rule module that re-derives, from the CUTLASS headers, what
the collective builders choose (stage count under StageCountAutoCarveout<sizeof epilogue storage>, epilogue tile and
C/D stages) and lays out the mainloop, epilogue and kernel SharedStorage structs member by member. Every rule names
its header and the CUTLASS versions it was verified on; a family that mirrors an engine's own kernels (compiled
against the CUTLASS the engine bundles) is keyed by the engine releases it was checked against instead (its module's
ENGINES), so predict() takes engine= and cutlass_hash=. An unknown family, version or release raises CannotPredict;
a config CUTLASS rejects at compile time raises Unbuildable (with .kind and, for too few stages, the 2-stage
prediction).

    >>> from tileprobe.predict import predict
    >>> p = predict("sm120-nvfp4", (128, 128, 128), "cooperative")
    >>> p.stages, p.smem_bytes
    (4, 84992)
"""

from __future__ import annotations

from functools import lru_cache

from tileprobe.predict import flashinfer_moe, sm90_fp8, sm120_nvfp4, vllm_moe
from tileprobe.predict._common import CannotPredict, Prediction, Unbuildable, engine_key, version_key

__all__ = ["CannotPredict", "Prediction", "Unbuildable", "FAMILIES", "predict", "smem_bytes", "stages", "fits",
           "rule_set"]

# family name -> rule module: VERSIONS (rule-set key -> verified releases) and
# predict(m, n, k, schedule, stages, epilogue, swap_ab, arch, version_key) -> Prediction. A module with its own
# EPILOGUES takes those instead of no-c/with-c; one with TAKES_DTYPES also gets dtypes= and cluster= keywords; one with
# ENGINES (engine release label -> (rule-set key, bundled CUTLASS tree hash)) is keyed by the engine release
# (tileprobe.predict._common.engine_key), not by the CUTLASS version alone.
FAMILIES = {m.FAMILY: m for m in (sm120_nvfp4, sm90_fp8, flashinfer_moe, vllm_moe)}
EPILOGUES = ("no-c", "with-c")


@lru_cache(maxsize=256)
def rule_set(family: str, cutlass_version: str, engine: str | None = None, cutlass_hash: str | None = None) -> str:
    """The rule-set key ('4.5', '4.2') that predict() would use; CannotPredict when there is none. For a family keyed
    by engine releases (ENGINES), `engine` ('flashinfer 0.7.4') must be one it was checked against and `cutlass_hash`
    (when given) the content hash of that release's bundled CUTLASS tree."""
    mod = FAMILIES.get(family)
    if mod is None:
        raise CannotPredict(f"no prediction rules for family {family!r}; known: {', '.join(FAMILIES)}")
    engines = getattr(mod, "ENGINES", None)
    if engines is not None:
        return engine_key(family, engine, cutlass_version, cutlass_hash, engines, mod.VERSIONS)
    return version_key(cutlass_version, mod.VERSIONS)


def predict(family: str, tile, schedule: str = "auto", stages: int = 0, epilogue: str = "no-c",
            swap_ab: bool = False, arch: str | None = None, cutlass_version: str = "4.5.0", *,
            dtypes: str | None = None, cluster=None, engine: str | None = None,
            cutlass_hash: str | None = None) -> Prediction:
    """Stages and SharedStorage bytes CUTLASS would give this config.

    tile: (M, N, K) in elements, or 'MxNxK'. stages: 0 = StageCountAutoCarveout, N = StageCount<N>.
    arch defaults to the family's first arch (sm_120a / sm_90a). dtypes ('nvfp4xnvfp4', 'mxfp8xmxfp4', 'fp8xfp8') and
    cluster ((M, N, 1)) are for flashinfer-moe (epilogues 'default' / 'finalize'); other families ignore them.
    engine and cutlass_hash key a family that mirrors an engine (flashinfer-moe: engine='flashinfer 0.7.4', the
    release whose bundled CUTLASS is compiled; cutlass_hash, when given, that tree's content hash as rows record it);
    other families ignore them. Raises CannotPredict (unknown family/version/engine release, bad argument) or
    Unbuildable (CUTLASS would not compile it).
    """
    key = rule_set(family, cutlass_version, engine, cutlass_hash)
    mod = FAMILIES[family]
    if isinstance(tile, str):
        try:
            m, n, k = (int(x) for x in tile.lower().split("x"))
        except ValueError:
            raise CannotPredict(f"malformed tile {tile!r}: expected MxNxK in elements") from None
    else:
        m, n, k = (int(x) for x in tile)
    if min(m, n, k) <= 0:
        raise CannotPredict(f"tile {m}x{n}x{k}: extents must be positive")
    epilogues = getattr(mod, "EPILOGUES", EPILOGUES)
    if epilogue == "no-c" and "no-c" not in epilogues:
        epilogue = epilogues[0]  # the signature's default: the family's plain epilogue
    if epilogue not in epilogues:
        raise CannotPredict(f"unknown epilogue {epilogue!r}; known: {', '.join(epilogues)}")
    if not isinstance(stages, int) or stages < 0:
        raise CannotPredict(f"stages must be 0 (auto) or a positive stage count, not {stages!r}")
    if getattr(mod, "TAKES_DTYPES", False):
        return mod.predict(m, n, k, schedule, stages, epilogue, bool(swap_ab), arch or mod.ARCHS[0], key,
                           dtypes=dtypes, cluster=cluster)
    return mod.predict(m, n, k, schedule, stages, epilogue, bool(swap_ab), arch or mod.ARCHS[0], key)


def smem_bytes(family: str, tile, schedule: str = "auto", **kw) -> int:
    """sizeof(GemmKernel::SharedStorage) for the config (see predict)."""
    return predict(family, tile, schedule, **kw).smem_bytes


def stages(family: str, tile, schedule: str = "auto", **kw) -> int:
    """The mainloop stage count for the config (see predict)."""
    return predict(family, tile, schedule, **kw).stages


def fits(family: str, tile, schedule: str = "auto", *, limit_bytes: int, **kw) -> bool:
    """Whether SharedStorage fits limit_bytes (101376 on SM120, 232448 on H100/H200). A config CUTLASS cannot
    build raises Unbuildable rather than answering False."""
    return predict(family, tile, schedule, **kw).smem_bytes <= limit_bytes
