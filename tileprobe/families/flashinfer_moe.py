"""Family flashinfer-moe: the MoE grouped-GEMM kernels FlashInfer builds (TensorRT-LLM's TMA warp-specialized MoE
launcher inside flashinfer-python), one config per engine tactic, both GEMMs, both swaps, every dtype pair the
dispatch admits. Tactics, pruning rules and dtype pairs are read from the installed flashinfer's sources
(tileprobe.engines.flashinfer); the kernel types are composed in cutlass_harness/families/flashinfer_moe.cuh and are
the engine's own (tests/engines/test_engine_flashinfer.py compares mangled kernel symbols with flashinfer's generator's).

Which flashinfer: the installed one, or TILEPROBE_FLASHINFER_DIR (the CLI's --flashinfer-dir) for another tree.
The kernels always compile against that flashinfer's own bundled CUTLASS, never another one.
"""

from __future__ import annotations

import os

from tileprobe.engines import flashinfer as engine
from tileprobe.dtypes import ACT_BITS, SF_VECTOR, WEIGHT_BITS
from tileprobe.errors import UsageError
from tileprobe.families.base import Accumulation, Config, Family, Tile
from tileprobe.workloads import PRESETS

DTYPES = {"nvfp4xnvfp4": 0, "mxfp8xmxfp4": 1, "fp8xfp8": 2}
EPILOGUE_IDS = {"default": 0, "finalize": 1}
ARCH_NUM = {"sm_120a": 120, "sm_121a": 120, "sm_90a": 90}  # FlashInfer builds SM121 from the Sm120 tag too


def engine_dir() -> str | None:
    return os.environ.get("TILEPROBE_FLASHINFER_DIR") or None


def tree() -> engine.FlashinferTree:
    return engine.find_flashinfer(engine_dir())


def _rules(tile: Tile, schedule: str, cutlass_version: str | None) -> None:
    """Per-tile rules are the engine's (applied when expanding); nothing more is pruned here."""


def _render(cfg: Config) -> list[int]:
    dt = cfg.get("dtypes") or "nvfp4xnvfp4"
    k_bytes = cfg.tile.k * ACT_BITS[dt] // 8
    return [cfg.tile.m, cfg.tile.n, k_bytes, DTYPES[dt], EPILOGUE_IDS[cfg.epilogue], int(cfg.swap_ab),
            ARCH_NUM[cfg.arch], cfg.cluster[0], cfg.cluster[1], 0]


def _include_dirs() -> list[str]:
    t = tree()
    return [str(d) for d in (*t.cccl_include_dirs, *t.include_dirs)]


def expand(arch: str, tiles: list[str] | None, epilogues: list[str] | None, swap_ab: list[bool] | None,
           dtypes: list[str] | None = None) -> list[Config]:
    """Every engine tactic for `arch` x epilogue x swap x dtype pair; pruned tactics stay, `unsupported` with the
    engine's reason. `tiles` filters by engine name (CtaShape128x256x64B) or by the K-bytes spelling (128x256x64B)."""
    t = tree()
    sm = ARCH_NUM[arch]
    combos = engine.dispatch_combos(t).get(sm, [])
    names = {v: k for k, v in DTYPES.items()}
    pairs = [names[d] for d in dict.fromkeys(d for d, _ in combos)]
    for d in dtypes or ():
        if d not in DTYPES:
            raise UsageError(f"unknown dtypes {d!r}; known: {', '.join(DTYPES)}")
    missing = [d for d in dtypes or () if d not in pairs]
    if missing:
        raise UsageError(f"flashinfer {t.version} dispatches no {', '.join(missing)} on {arch} (it takes "
                         f"{', '.join(pairs) or 'none'} there)")
    pairs = [p for p in pairs if not dtypes or p in dtypes]
    epis = epilogues or list(EPILOGUE_IDS)
    for e in epis:
        if e not in EPILOGUE_IDS:
            raise UsageError(f"unknown epilogue {e!r} for flashinfer-moe; known: {', '.join(EPILOGUE_IDS)}")
    wanted = {w.strip().removeprefix("CtaShape").upper() for spec in tiles or () for w in spec.split(",") if w.strip()}
    out: list[Config] = []
    for dt in pairs:
        if sm == 120:
            candidates = engine.sm120_candidates(t)
            pruned = {r.tactic: r.reason for r in engine.sm120_pruned(DTYPES[dt], t)}
        else:
            candidates, pruned = engine.sm90_tactics(t), {}
        dispatch = set(engine.dispatch_tiles(sm, t))
        for tac in candidates:
            if wanted and tac.name.removeprefix("CtaShape").upper() not in wanted:
                continue
            tile = Tile(tac.tile_m, tac.tile_n, tac.k_elements(ACT_BITS[dt]))
            for epi in epis:
                if (DTYPES[dt], epi) not in combos:
                    continue
                for swap in swap_ab or [False, True]:
                    reason = pruned.get(tac.name)
                    if reason is None and tac.name not in dispatch:
                        reason = f"flashinfer has no SHAPE_CASE({sm}, ...) for {tac.name} in its MoE dispatch"
                    out.append(Config("flashinfer-moe", tile, "auto" if sm == 120 else "cooperative", 0, epi, swap,
                                      arch, (tac.cluster_m, tac.cluster_n, 1),
                                      (("dtypes", dt), ("tactic", tac.name)), reason))
    if wanted and not out:
        raise UsageError(f"no flashinfer {t.version} tactic matches {', '.join(tiles or [])} on {arch}")
    return out


