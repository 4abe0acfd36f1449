"""Timing policy: how many input sets rotate (sized from the device's L2), how a harness times, and what the
timings become (medians, spreads, launch gaps, bandwidth against the device's own references).

Method: each repeat times enough launches to fill about 10 ms (1 to 400; 3 timed launches estimate the kernel's time,
then up to 5 warm-up launches, fewer where they would pass 10 ms), once as plain back-to-back launches and once
replayed from a CUDA graph of the same launches. Repeats adapt to the measured spread under one rule (harness.cuh,
PROTOCOL.md): at least 3, then one more at a time until one more repeat, whatever it measured, could move the median
by at most 0.5% (half the larger gap beside the median of the sorted samples), at most 7; plain and graph samples
stop independently. `us_median` is the plain
launches' median (what an engine that launches kernels one by one sees); `us_graph_median` is the graph's, which
removes the CPU launch gaps; `launch_gap_us` is the difference. For kernels of a few µs the graph figure is the
kernel's own time; reports show both.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from tileprobe.backends.cutlass import bandwidth
from tileprobe.families import Config, family
from tileprobe.results import tolerance
from tileprobe.targets import Target
from tileprobe.workloads import Point

L2_SPAN = 4  # rotated inputs span at least 4x the L2, so no timed launch finds its data in cache
TARGET_MS = 10  # GPU time per timed repeat
MIN_REPEATS, MAX_REPEATS = 3, 7  # repeats: at least 3, at most 7 (the fixed count before the rule)
MEDIAN_TOL = 0.005  # stop once one more repeat could move the median by at most 0.5%


def set_bytes(point: Point, config: Config) -> float:
    fam = family(config.family)
    return point.bytes_moved(fam.bits(config), fam.wbits(config), fam.sf(config), config.epilogue == "with-c")


def rotation_sets(point: Point, config: Config, device: Target) -> int:
    """Input sets to rotate through: enough that they span L2_SPAN x the device's L2 (no cap)."""
    return max(1, math.ceil(L2_SPAN * device.l2_bytes / max(set_bytes(point, config), 1)))


def check_bound(config: Config, points: list[Point] | None) -> tolerance.Bound:
    """The element-wise check's bound for one harness process (tileprobe.results.tolerance): one --atol/--rtol for
    all its points, so the largest K among their problems (the loosest bound; K-independent for fp32 accumulation)."""
    k = max((pk for p in points or [] for _, _, pk in p.problems), default=0)
    return tolerance.for_config(config, k)


def harness_options(config: Config, seed: int, bound: tolerance.Bound | None = None) -> list[str]:
    b = bound or check_bound(config, [])
    return ["--seed", str(seed), "--atol", repr(b.atol), "--rtol", repr(b.rtol), "--warmup", "5",
            "--iters", "400", "--target-ms", str(TARGET_MS), "--repeats", str(MIN_REPEATS), "--max-repeats",
            str(MAX_REPEATS), "--median-tol", repr(MEDIAN_TOL)]


def point_timeout(base_s: float, points: list[Point], device: Target) -> float:
    """The per-point timeout: the user's base plus time for the plain fp32 reference, which does every MAC of the
    point's problems on the device (budgeted at 1 GFLOP/s per SM: a 48-SM GB10 gets ~2.6x an H200's allowance)."""
    flops = max((p.flops() for p in points), default=0.0)
    return base_s + flops / (max(device.sms, 1) * 1e9)


def harness_command(binary: Path, problems_file: Path, config: Config, seed: int, points: list | None = None,
                    config_index: int = 0) -> list[str]:
    """The harness's command line for `config`, config `config_index` of its binary (a host half may serve several)."""
    fam = family(config.family)
    extra = fam.harness_args(config, points or []) if fam.harness_args else []
    return [str(binary), "--config-index", str(config_index), "--problems", str(problems_file),
            *harness_options(config, seed, check_bound(config, points)), *extra]


def _stats(values) -> tuple[float | None, float | None]:
    us = [float(x) for x in values or [] if isinstance(x, (int, float)) and x > 0]
    if not us:
        return None, None
    return statistics.median(us), max(us) - min(us)


def timing_columns(data: dict, point: Point, config: Config, device: Target, refs: dict) -> dict:
    """Timing columns of one answer; `refs` holds the device's measured copy_gbps / read_gbps (may be empty)."""
    med, spread = _stats(data.get("us"))
    gmed, gspread = _stats(data.get("us_graph"))
    out = {"l2_bytes": data.get("l2_bytes"), "rotation_bytes": data.get("rotation_bytes")}
    if med is None:
        return out
    gbps = set_bytes(point, config) / (med * 1e-6) / 1e9
    copy, read = refs.get("copy_gbps"), refs.get("read_gbps")
    out.update({
        "us_median": round(med, 3), "us_spread": round(spread, 3),
        "us_graph_median": round(gmed, 3) if gmed is not None else None,
        "us_graph_spread": round(gspread, 3) if gspread is not None else None,
        "launch_gap_us": round(med - gmed, 3) if gmed is not None else None,
        "tflops": round(point.flops() / (med * 1e-6) / 1e12, 2), "gbps": round(gbps, 1),
        "pct_peak_bw": round(100 * gbps / device.peak_gbps, 1) if device.peak_gbps else None,
        "pct_copy_bw": round(100 * gbps / copy, 1) if copy else None,
        "pct_read_bw": round(100 * gbps / read, 1) if read else None,
    })
    return out


def measure_refs(gpu_index: int) -> dict:
    """The device's own reference bandwidths (tileprobe.backends.cutlass.bandwidth, through cuda-python in a child process; no
    torch): copy_gbps (bytes read + written by a device-to-device copy) and read_gbps (a read-only streaming kernel:
    a decode GEMM mostly reads, so reading is its honest roofline). Failures come back as `error`, never raised."""
    return bandwidth.measure(gpu_index)
