"""The build cache with the real nvcc on a tiny harness (fast), so locking and atomic renames are exercised."""

import shutil
import threading
from dataclasses import replace

import pytest

from tileprobe.backends.cutlass import build
from tileprobe.families import FAMILIES, Config, parse_tile
from tileprobe.backends.cutlass.toolchain import find_cutlass, find_nvcc

pytestmark = pytest.mark.nvcc

TINY = """
#include <cstdio>
int main() {
#define TP_CFG(idx, tm, ...) std::printf("{\\"index\\": %d, \\"tm\\": %d}\\n", idx, tm);
#include "tp_configs.inc"
  return 0;
}
"""


@pytest.fixture
def tiny_harness(tmp_path, monkeypatch):
    d = tmp_path / "harness"
    d.mkdir()
    (d / "describe.cu").write_text(TINY)
    (d / "kernels.cuh").write_text("// tiny\n")
    monkeypatch.setattr(build, "HARNESS_DIR", d)
    return d


def cfg(m):
    return Config("sm120-nvfp4", parse_tile(f"{m}x128x128", 4), "cooperative", 0, "no-c", False, "sm_120a")


def test_two_builders_share_one_entry(tiny_harness, tmp_path, rng):
    cut, nvcc = find_cutlass(), find_nvcc()
    req = build.BuildRequest("describe", (cfg(rng.choice([128, 256])),), with_device=False)
    results = []
    threads = [threading.Thread(target=lambda: results.append(build.build(req, cut, nvcc, tmp_path / "c", 300)))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.ok for r in results)
    assert sum(not r.cached for r in results) == 1  # one compiled; the others found it under the lock
    entries = [p for p in (tmp_path / "c").iterdir() if p.is_dir()]
    assert len(entries) == 1 and entries[0].name.startswith("describe-sm120_nvfp4_")
    assert not [p for p in (tmp_path / "c").iterdir() if p.name.startswith(".tmp-")]


def test_key_covers_config_sources_flags_and_cutlass(tiny_harness, tmp_path):
    cut, nvcc = find_cutlass(), find_nvcc()
    base = build.BuildRequest("describe", (cfg(128),), with_device=False)
    k = build.cache_key(base, cut, nvcc)
    assert build.cache_key(build.BuildRequest("describe", (cfg(256),), with_device=False), cut, nvcc) != k
    assert build.cache_key(build.BuildRequest("describe", (cfg(128),), with_device=True), cut, nvcc) != k
    assert build.cache_key(base, replace(cut, tree_hash="other"), nvcc) != k
    assert build.cache_key(base, cut, replace(nvcc, version_text="12.9.1")) != k
    assert build.cache_key(base, cut, replace(nvcc, host_compiler="gcc (GCC) 99.1")) != k
    (tiny_harness / "kernels.cuh").write_text("// changed\n")
    assert build.cache_key(base, cut, nvcc) != k


def test_key_follows_what_nvcc_reads_from_the_environment_and_which_compilers_run(tiny_harness, monkeypatch, rng):
    """NVCC_PREPEND_FLAGS / NVCC_APPEND_FLAGS / NVCC_CCBIN change every compile, and so do another nvcc or host
    compiler of the same version: each is in the key (before, a failure under a bad flag was served after the flag
    was gone)."""
    cut, nvcc = find_cutlass(), find_nvcc()
    req = build.BuildRequest("describe", (cfg(rng.choice([128, 256])),), with_device=False)
    for var in ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN"):
        monkeypatch.delenv(var, raising=False)
    base = build.cache_key(req, cut, nvcc)
    seen = {base}
    for var in ("NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", "NVCC_CCBIN"):
        monkeypatch.setenv(var, f"-DTP_RANDOM_{rng.getrandbits(32):x}")
        seen.add(build.cache_key(req, cut, nvcc))
        monkeypatch.delenv(var)
    assert len(seen) == 4 and build.cache_key(req, cut, nvcc) == base
    other = f"/opt/cuda-{rng.getrandbits(16):x}/bin/nvcc"
    assert build.cache_key(req, cut, replace(nvcc, path=other)) != base
    assert build.cache_key(req, cut, replace(nvcc, host_compiler_path=f"/usr/bin/gcc-{rng.randint(9, 99)}")) != base


def test_failed_compile_is_cached_with_its_log(tiny_harness, tmp_path):
    (tiny_harness / "describe.cu").write_text("int main() { this is not C++; }\n")
    cut, nvcc = find_cutlass(), find_nvcc()
    req = build.BuildRequest("describe", (cfg(128),), with_device=False)
    first = build.build(req, cut, nvcc, tmp_path, 300)
    again = build.build(req, cut, nvcc, tmp_path, 300)
    assert not first.ok and "error" in first.log and again.cached and again.log == first.log
    assert "error" in build.first_error(first.log)


def test_a_relative_cache_folder_still_builds(tiny_harness, tmp_path, monkeypatch, rng):
    """`--cache-dir c` (relative): nvcc runs inside the entry's temporary folder, so the cache root is made absolute
    first; before, every config came back a compile error ("tp_configs.inc: No such file"), cached as such."""
    monkeypatch.chdir(tmp_path)
    root = build.cache_root("rel-cache")
    assert root.is_absolute() and root == tmp_path / "rel-cache"
    req = build.BuildRequest("describe", (cfg(rng.choice([128, 256])),), with_device=False)
    res = build.build(req, find_cutlass(), find_nvcc(), root, 300)
    assert res.ok and res.binary.is_file(), res.log


