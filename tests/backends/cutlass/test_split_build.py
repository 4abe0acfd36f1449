"""A runtime harness is built as nvcc processes at once (build.BuildRequest.split): kernel.cu → kernel.<i>.cubin, the
GEMM kernel alone, and run.cu → harness, which launches that kernel through CUTLASS's CudaHostAdapter. Nothing about
the kernel may change by it. Real nvcc: the split kernel's machine code is compared with the kernel a single
translation unit compiles (describe.cu with its device code, no host adapter: the layout the harness had before)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tileprobe.backends.cutlass import build
from tileprobe.backends.cutlass.build import BuildRequest, kernel_cubin, kernel_log, parse_ptxas
from tileprobe.binary.cubin import kernels_of
from tileprobe.binary.elf import cubin_arch, images_in, parse_elf
from tileprobe.families import Config, parse_tile


def _gemm_kernels(blob: bytes, what: str):
    elf = parse_elf(blob, what)
    sm, suffix = cubin_arch(elf)
    found = [k for k in kernels_of(elf, f"sm_{sm}{suffix}", sm, suffix, what) if "device_kernel" in k.name]
    return elf, found


@pytest.mark.nvcc
def test_the_split_kernel_is_the_kernel_a_single_unit_compiles(toolchain, tmp_path):
    """The GPU tests' fp8 config (test_pipeline and test_gpu build the same harness: one compile per session)."""
    tc = toolchain
    cfg = Config("sm90-fp8", parse_tile("128x128x128", 8), "cooperative", 0, "no-c", False, "sm_90a")
    req = BuildRequest("run", (cfg,))
    res = build.build(req, tc.cutlass, tc.nvcc, tc.cache, 1800)
    assert res.ok, res.log[-2000:]
    cubin = res.binary.parent / kernel_cubin(0)
    split_elf, (split,) = _gemm_kernels(cubin.read_bytes(), str(cubin))

    # The single unit: describe.cu with TP_WITH_DEVICE takes the kernel's address, so its device pass compiles
    # cutlass::device_kernel<GemmKernel> with the same flags, without CUTLASS_ENABLE_CUDA_HOST_ADAPTER.
    single = BuildRequest("describe", (cfg,), with_device=True)
    flags = single.flags()
    assert "-DCUTLASS_ENABLE_CUDA_HOST_ADAPTER=true" not in flags and "-DTP_WITH_DEVICE" in flags
    (tmp_path / "tp_configs.inc").write_text(single.config_include())
    cmd = [str(tc.nvcc.path), *flags, "-I", str(build.HARNESS_DIR), "-I", str(tmp_path)]
    for inc in tc.cutlass.include_dirs:
        cmd += ["-I", str(inc)]
    cmd += ["-cubin", str(build.HARNESS_DIR / "describe.cu"), "-o", str(tmp_path / "single.cubin")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=tmp_path)
    assert p.returncode == 0, (p.stdout + p.stderr)[-2000:]
    single_elf, (one,) = _gemm_kernels((tmp_path / "single.cubin").read_bytes(), "single.cubin")

    assert split.name == one.name  # the same cutlass::device_kernel<GemmKernel> instantiation
    text = f".text.{split.name}"
    assert split_elf.section(text).data(split_elf.blob) == single_elf.section(text).data(single_elf.blob)
    for field in ("registers", "stack_frame", "static_smem", "barriers", "max_threads", "launch_bounds"):
        assert getattr(split, field) == getattr(one, field), field
    assert parse_ptxas(res.kernel_logs[0])["regs"] == split.registers == res.ptxas(0)["regs"]
    # The cubin names its config (the harness checks the name before it launches anything from it).
    sym = split_elf.symbol("tp_config_id")
    sec = split_elf.sections[sym.shndx]
    assert sec.data(split_elf.blob)[sym.value:sym.value + sym.size] == cfg.name.encode() + b"\0"

    # The host half holds no GEMM kernel: its device code is the reference, the check and the fault kernels.
    host_kernels = [k.name for img in images_in(res.binary) if img.kind == "cubin" and img.data
                    for k in kernels_of(parse_elf(img.data, "harness"), img.arch, img.sm, img.suffix, "harness")]
    assert host_kernels and not [n for n in host_kernels if "device_kernel" in n], host_kernels
    meta = json.loads((res.binary.parent / "meta.json").read_text())
    assert [("-cubin" in c) for c in meta["kernel_commands"]] == [True] and "-cubin" not in meta["command"]


