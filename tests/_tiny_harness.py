"""A tiny describe harness for tests whose subject is not CUTLASS (the build cache, Ray's sharding, kills and
resumes): the real nvcc builds it from TILEPROBE_HARNESS_DIR in a second or two instead of a CUTLASS parse, and it
prints a description of each config made up from its TP_CFG numbers (the sm120-nvfp4 / sm90-fp8 argument list), so
the rows differ per tile and a row from a stale or another entry would show. Its sizes are not CUTLASS's."""

from __future__ import annotations

from pathlib import Path

# The family's TP_CFG(idx, TM, TN, TK, Sched, Stages, Epi, Swap): sizes made up from the tile, as describe.cuh spells them.
TINY_DESCRIBE = r"""
#include <cstdio>
#ifndef TP_TINY_REFUSE_M
#define TP_TINY_REFUSE_M -1  // no tile M is refused
#endif
#define TP_CFG(idx, tm, tn, tk, sched, stages, epi, swap)                                                        \
  static_assert(tm != TP_TINY_REFUSE_M, "tiny harness: this tile M does not build");                           \
  std::printf("{\"index\": %d, \"stages\": 2, \"smem_bytes\": %d, \"smem_mainloop_bytes\": %d, "              \
              "\"smem_epilogue_bytes\": 1024, \"cutlass_cap_bytes\": 101376, \"max_threads\": 384, "          \
              "\"min_blocks\": 1, \"kernel_type\": \"tiny<%d,%d,%d>\"}\n",                                  \
              idx, 2 * (tm + tn) * tk / 2 + 1024, 2 * (tm + tn) * tk / 2, tm, tn, tk);
int main() {
#include "tp_configs.inc"
  return 0;
}
"""


def tiny_smem_bytes(tm: int, tn: int, tk: int) -> int:
    """What the tiny harness prints as smem_bytes for a tile (its own made-up rule, not CUTLASS's)."""
    return (tm + tn) * tk + 1024


# The runtime harness's two halves (run.cu, kernel.cu), for tests of a harness that does not build: each reads the
# same TP_CFG lines with the same refusal, and does nothing else (they build, but launch nothing).
TINY_RUNTIME_HALF = r"""
#ifndef TP_TINY_REFUSE_M
#define TP_TINY_REFUSE_M -1
#endif
#define TP_CFG(idx, tm, ...) static_assert(tm != TP_TINY_REFUSE_M, "tiny harness: this tile M does not build");
#define TP_CFG_ID(idx, name)
#include "tp_configs.inc"
"""


def write_tiny_harness(folder: Path, refuse_m: int | None = None, runtime: bool = False) -> Path:
    """The harness folder (for TILEPROBE_HARNESS_DIR): describe.cu, and with `runtime` run.cu and kernel.cu that
    only compile (TINY_RUNTIME_HALF). `refuse_m`: a tile M that does not compile (a static_assert in the config's
    own line, as CUTLASS refuses a tile), for tests of how a failed build is kept to its config."""
    folder.mkdir(parents=True, exist_ok=True)
    head = "" if refuse_m is None else f"#define TP_TINY_REFUSE_M {refuse_m}\n"
    (folder / "describe.cu").write_text(head + TINY_DESCRIBE)
    if runtime:
        (folder / "run.cu").write_text(head + TINY_RUNTIME_HALF + "int main() { return 0; }\n")
        (folder / "kernel.cu").write_text(head + TINY_RUNTIME_HALF)
    return folder