def test_ptxas_and_static_assert_parsers():
    log = ("ptxas info    : Function properties for _Z3fooPi\n    0 bytes stack frame, 0 bytes spill stores, "
           "0 bytes spill loads\nptxas info    : Used 40 registers\nptxas info    : Function properties for "
           "_ZN7cutlass13device_kernelI\n    24 bytes stack frame, 72 bytes spill stores, 68 bytes spill loads\n"
           "ptxas info    : Used 168 registers, used 8 barriers\n")
    assert build.parse_ptxas(log) == {"regs": 168, "spill_stores": 72, "spill_loads": 68, "stack": 24}
    hit, _, _ = build.smem_static_assert('error: static assertion failed with "SMEM usage exceeded capacity."')
    assert hit
    assert build.smem_static_assert("error: identifier undefined")[0] is False


def test_a_build_killed_by_a_signal_or_oom_is_not_cached_and_rebuild_replaces(tiny_harness, tmp_path, rng):
    cut, nvcc = find_cutlass(), find_nvcc()
    req = build.BuildRequest("describe", (cfg(rng.choice([128, 256])),), with_device=False)
    for body in ("kill -9 $$", "echo 'nvcc error   : out of memory' >&2; exit 1"):
        fake = tmp_path / "nvcc"
        fake.write_text(f"#!/bin/sh\n{body}\n")
        fake.chmod(0o755)
        res = build.build(req, cut, replace(nvcc, path=fake), tmp_path / "c", 60)
        assert not res.ok and "not cached" in res.log
        assert not [p for p in (tmp_path / "c").iterdir() if p.is_dir()]
    first = build.build(req, cut, nvcc, tmp_path / "c", 300)  # the real nvcc: compiled now, not a cached failure
    assert first.ok and not first.cached
    assert build.build(req, cut, nvcc, tmp_path / "c", 300).cached
    again = build.build(req, cut, nvcc, tmp_path / "c", 300, rebuild=True)
    assert again.ok and not again.cached


def _fake_flashinfer(root, rng):
    """The folders find_flashinfer reads, with a few headers of random content (no suffix for libcudacxx's)."""
    fi = root / "flashinfer"
    kernels = fi / "data" / "csrc" / "nv_internal" / "tensorrt_llm" / "kernels" / "cutlass_kernels"
    files = {
        fi / "data" / "cutlass" / "include" / "cutlass" / "version.h": "#define CUTLASS_MAJOR 4\n",
        fi / "data" / "cutlass" / "tools" / "util" / "include" / "cutlass" / "util" / "packed_stride.hpp": "",
        fi / "data" / "csrc" / "nv_internal" / "tensorrt_llm" / "cutlass_extensions" / "include" / "cutlass_extensions"
        / "epilogue" / "fusion" / "sm90_visitor_scatter.hpp": "",
        fi / "data" / "cccl" / "libcudacxx" / "include" / "cuda" / "std" / "atomic": "",
        kernels / "cutlass_heuristic.cpp": "",
    }
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{text}// {rng.getrandbits(64):x}\n")
    meta = root / "flashinfer_python-0.7.2.dist-info" / "METADATA"
    meta.parent.mkdir()
    meta.write_text("Name: flashinfer-python\nVersion: 0.7.2\n")
    return fi


def test_key_follows_engine_header_contents_not_paths(tiny_harness, tmp_path, monkeypatch, rng):
    """An in-place flashinfer upgrade that keeps its CUTLASS (same folders, same data/cutlass, new extension or CCCL
    headers) must not reuse the old build; the same headers in another place may."""
    cut, nvcc = find_cutlass(), find_nvcc()
    fi = _fake_flashinfer(tmp_path / "a", rng)
    monkeypatch.setenv("TILEPROBE_FLASHINFER_DIR", str(fi))
    fcfg = Config("flashinfer-moe", parse_tile("128x128x256", 4), "auto", 0, "default", False, "sm_120a",
                  extra=(("dtypes", "nvfp4xnvfp4"), ("tactic", "CtaShape128x128x128B")))
    req = build.BuildRequest("describe", (fcfg,), with_device=False)
    k = build.cache_key(req, cut, nvcc)
    assert build.cache_key(req, cut, nvcc) == k
    ext = next((fi / "data" / "csrc").rglob("sm90_visitor_scatter.hpp"))
    ext.write_text(ext.read_text() + "// upgraded\n")
    k2 = build.cache_key(req, cut, nvcc)
    assert k2 != k
    atomic = next((fi / "data" / "cccl").rglob("atomic"))
    atomic.write_text(atomic.read_text()[::-1])  # same size, other bytes
    k3 = build.cache_key(req, cut, nvcc)
    assert k3 not in (k, k2)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    monkeypatch.setenv("TILEPROBE_FLASHINFER_DIR", str(tmp_path / "b" / "flashinfer"))
    assert build.cache_key(req, cut, nvcc) == k3  # contents, not paths
