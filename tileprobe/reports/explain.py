"""`tileprobe explain`: one config's shared-memory budget in words and bytes, and what would fit."""

from __future__ import annotations

from dataclasses import replace

from tileprobe.predict import modeled
from tileprobe.errors import UsageError
from tileprobe.families import arch_for, expand_configs, family, family_for_cc
from tileprobe.backends.cutlass.static_probe import probe_static
from tileprobe.sweep import make_toolchain
from tileprobe.targets import resolve_target
from tileprobe.backends.cutlass.toolchain import family_cutlass, find_cutlass
from tileprobe.verdict import Verdict


def explain(tile: str, family_name: str | None, target_name: str | None, schedule: str, epilogue: str, stages: int,
            cutlass_dir: str | None, nvcc: str | None, cache_dir: str | None, predict_only: bool = False) -> str:
    target, _ = resolve_target(target_name)
    fam = family(family_name) if family_name else family_for_cc(target.cc)
    arch = arch_for(fam, target.cc)
    if arch is None:
        raise UsageError(f"{fam.name} builds {', '.join(fam.archs)} binaries; none runs on {target.name} "
                         f"(sm_{target.cc_int}): unsupported")
    if fam.expand is not None:
        return explain_tactic(fam, arch, target, tile, epilogue, predict_only, cutlass_dir, nvcc, cache_dir)
    if predict_only:
        cutlass = find_cutlass(cutlass_dir)
        (cfg,) = expand_configs(fam, arch, [tile], [schedule], [stages], [epilogue], [False],
                                cutlass_version=cutlass.version)
        if cfg.unsupported_reason:
            raise UsageError(f"{cfg.tile} {schedule} on {fam.name}: unsupported: {cfg.unsupported_reason}")
        return explain_from_model(cfg, target, cutlass)
    tc = make_toolchain(cutlass_dir, nvcc, cache_dir)
    (cfg,) = expand_configs(fam, arch, [tile], [schedule], [stages], [epilogue], [False],
                            cutlass_version=tc.cutlass.version)
    if cfg.unsupported_reason:
        raise UsageError(f"{cfg.tile} {schedule} on {fam.name}: unsupported: {cfg.unsupported_reason}")
    # The asked config plus two explicit stage counts (to measure bytes per stage) and K halved.
    probes = [cfg, replace(cfg, stages=2), replace(cfg, stages=3)]
    half_k = cfg.tile.k // 2
    if half_k >= fam.mma_k and half_k % fam.mma_k == 0:
        probes.append(replace(cfg, tile=replace(cfg.tile, k=half_k), stages=0))
    out = probe_static(probes, target, tc.cutlass, tc.nvcc, tc.cache, jobs=1, timeout_s=1200)
    main, s2, s3 = out[0], out[1], out[2]
    if main.info.smem_bytes is None:
        return f"{cfg.name}: {main.verdict.value}: {main.reason}"
    info = main.info
    lines = [f"{cfg.tile} ({cfg.tile.bytes_k(fam.ab_bits)}), {schedule}, epilogue {epilogue}, stages "
             f"{cfg.stages_label} on {target.name} ({target.device_name}, opt-in limit {target.smem_optin} B):"]
    other = info.smem_bytes - (info.smem_mainloop_bytes or 0) - (info.smem_epilogue_bytes or 0)
    lines.append(f"  SharedStorage {info.smem_bytes} B = mainloop {info.smem_mainloop_bytes} B "
                 f"({info.stages} stages) + epilogue {info.smem_epilogue_bytes} B + {other} B of kernel-level "
                 f"pipelines, tensor maps and alignment padding")
    verdict = "fits" if main.verdict is Verdict.FITS else "does NOT fit"
    lines.append(f"  {verdict}: {main.reason}")
    if s2.info.smem_bytes is not None and s3.info.smem_bytes is not None:
        per_stage = s3.info.smem_bytes - s2.info.smem_bytes
        fixed = s2.info.smem_bytes - 2 * per_stage
        max_stages = (target.smem_optin - fixed) // per_stage if per_stage > 0 else None
        lines.append(f"  one pipeline stage costs {per_stage} B (A + B + scale-factor tiles); the rest is {fixed} B")
        if max_stages is not None and max_stages >= 1:
            lines.append(f"  at most {max_stages} stages fit under {target.smem_optin} B "
                         f"({fixed + max_stages * per_stage} B)")
        else:
            lines.append("  not even one stage fits at this K")
    if len(out) > 3:
        hk = out[3]
        if hk.info.smem_bytes is not None:
            lines.append(f"  with K={half_k} ({hk.config.tile.bytes_k(fam.ab_bits)}): {hk.info.stages} stages, "
                         f"SharedStorage {hk.info.smem_bytes} B -> {hk.verdict.value}")
    lines.append(f"  evidence: sized (kernel types instantiated for {arch}, sizes read); not launched")
    return "\n".join(lines)


