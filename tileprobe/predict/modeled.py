"""The prediction model (tileprobe.predict) applied to configs: predicted columns beside the measured ones, the
model's own verdict for --predict-only, and which configs a large sweep need not compile.

`prediction` column: 'exact' (predicted stages and SharedStorage equal the sizes measured from the compiled types),
'MODEL ERROR: ...' (they differ: a bug in the model, flagged in rows and reports), 'not measured' (nothing was
measured to compare with: --predict-only, a config the model skipped, a build that failed; '; model: unbuildable ...'
follows where the model says CUTLASS rejects it), or 'cannot predict: ...' (no verified rules for this family or
CUTLASS version, or, for a family that mirrors an engine (flashinfer-moe), for this engine release and its bundled
CUTLASS tree; never a guess). A row's own sizes are never compared with themselves: when they are the model's
(evidence `predicted`), the row is 'not measured'.
"""

from __future__ import annotations

from dataclasses import dataclass

from tileprobe import predict
from tileprobe.errors import OutOfResources
from tileprobe.families import Config, family
from tileprobe.results.rows import Outcome, StaticInfo
from tileprobe.targets import Target
from tileprobe.backends.cutlass.toolchain import CutlassTree
from tileprobe.verdict import Verdict


NOT_MEASURED = "not measured"


@dataclass
class Modeled:
    stages: int | None  # None when the model has no number
    smem_bytes: int | None
    status: str  # 'predicted', 'unbuildable: ...', 'cannot predict: ...'
    prediction: predict.Prediction | None = None
    unbuildable: bool = False


def tree_keys(cfg: Config, cutlass: CutlassTree | str | None) -> dict:
    """What a prediction for cfg is keyed by: the CUTLASS tree compiled (its version and, given a CutlassTree, its
    content hash) and, for a family that mirrors an engine, the engine release whose tree that is (the family's
    engine label, as its rows carry it; else the config's own `engine` field)."""
    version, tree_hash = (cutlass.version, cutlass.tree_hash) if isinstance(cutlass, CutlassTree) else (cutlass, None)
    fam = family(cfg.family)
    engine = fam.engine()[0] if fam.engine is not None else cfg.get("engine")
    return {"cutlass_version": version or "", "engine": engine, "cutlass_hash": tree_hash}


def model(cfg: Config, cutlass: CutlassTree | str | None) -> Modeled:
    """cutlass: the tree the config compiles against (tileprobe.backends.cutlass.toolchain.family_cutlass), or a CUTLASS version."""
    if cfg.family not in predict.FAMILIES:
        return Modeled(None, None, f"cannot predict: no rules for family {cfg.family}")
    try:
        p = predict.predict(cfg.family, (cfg.tile.m, cfg.tile.n, cfg.tile.k), cfg.schedule, cfg.stages, cfg.epilogue,
                            cfg.swap_ab, cfg.arch, dtypes=cfg.get("dtypes"), cluster=cfg.cluster,
                            **tree_keys(cfg, cutlass))  # dtypes/cluster/engine: used by flashinfer-moe only
    except predict.Unbuildable as exc:
        two = exc.at_two_stages
        return Modeled(2 if two else None, two.smem_bytes if two else None, f"unbuildable ({exc.kind}): {exc.reason}",
                       two, True)
    except predict.CannotPredict as exc:
        return Modeled(None, None, f"cannot predict: {exc}")
    return Modeled(p.stages, p.smem_bytes, "predicted", p)


def columns(cfg: Config, cutlass: CutlassTree | str | None, info: StaticInfo) -> dict:
    """predicted_stages, predicted_smem_bytes and the `prediction` status against what was measured."""
    m = model(cfg, cutlass)
    out = {"predicted_stages": m.stages, "predicted_smem_bytes": m.smem_bytes, "prediction": m.status}
    if m.status.startswith("cannot"):
        return out
    if info.predicted or info.smem_bytes is None or m.smem_bytes is None:
        out["prediction"] = NOT_MEASURED if m.status == "predicted" else f"{NOT_MEASURED}; model: {m.status}"
        return out
    if (m.stages, m.smem_bytes) == (info.stages, info.smem_bytes):
        out["prediction"] = "exact" if not m.unbuildable else f"exact (at 2 stages); {m.status}"
    else:
        out["prediction"] = (f"MODEL ERROR: predicted {m.stages} stages / {m.smem_bytes} B, measured {info.stages} / "
                             f"{info.smem_bytes} B")
    return out


def outcome(cfg: Config, target: Target, cutlass: CutlassTree | str | None) -> Outcome | None:
    """The model's verdict for a config, not compiled (evidence `predicted`); None when it cannot predict."""
    if cfg.unsupported_reason:
        return Outcome(cfg, Verdict.UNSUPPORTED, cfg.unsupported_reason)
    m = model(cfg, cutlass)
    if m.status.startswith("cannot"):
        return None
    if m.smem_bytes is None:  # CUTLASS rejects the tile itself (a builder static_assert): nothing to size
        return Outcome(cfg, Verdict.UNSUPPORTED, f"predicted, not compiled: {m.status}")
    p = m.prediction
    info = StaticInfo(stages=m.stages, smem_bytes=m.smem_bytes, predicted=True,
                      smem_mainloop_bytes=p.smem_mainloop_bytes if p else None,
                      smem_epilogue_bytes=p.smem_epilogue_bytes if p else None)
    head = target.smem_optin - m.smem_bytes
    if m.unbuildable:
        why = m.status.split(": ", 1)[-1]
        return Outcome(cfg, Verdict.SMEM_OVER_LIMIT, f"predicted, not compiled: {why}; with 2 stages "
                       f"{OutOfResources('SharedStorage', m.smem_bytes, target.smem_optin)}"
                       if head < 0 else f"predicted, not compiled: {why}", info)
    if head < 0:
        return Outcome(cfg, Verdict.SMEM_OVER_LIMIT, f"predicted, not compiled: "
                       f"{OutOfResources('SharedStorage', m.smem_bytes, target.smem_optin)} ({m.stages} stages)", info)
    return Outcome(cfg, Verdict.FITS, f"predicted, not compiled: SharedStorage {m.smem_bytes} B <= opt-in "
                   f"{target.smem_optin} B, headroom {head} B ({m.stages} stages)", info)