def _entry(tmp_path, req: BuildRequest):
    e = tmp_path / "entry"
    e.mkdir()
    (e / "meta.json").write_text(json.dumps({"ok": True, "seconds": 1.0, "command": ["nvcc", "run.cu"],
                                             "kernel_commands": [["nvcc", "-cubin", "kernel.cu"]], "configs": []}))
    (e / "build.log").write_text("log\n")
    (e / kernel_log(0)).write_text("ptxas info    : Function properties for k\nptxas info    : Used 77 registers\n")
    (e / "harness").write_bytes(b"\x7fELF")
    (e / kernel_cubin(0)).write_bytes(b"\x7fELF")
    return e


def test_a_split_entry_without_its_kernel_or_kernel_log_is_broken(tmp_path, capsys, rng):
    """The cache's own check (no compiler: its subject is _load): an "ok" run entry is whole only with kernel.cubin
    and kernel.log; the registers come from the kernel's log."""
    cfg = Config("sm90-fp8", parse_tile(rng.choice(["128x128x128", "64x256x128"]), 8), "pingpong", 0, "no-c", False,
                 "sm_90a")
    req = BuildRequest("run", (cfg,))
    e = _entry(tmp_path, req)
    whole = build._load(e, req)
    assert whole is not None and whole.ptxas(0)["regs"] == 77 and whole.kernel_commands[0][1] == "-cubin"
    victim = rng.choice([kernel_cubin(0), kernel_log(0)])
    (e / victim).unlink()
    assert build._load(e, req) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is broken" in err and e.name in err and "rebuilding" in err
    if victim == kernel_cubin(0):
        assert kernel_cubin(0) in err


def test_a_kernel_half_is_one_source_in_every_batch_and_its_cache_entry_is_checked(tmp_path, capsys, rng):
    """The kernel cache (no compiler: its subjects are kernel_key, _store_kernel and _load_kernel): a config's kernel
    half has the same tp_configs.inc and key wherever it stands in a batch and whatever shares it, another config's
    differs; a stored entry reads back as stored; a broken one (meta.json truncated, kernel.cubin gone) is one
    warning line, removed, and read as absent, so the build compiles it again."""
    tc = Tc()
    tiles = rng.sample(["128x128x128", "64x128x128", "64x256x128", "128x64x128"], 3)
    a, b, c = (Config("sm90-fp8", parse_tile(t, 8), rng.choice(["cooperative", "pingpong"]), 0, "no-c", False,
                      "sm_90a") for t in tiles)
    first, second = BuildRequest("run", (a, b)), BuildRequest("run", (c, b, a))
    assert first.kernel_include(0) == second.kernel_include(2) != first.kernel_include(1)
    assert build.kernel_key(first, 0, tc.cutlass, tc.nvcc) == build.kernel_key(second, 2, tc.cutlass, tc.nvcc)
    assert build.kernel_key(first, 1, tc.cutlass, tc.nvcc) == build.kernel_key(second, 1, tc.cutlass, tc.nvcc)
    assert build.kernel_key(first, 0, tc.cutlass, tc.nvcc) != build.kernel_key(first, 1, tc.cutlass, tc.nvcc)
    assert build.kernel_key(first, 0, tc.cutlass, tc.nvcc) != build.cache_key(BuildRequest("run", (a,)), tc.cutlass,
                                                                                tc.nvcc)
    entry = build.kernel_entry(tmp_path, first, 0, tc.cutlass, tc.nvcc)
    assert entry.name.startswith(a.name) and build._load_kernel(entry) is None
    blob, log, cmd = os.urandom(rng.randint(64, 4096)), f"ptxas info    : Used {rng.randint(32, 255)} registers\n", \
        ["nvcc", "-cubin", f"k{rng.randint(0, 9)}"]
    (tmp_path / "k.cubin").write_bytes(blob)
    build._store_kernel(entry, tmp_path / "k.cubin", log, cmd)
    assert build._load_kernel(entry) == (cmd, log) and (entry / "kernel.cubin").read_bytes() == blob
    (tmp_path / "k2.cubin").write_bytes(os.urandom(64))
    build._store_kernel(entry, tmp_path / "k2.cubin", "other\n", ["nvcc", "other"])  # another build's: kept
    assert build._load_kernel(entry) == (cmd, log) and (entry / "kernel.cubin").read_bytes() == blob
    build._store_kernel(entry, tmp_path / "k2.cubin", "other\n", ["nvcc", "other"], replace=True)  # --rebuild
    assert build._load_kernel(entry) == (["nvcc", "other"], "other\n")
    assert (entry / "kernel.cubin").read_bytes() == (tmp_path / "k2.cubin").read_bytes()
    build._store_kernel(entry, tmp_path / "k.cubin", log, cmd, replace=True)
    assert capsys.readouterr().err == "" and [p.name for p in entry.parent.iterdir()] == [entry.name]
    fault = rng.choice(["meta", "cubin"])
    if fault == "meta":
        (entry / "meta.json").write_text((entry / "meta.json").read_text()[:5])
    else:
        (entry / "kernel.cubin").unlink()
    assert build._load_kernel(entry) is None and not entry.exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "kernel cache entry" in err and entry.name in err and "rebuilding" in err