def _runs_point(cfg: Config, point) -> bool:
    """gemm1 (default epilogue) runs the gate_up points, gemm2 (finalize) the down points; --shape points run both."""
    if point.gemm == "shape":
        return True
    return (cfg.epilogue == "finalize") == (point.gemm == "down")


def _harness_args(cfg: Config, points: list) -> list[str]:
    """The finalize harness routes expanded rows to tokens with the model's top-k (2 for --shape points)."""
    ks = [PRESETS[p.workload].top_k for p in points if p.workload in PRESETS]
    return ["--topk", str(max(ks) if ks else 2)] if cfg.epilogue == "finalize" else []


def _checked_count(cfg: Config, point, data: dict) -> int | None:
    """gemm1: every group's M x N; finalize: the routed output, tokens x hidden (tokens as the harness routed them;
    hidden is N of the point's problems, in the engine's unswapped space)."""
    if cfg.epilogue != "finalize":
        return sum(m * n for m, n, _ in point.problems)
    tokens = data.get("tokens")
    return tokens * point.problems[0][1] if isinstance(tokens, int) else None


# The SM120 variants whose check is verified: the harness's data and fp32 reference (each operand as its element
# type, scale factors in the collective's SF layout, the finalize routed sum) equal an independent numpy decode on the
# H200 (tests/families/test_gpu_flashinfer_reference.py; results/h200/flashinfer-moe-reference). Any other SM120 variant is
# refused at launch rather than risk an `incorrect` that blames a correct engine kernel.
SM120_CHECK_VERIFIED = frozenset((d, e, s) for d in ("nvfp4xnvfp4", "mxfp8xmxfp4") for e in EPILOGUE_IDS
                                 for s in (False, True))


def _launch_refusal(cfg: Config) -> str | None:
    if ARCH_NUM[cfg.arch] != 120 or (cfg.get("dtypes"), cfg.epilogue, cfg.swap_ab) in SM120_CHECK_VERIFIED:
        return None
    return (f"tileprobe's check of flashinfer-moe {cfg.get('dtypes')} {cfg.epilogue} (swap-AB "
            f"{'on' if cfg.swap_ab else 'off'}) on {cfg.arch} is not verified against an independent decode, so a "
            "launch could blame a correct engine kernel; sizes and builds stand")


def _accumulation(cfg: Config, cc: int | None) -> Accumulation:
    """fp8 x fp8 on sm_90: KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum (flashinfer_moe.cuh's Hopper
    branch, as the launcher's); the SM120 block-scaled kernels accumulate in fp32."""
    if cfg.arch == "sm_90a" and (cfg.get("dtypes") or "nvfp4xnvfp4") == "fp8xfp8":
        return Accumulation("fp8-reduced", None, "CUTLASS sm90 FP8 fast accumulation (no fp32 promotion over K)")
    return Accumulation()


FAMILY = Family(
    name="flashinfer-moe",
    kernel_template="FlashinferMoeKernel",
    header="flashinfer_moe.cuh",
    archs=("sm_120a", "sm_121a", "sm_90a"),
    ab_bits=4,  # NVFP4 activations; mxfp8/fp8 configs spell K bytes with 8 (see operand_bits)
    sf_vector=16,
    schedules=("auto", "cooperative"),
    default_schedules=("auto",),
    default_tiles=(),
    mma_k=1,
    # As sm90_fp8 (FP8 fast accumulation, atol in units of the group's reference RMS), plus the finalize epilogue:
    # each expert's partial is rounded to bf16 and the top-k partials of a token are summed with bf16 atomic adds,
    # each add a bf16 rounding (2^-9 relative), so up to k roundings: rtol 3e-2, atol 5e-2.
    atol=5e-2,
    rtol=3e-2,
    description="FlashInfer's CUTLASS fused-MoE grouped GEMMs (TensorRT-LLM TMA WS launcher), engine tactics",
    rules=_rules,
    extra_fields=("dtypes", "tactic"),
    epilogues=tuple(EPILOGUE_IDS),
    render=_render,
    include_dirs=_include_dirs,
    expand=expand,
    operand_bits=lambda cfg: ACT_BITS[cfg.get("dtypes") or "nvfp4xnvfp4"],
    weight_bits=lambda cfg: WEIGHT_BITS[cfg.get("dtypes") or "nvfp4xnvfp4"],
    scale_vector=lambda cfg: SF_VECTOR[cfg.get("dtypes") or "nvfp4xnvfp4"],
    engine=lambda: (tree().label(), tree().tree_hash),
    cutlass_root=lambda: str(tree().root / "data" / "cutlass"),
    runs_point=_runs_point,
    harness_args=_harness_args,
    launch_refusal=_launch_refusal,
    checked_count=_checked_count,
    explicit_stages=False,  # the launcher's StageCountAutoCarveout only: a "2-stage" build would be the same kernel
    accumulation=_accumulation,
)
