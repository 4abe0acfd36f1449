"""The tactic IDs tileprobe writes into blocklists are FlashInfer's own: proven by compiling FlashInfer's
enumeration (CutlassMoeFCRunner::getTactics, MoeGemmRunner::getConfigs, get_candidate_configs_sm120) on the host
with nvcc and comparing the whole ID -> (GEMM, tile, epilogue fusion, swap, dtypes) map, for SM120 and SM121,
finalize fusion on and off, both dtype pairs."""

from __future__ import annotations

import re
import sys
import time

import pytest

from tileprobe.engines import flashinfer as ef
from tileprobe.engines import flashinfer_native_ids as native
from tileprobe.engines import flashinfer_tactic_ids as tid
from tileprobe.errors import CompileError, UsageError


def _installed() -> ef.FlashinferTree:
    try:
        return ef.find_flashinfer()
    except UsageError as exc:
        pytest.skip(str(exc))


def test_unknown_pair_and_arch_are_refused():
    with pytest.raises(UsageError, match="SM120"):
        tid.tactic_ids("nvfp4xnvfp4", True, "sm_90a")
    with pytest.raises(UsageError, match="fp8xfp8"):
        tid.tactic_ids("fp8xfp8", True)


@pytest.mark.nvcc
def test_whole_map_equals_flashinfers_own_enumeration(toolchain):
    """FlashInfer's enumeration is built with the real nvcc through native_tactics_cached and the session's build
    cache: the same content-keyed build (flashinfer tree, nvcc) export --check runs (tests/engines/test_blocklist.py
    builds it first in a full run), compiled at most once per session."""
    tree = _installed()
    t0 = time.monotonic()
    lines = native.native_tactics_cached(tree, toolchain.nvcc, toolchain.cache)
    print(f"flashinfer {tree.version}: {len(lines)} tactic lines from its own getTactics in "
          f"{time.monotonic() - t0:.0f} s")
    # Everything FlashInfer numbers on SM120 is a TMA warp-specialized, cluster 1x1x1, AUTO-schedule config: the
    # fields tileprobe's map does not carry are constant, so (GEMM, tile, fusion, swap, dtypes) decides the kernel.
    assert {(n.tma_ws, n.cluster, n.mainloop, n.epilogue_schedule) for n in lines} == {(True, "1x1x1", "auto", 0)}
    # The runner types the binding builds for the two SM120 pairs: bf16 and fp16 output, bf16 or FP4 input.
    assert {n.dtypes for n in lines} == {"nvfp4xnvfp4", "nvfp4xnvfp4-prequant", "nvfp4xnvfp4-f16out", "mxfp8xmxfp4",
                                         "mxfp8xmxfp4-f16out"}
    compared = 0
    for sm, arch in ((120, "sm_120a"), (121, "sm_121a")):
        for fin in (True, False):
            for runner in sorted({n.dtypes for n in lines}):
                pair = runner.split("-")[0]  # nvfp4xnvfp4-prequant / -f16out: other runner types of one pair
                theirs = {n.id: (n.gemm, n.tile, n.epilogue, n.swap_ab, pair)
                          for n in lines if n.dtypes == runner and n.sm == sm and n.finalize == fin}
                ours = {t.id: t.key() for t in tid.tactic_ids(pair, fin, arch)}
                assert theirs, f"no native lines for {runner} sm{sm} finalize={fin}"
                assert ours == theirs, f"{runner} sm{sm} finalize={fin}"
                compared += len(ours)
    assert compared == len(lines)
    # The comparison every export, --check and flashinfer-ids-diff runs when nvcc is there.
    assert native.mismatches(lines, tid.tactic_ids) == []
    # The comparison sees order: the same variants numbered with gemm2's swap copies before its FINALIZE copies
    # (a plausible misreading of getTmaWarpSpecializedConfigs) must not pass.
    ids = tid.tactic_ids("nvfp4xnvfp4", True)
    g2 = [t for t in ids if t.gemm == "gemm2"]
    misread = sorted(g2, key=lambda t: (t.epilogue == "finalize", t.swap_ab, t.id))
    start = g2[0].id
    theirs = {n.id: (n.gemm, n.tile, n.epilogue, n.swap_ab, "nvfp4xnvfp4") for n in lines
              if n.dtypes == "nvfp4xnvfp4" and n.sm == 120 and n.finalize and n.gemm == "gemm2"}
    assert {start + i: t.key() for i, t in enumerate(misread)} != theirs
    assert native.mismatches(lines, lambda d, f, a: [t for t in tid.tactic_ids(d, f, a) if t.gemm == "gemm1"])