class Tc:
    """A toolchain's identity for keys only (kernel_key reads the tree hash, nvcc's path and version and the host
    compiler's, runs nothing)."""

    def __init__(self):
        self.cutlass = type("Tree", (), {"tree_hash": "t" + os.urandom(4).hex()})()
        self.nvcc = type("Nvcc", (), {"version_text": "13.0", "host_compiler": "gcc", "path": "/usr/bin/nvcc",
                                      "host_compiler_path": "/usr/bin/gcc"})()


def test_both_halves_run_at_once_at_the_asked_priority(tmp_path, rng):
    """_run_nvcc's plumbing with stand-in commands (its subject is process handling, not nvcc): the two commands run
    at the same time (each is inside its 1 s sleep while the other starts), each at the CPU priority asked for, and
    a failure keeps its output."""
    nice = rng.randint(1, 12)
    probe = ("import json, os, sys, time; t0 = time.time(); time.sleep(1.0);"
             " open(sys.argv[1], 'w').write(json.dumps([os.getpriority(os.PRIO_PROCESS, 0), t0, time.time()]));"
             " sys.stdout.write('out-' + sys.argv[1][-1]); sys.exit(int(sys.argv[2]))")
    a, b = tmp_path / "pa", tmp_path / "pb"
    base = os.getpriority(os.PRIO_PROCESS, 0)
    runs = build._run_nvcc([[sys.executable, "-c", probe, str(a), "0"], [sys.executable, "-c", probe, str(b), "3"]],
                           60, tmp_path, nice)
    assert [r.ok for r in runs] == [True, False] and runs[0].log == "out-a" and runs[1].log == "out-b"
    (pa, a0, a1), (pb, b0, b1) = json.loads(a.read_text()), json.loads(b.read_text())
    assert a0 < b1 and b0 < a1  # the two lifetimes overlap
    assert pa == pb == min(19, base + nice)


@pytest.mark.nvcc
def test_the_host_halfs_light_device_pass_compiles_the_kernels_of_the_full_one(toolchain, tmp_path, rng):
    """sm90-fp8 names its reference's operand types (families/sm90_fp8_device.cuh), so run.cu's device pass compiles
    only the harness's own kernels (device_pass.cuh) instead of the whole unit. Real nvcc, device pass only
    (`-cubin run.cu`) with and without TP_DEVICE_PASS_HEADER: the same kernels, the same machine code and
    registers; a kernel the host launched that the light pass lacked would also fail the harness's link."""
    tc = toolchain
    tile = rng.choice(["128x128x128", "128x256x128", "256x128x128"])
    cfg = Config("sm90-fp8", parse_tile(tile, 8), rng.choice(["cooperative", "pingpong"]), 0,
                 rng.choice(["no-c", "with-c"]), False, "sm_90a")
    req = BuildRequest("run", (cfg,))
    light = req.flags()
    define = '-DTP_DEVICE_PASS_HEADER="families/sm90_fp8_device.cuh"'
    assert define in light
    (tmp_path / "tp_configs.inc").write_text(req.config_include())

    def kernels(flags: list[str], name: str) -> dict:
        cmd = [str(tc.nvcc.path), *flags, "-I", str(build.HARNESS_DIR), "-I", str(tmp_path)]
        for inc in tc.cutlass.include_dirs:
            cmd += ["-I", str(inc)]
        out = tmp_path / name
        p = subprocess.run([*cmd, "-cubin", str(build.HARNESS_DIR / "run.cu"), "-o", str(out)], capture_output=True,
                           text=True, timeout=1800, cwd=tmp_path)
        assert p.returncode == 0, (p.stdout + p.stderr)[-2000:]
        elf = parse_elf(out.read_bytes(), name)
        sm, suffix = cubin_arch(elf)
        return {k.name: (elf.section(f".text.{k.name}").data(elf.blob), k.registers, k.stack_frame)
                for k in kernels_of(elf, f"sm_{sm}{suffix}", sm, suffix, name)}

    lean = kernels(light, "light.cubin")
    full = kernels([f for f in light if f != define], "full.cubin")
    assert full and sorted(lean) == sorted(full), (sorted(lean), sorted(full))
    assert any("reference_groups_kernel" in n for n in lean) and not any("device_kernel" in n for n in lean)
    for name in full:
        assert lean[name] == full[name], name