def explain_tactic(fam, arch: str, target, tactic: str, epilogue: str, predict_only: bool, cutlass_dir, nvcc,
                   cache_dir) -> str:
    """An engine tactic (flashinfer-moe): every variant of it — each GEMM's epilogue, swap off/on, each dtype pair —
    with mainloop / epilogue / kernel-level bytes and headroom, so the variants that fit stand next to the one asked
    about. Sizes from a compile (sized), or from the model with --predict-only."""
    cfgs = [c for c in fam.expand(arch, [tactic], None, None, None)]
    if not cfgs:
        raise UsageError(f"no {fam.name} tactic {tactic!r} on {arch}")
    if fam.cutlass_root is not None and cutlass_dir:
        raise UsageError(f"{fam.name} compiles against its engine's own CUTLASS; --cutlass-dir does not apply "
                         "(point --flashinfer-dir at another flashinfer instead)")
    cutlass = family_cutlass(fam, cutlass_dir)  # an engine family: its own bundled CUTLASS, not TILEPROBE_CUTLASS_DIR
    if predict_only:
        outs = [modeled.outcome(c, target, cutlass) for c in cfgs]
        if any(o is None for o in outs):
            raise UsageError(f"{fam.name}: {modeled.model(cfgs[0], cutlass).status}")
        how = (f"predicted (tileprobe's model of CUTLASS {cutlass.version}, {cutlass.source}, tree "
               f"{cutlass.tree_hash}; nothing compiled)")
    else:
        tc = make_toolchain(cutlass_dir, nvcc, cache_dir, fam)
        outs = probe_static(cfgs, target, tc.cutlass, tc.nvcc, tc.cache, jobs=2, timeout_s=1200)
        how = f"sized (kernel types instantiated for {arch}, sizes read); not launched"
    lines = [f"{fam.name} tactic {cfgs[0].get('tactic')} on {target.name} (opt-in limit {target.smem_optin} B):"]
    for c, o in zip(cfgs, outs):
        i = o.info
        gemm = "gemm2 (finalize)" if c.epilogue == "finalize" else "gemm1 (default)"
        mark = "  <-" if c.epilogue == epilogue else ""
        if i.smem_bytes is None:
            lines.append(f"  {c.get('dtypes')} {gemm} swap {'on ' if c.swap_ab else 'off'}: {o.verdict.value}: "
                         f"{o.reason[:120]}{mark}")
            continue
        rest = i.smem_bytes - (i.smem_mainloop_bytes or 0) - (i.smem_epilogue_bytes or 0)
        head = target.smem_optin - i.smem_bytes
        lines.append(f"  {c.get('dtypes')} {gemm} swap {'on ' if c.swap_ab else 'off'}: {i.smem_bytes} B = mainloop "
                     f"{i.smem_mainloop_bytes} ({i.stages} stages) + epilogue {i.smem_epilogue_bytes} + kernel-level "
                     f"{rest} -> {'fits, ' + str(head) + ' B spare' if head >= 0 else 'OVER by ' + str(-head) + ' B'}"
                     f"{mark}")
        if head < 0 and i.stages:
            lines.append(_fewer_stages(c, i.stages, target, cutlass))
    lines.append(f"  evidence: {how}")
    return "\n".join(lines)


def _fewer_stages(cfg, stages: int, target, cutlass) -> str:
    """The most stages under `stages` that would fit, from tileprobe's model (the engine's launcher always takes
    StageCountAutoCarveout's count, so no engine setting selects it): the stage answer for an over-limit tactic."""
    for n in range(stages - 1, 0, -1):
        o = modeled.outcome(replace(cfg, stages=n), target, cutlass)
        if o is not None and o.info.smem_bytes is not None and o.info.smem_bytes <= target.smem_optin:
            return (f"      {n} stage(s) would fit: {o.info.smem_bytes} B = mainloop {o.info.smem_mainloop_bytes} + "
                    f"epilogue {o.info.smem_epilogue_bytes} + kernel-level "
                    f"{o.info.smem_bytes - o.info.smem_mainloop_bytes - o.info.smem_epilogue_bytes}, "
                    f"{target.smem_optin - o.info.smem_bytes} B spare (predicted by tileprobe's model; the engine's "
                    f"carveout picks {stages} and offers no stage setting)")
    return f"      no stage count from 1 to {stages - 1} fits (tileprobe's model)"


def explain_from_model(cfg, target, cutlass) -> str:
    """The same budget from tileprobe's model of the CUTLASS builders: instant, nothing compiled, and said so.
    cutlass: the CutlassTree the config would compile against."""
    fam = family(cfg.family)
    m = modeled.model(cfg, cutlass)
    head = f"{cfg.tile} ({cfg.tile.bytes_k(fam.ab_bits)}), {cfg.schedule}, epilogue {cfg.epilogue}, stages " \
           f"{cfg.stages_label} on {target.name} (opt-in limit {target.smem_optin} B), predicted for CUTLASS " \
           f"{cutlass.version}:"
    if m.prediction is None:
        raise UsageError(f"{cfg.name}: {m.status}")
    p = m.prediction
    lines = [head]
    if m.unbuildable:
        lines.append(f"  CUTLASS rejects it: {m.status}; with 2 stages:")
    lines.append(f"  SharedStorage {p.smem_bytes} B = mainloop {p.smem_mainloop_bytes} B ({p.stages} stages) + "
                 f"epilogue {p.smem_epilogue_bytes} B + {p.kernel_level_bytes} B kernel-level (pipelines, "
                 f"scheduler, tensor maps, padding)")
    if p.stage_bytes:
        lines.append(f"  the builder charges {p.stage_bytes} B per stage against {p.capacity_bytes} B minus the "
                     f"epilogue carveout {p.carveout_bytes} B")
    over = p.smem_bytes - target.smem_optin
    lines.append(f"  {'does NOT fit: over by ' + str(over) + ' B' if over > 0 else 'fits: headroom ' + str(-over) + ' B'}")
    biggest = sorted(p.parts.items(), key=lambda kv: -kv[1])[:5]
    lines.append("  largest parts: " + ", ".join(f"{k} {v} B" for k, v in biggest))
    lines.append("  evidence: predicted (tileprobe's model of the CUTLASS builders; nothing compiled)")
    return "\n".join(lines)