def test_each_source_is_compiled_with_the_flags_flashinfers_jit_gives_it(tmp_path):
    """The enumeration's sources get the flags FlashInfer's JIT gives them, read from the installed flashinfer's own
    jit/core.py (gen_jit_spec's C++ `cflags`) and jit/fused_moe.py (the SM120 module's nvcc -D flags): the driver, a
    CUDA source like the module's binding, gets the module's -D flags and its arch; each .cpp gets the JIT's C++ flags
    and none of the module's -D flags, and is not compiled as CUDA."""
    tree = _installed()
    core = tree.path(ef.JIT_FUSED_MOE).with_name("core.py").read_text()
    spec = core[core.index("def gen_jit_spec("):]
    cxx = re.findall(r'"(-[^"]+)"', re.search(r"\bcflags = \[(.*?)\]", spec).group(1))  # cflags = ["-Wno-switch-bool"]
    cxx += ["-std=c++17"] + re.findall(r'"(-[^"]+)"', re.search(r'\bcflags \+= \[("-DNDEBUG".*?)\]', spec).group(1))
    module = [f for f in native.module_flags(tree) if f.startswith("-D") and f != "-DNDEBUG"]
    assert "-DENABLE_FP4" in module
    compiles, link = native.compile_commands(tree, "nvcc", tmp_path)
    assert len(compiles) == 1 + len(native.LINKED) and link[-1] == str(tmp_path / "flashinfer_moe_tactics")
    driver, *cpps = compiles
    assert driver[driver.index("-c") + 1].endswith(native.DRIVER_NAME)
    assert set(module) <= set(driver) and "-gencode=arch=compute_120a,code=sm_120a" in driver
    for cmd, rel in zip(cpps, native.LINKED):
        src = cmd[cmd.index("-c") + 1]
        assert src == str(tree.path(rel)) and src.endswith(".cpp")
        flags = set(cmd) | {f for a in cmd if a.startswith("-Xcompiler=") for f in a.split("=", 1)[1].split(",")}
        assert set(cxx) <= flags, (rel, sorted(set(cxx) - flags))
        assert not set(module) & flags and "-x" not in cmd and not any(a.startswith("-gencode") for a in cmd), rel


def test_the_first_failing_source_stops_the_others(tmp_path, rng):
    """The enumeration's compiles run at once; the first to fail stops the rest, their own children included (a tree
    the driver cannot compile from costs no further compile), and its output is the error's log. Real processes:
    one that fails after a moment, and one whose child would write a file after three seconds."""
    code = rng.randrange(1, 100)
    late = tmp_path / "late"
    fail = [sys.executable, "-c", f"import sys, time; time.sleep(0.3); print('broken header'); sys.exit({code})"]
    slow = [sys.executable, "-c", "import subprocess, sys; subprocess.run([sys.executable, '-c', "
            f"\"import time, pathlib; time.sleep(3); pathlib.Path(r'{late}').write_text('x')\"])"]
    start = time.monotonic()
    with pytest.raises(CompileError, match="failed") as err:
        native._run_all(rng.sample([fail, slow], 2), tmp_path, 60)
    assert "broken header" in err.value.log
    assert not late.exists()  # had _run_all waited for the slow one, its child would have written the file first
    time.sleep(max(0.0, start + 3.6 - time.monotonic()))
    assert not late.exists()  # the slow one's child was stopped with it
