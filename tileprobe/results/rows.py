"""The result row: its columns, its identity, and the single place where an outcome becomes a row.

Static and runtime paths both call `make_row`; nothing else builds rows. Every row has every column (None when not
known), so an older file that lacks a newer column still loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from tileprobe.families import Config, family
from tileprobe.targets import Target
from tileprobe.verdict import Verdict, evidence_for

COLUMNS = [
    "family", "target", "device_name", "cc", "gpu_index", "worker", "arch", "config", "tile", "tile_bytes_k",
    "schedule", "stages_configured", "epilogue", "swap_ab", "cluster", "dtypes", "tactic", "engine", "engine_hash",
    "stages", "smem_bytes", "smem_mainloop_bytes", "smem_epilogue_bytes", "smem_kernel_bytes", "smem_limit_bytes",
    "smem_limit_device_bytes", "cutlass_cap_bytes", "headroom_bytes", "predicted_stages", "predicted_smem_bytes",
    "prediction", "regs_per_thread", "spill_bytes", "threads_per_cta", "ctas_per_sm", "ctas_per_sm_smem",
    "ctas_per_sm_regs", "warps_per_sm",
    "verdict", "reason", "evidence", "launch_status", "launch_reason",
    "rel_err", "atol", "rtol", "tolerance", "checked_elements", "bad_elements", "bad_groups", "worst_group",
    "worst_ratio",
    "workload", "gemm", "batch", "routing", "experts_active", "problem", "problems_hash", "seed", "point_id",
    "us_median", "us_spread", "us_graph_median", "us_graph_spread", "launch_gap_us", "l2_bytes", "rotation_bytes",
    "tflops", "gbps", "pct_peak_bw", "pct_copy_bw", "pct_read_bw", "peer", "peer_us", "speedup",
    "cutlass_version", "cutlass_source", "cutlass_hash", "nvcc_version", "host_compiler", "driver",
    "compile_seconds", "compile_configs", "timestamp",
    # Triton families (triton-moe): the engine config entry's other fields, where it came from, and the compiler
    "quant", "experts", "ep", "gemm_n", "gemm_k", "top_k", "num_warps", "group_size_m", "config_source",
    "triton_version",
    # Triton families, for their tables (families.columns.TRITON_REPORT): the kernel and its file, the config's
    # BLOCK_SIZE_M/N/K, the range of M the engine gives it, and where it came from (origin user/shipped/default, the
    # file and its entry key, or the engine's default rule); for an autotuned launch, the configs the autotuner drops
    "kernel", "kernel_file", "block_m", "block_n", "block_k", "batch_range", "config_origin", "config_file",
    "config_key", "config_rule", "autotune_dropped",
    # compiled kernels on the model's path (tileprobe audit; family compiled-audit): the layer and phase it serves, the
    # library, and the three answers, each with the evidence word that says how it was reached
    "layer", "phase", "library", "arch_answer", "arch_evidence", "gate_answer", "gate_evidence", "bytes_evidence",
]
TOOLCHAIN_COLUMNS = ["cutlass_version", "cutlass_hash", "nvcc_version"]
# What identifies a row: the config, where it was judged, and the workload point (problem list hash and seed
# included, so merge/diff compare like with like; older rows without a hash fall back to the problem label).
KEY_COLUMNS = ("config", "target", "workload", "gemm", "batch", "routing", "problems_hash", "seed")
# A Triton row (one with a triton_version) is also identified by the compiler and the kernel source (engine_hash).
TRITON_KEY_COLUMNS = ("triton_version", "engine_hash")

RESERVED_SMEM_PER_BLOCK = 1024  # the driver's per-block reservation (opt-in = per-SM - 1 KiB)


def row_key(row: dict) -> str:
    vals = []
    for k in KEY_COLUMNS:
        v = row.get(k)
        if k == "problems_hash" and v in (None, ""):
            v = row.get("problem")
        vals.append("" if v is None else str(v))
    if row.get("triton_version") is not None:
        vals += [str(row.get(k) or "") for k in TRITON_KEY_COLUMNS]
    return "|".join(vals)


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class StaticInfo:
    stages: int | None = None
    smem_bytes: int | None = None
    smem_mainloop_bytes: int | None = None
    smem_epilogue_bytes: int | None = None
    cutlass_cap_bytes: int | None = None
    threads_per_cta: int | None = None
    min_blocks: int | None = None
    regs_per_thread: int | None = None
    spill_bytes: int | None = None
    compile_seconds: float | None = None  # this config's share: its build's seconds / compile_configs
    compile_configs: int | None = None  # configs built by that one build (a sizes unit, a harness batch; 1: alone)
    compiled: bool = False  # device code was built (ptxas ran): evidence `compiled` rather than `sized`
    predicted: bool = False  # the sizes are the model's (nothing compiled): evidence `predicted`


@dataclass
class Outcome:
    """What is known of one config (and, for runtime rows, one point): verdict, reason, sizes, build log."""
    config: Config
    verdict: Verdict
    reason: str
    info: StaticInfo = field(default_factory=StaticInfo)
    log: str = ""


def occupancy(info: StaticInfo, target: Target) -> dict:
    """CTAs per SM limited by shared memory, by registers and by threads; warps per SM."""
    out = {"ctas_per_sm_smem": None, "ctas_per_sm_regs": None, "ctas_per_sm": None, "warps_per_sm": None}
    if info.smem_bytes is None or info.threads_per_cta is None:
        return out
    if info.smem_bytes > target.smem_optin:
        out.update(ctas_per_sm_smem=0, ctas_per_sm=0, warps_per_sm=0)
        return out
    by_smem = target.smem_per_sm // (info.smem_bytes + RESERVED_SMEM_PER_BLOCK)
    by_threads = target.max_threads_per_sm // info.threads_per_cta
    limits = [by_smem, by_threads]
    warps = info.threads_per_cta // 32
    if info.regs_per_thread:
        regs_per_warp = -(-info.regs_per_thread * 32 // 256) * 256  # allocated per warp in units of 256
        by_regs = target.regs_per_sm // (regs_per_warp * warps)
        out["ctas_per_sm_regs"] = by_regs
        limits.append(by_regs)
    ctas = min(limits)
    out.update(ctas_per_sm_smem=by_smem, ctas_per_sm=ctas, warps_per_sm=ctas * warps)
    return out


def make_row(config: Config, target: Target, toolchain: dict, outcome: Outcome, runtime: dict | None = None,
             point: dict | None = None, extra: dict | None = None) -> dict:
    """The single place an outcome (static, and runtime if any) becomes a result row. `target` is what the row is
    judged against: the profile for static rows, the real device for runtime rows."""
    info = outcome.info
    fam = family(config.family)
    parts = [info.smem_mainloop_bytes, info.smem_epilogue_bytes]
    kernel_level = info.smem_bytes - sum(parts) if info.smem_bytes is not None and None not in parts else None
    headroom = target.smem_optin - info.smem_bytes if info.smem_bytes is not None else None
    row = {
        "target": target.name, "device_name": target.device_name, "cc": target.cc, "gpu_index": target.gpu_index,
        "config": config.key, **config.fields(), "schedule": fam.schedule_label(config.schedule),
        "tile_bytes_k": config.tile.bytes_k(fam.bits(config)),
        "stages": info.stages if info.stages is not None else config.stages_label,
        "smem_bytes": info.smem_bytes, "smem_mainloop_bytes": info.smem_mainloop_bytes,
        "smem_epilogue_bytes": info.smem_epilogue_bytes, "smem_kernel_bytes": kernel_level,
        "smem_limit_bytes": target.smem_optin, "cutlass_cap_bytes": info.cutlass_cap_bytes,
        "headroom_bytes": headroom, "regs_per_thread": info.regs_per_thread, "spill_bytes": info.spill_bytes,
        "threads_per_cta": info.threads_per_cta, **occupancy(info, target),
        "verdict": outcome.verdict.value, "reason": outcome.reason,
        "evidence": evidence_for(outcome.verdict, info.compiled, info.predicted).value,
        "driver": target.driver, "compile_seconds": info.compile_seconds,
        "compile_configs": info.compile_configs, "timestamp": now(), **toolchain,
    }
    if fam.engine is not None:
        row["engine"], row["engine_hash"] = fam.engine()
    if fam.row_fields is not None:
        row.update(fam.row_fields(config))
    for more in (runtime, point, extra):
        if more:
            row.update(more)
    return {c: row.get(c) for c in COLUMNS}  # every row has every column