@pytest.mark.nvcc
def test_a_harness_of_two_configs_has_each_kernel_and_size_its_own_harness_has(toolchain, rng):
    """One host half serving two configs (build.harness_batches' layout), real nvcc: kernel half i is config i's
    own (its cubin names it; the shared config's is the one its own harness compiled, served from the kernel cache,
    the other's is compiled here and put there), and `--describe --config-index i` gives config i's sizes; an index
    the harness does not serve is one line and exit 2. The shared config is the GPU tests' (built alone by the first
    test here: one compile per session); the batch's host half and its other config's kernel half are this proof's
    own compiles."""
    tc = toolchain
    shared = Config("sm90-fp8", parse_tile("128x128x128", 8), "cooperative", 0, "no-c", False, "sm_90a")
    other = Config("sm90-fp8", parse_tile(rng.choice(["64x128x128", "64x256x128", "128x64x128"]), 8), "pingpong", 0,
                   rng.choice(["no-c", "with-c"]), False, "sm_90a")
    pair = rng.sample([shared, other], 2)
    single = build.build(BuildRequest("run", (shared,)), tc.cutlass, tc.nvcc, tc.cache, 1800)
    req = BuildRequest("run", tuple(pair))
    res = build.build(req, tc.cutlass, tc.nvcc, tc.cache, 1800)
    assert single.ok and res.ok, res.log[-2000:]
    assert res.cached or res.kernel_commands[pair.index(shared)] == single.kernel_commands[0]  # not compiled again
    names = set()
    for i, c in enumerate(pair):
        cubin = res.binary.parent / kernel_cubin(i)
        elf, (k,) = _gemm_kernels(cubin.read_bytes(), str(cubin))
        sym = elf.symbol("tp_config_id")
        assert elf.sections[sym.shndx].data(elf.blob)[sym.value:sym.value + sym.size] == c.name.encode() + b"\0"
        assert res.ptxas(i)["regs"] == k.registers
        kept = build.kernel_entry(tc.cache, req, i, tc.cutlass, tc.nvcc)  # the kernel cache holds this very cubin
        assert (kept / "kernel.cubin").read_bytes() == cubin.read_bytes()
        names.add(k.name)
        desc = json.loads(subprocess.run([str(res.binary), "--describe", "--config-index", str(i)],
                                         capture_output=True, text=True, timeout=60).stdout)
        assert desc["index"] == i
        if c is shared:
            one_elf, (one,) = _gemm_kernels((single.binary.parent / kernel_cubin(0)).read_bytes(), "single")
            assert one.name == k.name
            text = f".text.{k.name}"
            assert elf.section(text).data(elf.blob) == one_elf.section(text).data(one_elf.blob)
            alone = json.loads(subprocess.run([str(single.binary), "--describe"], capture_output=True, text=True,
                                              timeout=60).stdout)
            assert desc == alone | {"index": i}
    assert len(names) == 2
    p = subprocess.run([str(res.binary), "--describe", "--config-index", "2"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and p.stderr.startswith("error: --config-index 2: this harness has no such config\n")
