"""vllm-moe: the engines' own NVFP4 MoE grouped GEMMs, proven identical to the kernels their wheels ship.

The identity proof compiles tileprobe's VllmMoeKernel for every composition the family lists (one TU, nvcc's host pass:
tests/_nvcc_host.py), takes each one's mangled `cutlass::device_kernel<...>` entry name, and compares them byte for byte with the names recorded from
the engine's wheel (tests/data/engine_symbols/, made by tools/engine_symbols.py; the command is in each file), or
with the installed engine's own libraries when that engine is installed here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from _nvcc_host import entry_target, host_pass
from tileprobe.errors import UsageError
from tileprobe.families import expand_configs, family
from tileprobe.families import vllm_moe as vm
from tileprobe.predict import CannotPredict, Unbuildable, predict

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "engine_symbols"
HARNESS = ROOT / "cutlass_harness"
DIST = {"vllm 0.33.0": ("vllm", "0.33.0"), "sgl-kernel 0.3.21": ("sgl-kernel", "0.3.21")}


def _tool():
    spec = importlib.util.spec_from_file_location("_tp_engine_symbols", ROOT / "tools" / "engine_symbols.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _shipped(release: str) -> tuple[str, set[str]]:
    """(where from, every recorded kernel name) of a release: the installed engine when it is that version, else
    the recorded file."""
    dist, version = DIST[release]
    got = _tool().installed_symbols(dist)
    if got and got[0] == version:
        return f"installed {dist} {version}", {s for names in got[1].values() for s in names}
    data = json.loads((DATA / f"{dist}-{version}.json").read_text())
    assert data["command"].startswith("python tools/engine_symbols.py") and data["wheel_sha256"]
    return data["wheel"], {e["symbol"] for lib in data["libraries"].values() for e in lib}


# ---------------------------------------------------------------------------------------------------------------
# The reader (no nvcc)
# ---------------------------------------------------------------------------------------------------------------


def _fake_kernel(rng, arch: str, grouped: bool = True) -> bytes:
    filler = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") for _ in range(rng.randrange(20, 200)))
    shape = "NS1_17GroupProblemShapeIN4cute5tupleIJiiiEEEEE" if grouped else "IN4cute5tupleIJiiiiEEE"
    return (f"_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversal{shape}NS1_10collective13CollectiveMmaINS1_"
            f"47Mainloop{arch}ArrayTmaWarpSpecializedBlockScaledILi4E{filler}NS_12float_e2m1_tE"
            f"KernelPtrArrayTmaWarpSpecializedCooperativeBlockScaled{arch}EvNT_6ParamsE").encode()


def test_reader_takes_whole_grouped_fp4_entries_only(rng, tmp_path):
    """Only whole NUL-terminated entries of grouped SM100/SM120 block-scaled e2m1 kernels: not the host stub names
    that embed them, not non-grouped kernels, not other arches."""
    want = [_fake_kernel(rng, "Sm120"), _fake_kernel(rng, "Sm100")]
    noise = [b"_ZL1750__device_stub_" + want[0] + b"RKN7cutlass4gemm6kernel", _fake_kernel(rng, "Sm120", False),
             _fake_kernel(rng, "Sm90"), bytes(rng.randrange(256) for _ in range(4096)).replace(b"_ZN", b"_zn")]
    parts = want + noise + want  # duplicates count once
    rng.shuffle(parts)
    blob = b"\x00" + b"\x00".join(parts) + b"\x00"
    tool = _tool()
    assert tool.kernels_in(blob) == sorted(w.decode() for w in want)
    wheel = tmp_path / "eng-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("eng/_C.abi3.so", blob)
        zf.writestr("eng/__init__.py", blob)  # not a library: not read
    rec = tool.record("eng", "1.0", wheel, "python tools/engine_symbols.py eng 1.0")
    assert list(rec["libraries"]) == ["eng/_C.abi3.so"]
    assert sorted(e["mainloop_arch"] for e in rec["libraries"]["eng/_C.abi3.so"]) == ["Sm100", "Sm120"]


def test_reader_refuses_a_broken_wheel(tmp_path):
    bad = tmp_path / "x.whl"
    bad.write_bytes(b"not a zip")
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "engine_symbols.py"), "x", "1", "--wheel", str(bad),
                        "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "cannot read wheel" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "o").exists()


def test_recorded_releases():
    """What the recorded wheels hold: vLLM 0.33.0 one SM120 kernel (cooperative), sgl-kernel 0.3.21 one (pingpong,
    in both its sm90 and sm100 libraries), sglang-kernel 0.4.10 none (SGLang 0.5.23's pinned kernel package)."""
    tool = _tool()
    for release, sched in (("vllm 0.33.0", "Cooperative"), ("sgl-kernel 0.3.21", "Pingpong")):
        _, names = _shipped(release)
        sm120 = {n for n in names if tool.describe(n)["mainloop_arch"] == "Sm120"}
        assert len(sm120) == 1 and sched in tool.describe(sm120.pop())["schedule"]
    empty = json.loads((DATA / "sglang-kernel-0.4.10.json").read_text())
    assert empty["libraries"] == {} and empty["version"] == "0.4.10"


# ---------------------------------------------------------------------------------------------------------------
# The family's configs and bad input
# ---------------------------------------------------------------------------------------------------------------


def test_configs_per_arch_carry_their_release(monkeypatch):
    monkeypatch.delenv(vm.ENV, raising=False)
    fam = family("vllm-moe")
    sm120 = expand_configs(fam, "sm_121a")
    assert {(c.get("engine"), c.schedule, str(c.tile)) for c in sm120} == {
        ("vllm 0.33.0", "auto", "128x128x128"), ("sgl-kernel 0.3.21", "pingpong", "128x128x128")}
    assert all(c.fields()["engine"] == c.get("engine") for c in sm120)
    assert {c.get("out") for c in expand_configs(fam, "sm_100a")} == {"bf16", "fp16"}
    h = expand_configs(fam, "sm_90a")
    assert h and all(c.unsupported_reason and "sm_90" in c.unsupported_reason for c in h)
    monkeypatch.setenv(vm.ENV, "vllm 0.33.0")
    assert {c.get("engine") for c in expand_configs(fam, "sm_120a")} == {"vllm 0.33.0"}


@pytest.mark.parametrize("value", ["vllm 0.34.0", "", "sglang 0.5.23"])
def test_unread_release_is_refused(monkeypatch, value):
    monkeypatch.setenv(vm.ENV, value)
    with pytest.raises(UsageError) as err:
        expand_configs(family("vllm-moe"), "sm_120a")
    assert "\n" not in str(err.value) and vm.ENV in str(err.value)


def test_cli_unread_release_one_line_exit_2(tmp_path):
    env = dict(os.environ, **{vm.ENV: "vllm 0.99.0"})
    p = subprocess.run([sys.executable, "-m", "tileprobe", "sweep", "--family", "vllm-moe", "--target", "rtx-pro-6000",
                        "--static-only", "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=300,
                       env=env)
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "vllm 0.99.0" in lines[0], p.stderr
    assert "Traceback" not in p.stderr + p.stdout


# ---------------------------------------------------------------------------------------------------------------
# Identity proof (nvcc)
# ---------------------------------------------------------------------------------------------------------------

def _compiled_entries(nvcc: str, toolchain, arch: str, cfgs, tmp_path: Path) -> list[str]:
    """tileprobe's kernel entry for each config, in config order: one TU with `void* tp_entry<i> =
    &cutlass::device_kernel<tileprobe::VllmMoeKernel<...>::GemmKernel>` per config, nvcc's host pass only
    (tests/_nvcc_host.py; the mangled name is the one the device pass gives the entry, checked there)."""
    fam = family("vllm-moe")
    src = tmp_path / f"tp_{arch}.cu"
    lines = ['#include "families/vllm_moe.cuh"']
    for i, c in enumerate(cfgs):
        args = ", ".join(str(a) for a in fam.template_args(c))
        kernel = f"tileprobe::VllmMoeKernel<{args}>::GemmKernel"
        lines.append(f"void* tp_entry_{i} = (void*)&cutlass::device_kernel<{kernel}>;")
    src.write_text("\n".join(lines) + "\n")
    num = arch.removeprefix("sm_").removesuffix("a")
    flags = ["-std=c++17", "-DNDEBUG", "--expt-relaxed-constexpr", f"-gencode=arch=compute_{num}a,code=sm_{num}a",
             f"-I{HARNESS}", *(f"-I{d}" for d in toolchain.cutlass.include_dirs)]
    obj = host_pass(nvcc, flags, src)
    out = []
    for i in range(len(cfgs)):
        got = entry_target(obj, f"tp_entry_{i}")
        assert len(got) == 1, (cfgs[i].name, got)
        out.append(next(iter(got)))
    return out


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_120a", "sm_100a"])
def test_kernel_symbols_identical_to_the_wheels(arch, nvcc_path, toolchain, tmp_path, monkeypatch):
    monkeypatch.delenv(vm.ENV, raising=False)
    cfgs = expand_configs(family("vllm-moe"), arch)
    entries = _compiled_entries(nvcc_path, toolchain, arch, cfgs, tmp_path)
    assert len(entries) == len(cfgs) == len(set(entries))
    tool = _tool()
    releases = {c.get("engine") for c in cfgs}
    shipped = {r: _shipped(r) for r in releases}
    for r, (where, names) in shipped.items():
        mine = [e for e in entries if e in names]
        want = [c.name for c in cfgs if c.get("engine") == r]
        print(f"{arch} {r}: {len(mine)} of tileprobe's {len(want)} kernel(s) found in {where}")
        assert len(mine) == len(want), f"{r}: tileprobe's {want} are not all kernels {r} ships ({where})"
        if arch == "sm_120a":  # and they are all the SM120 grouped FP4 kernels the release ships
            assert {n for n in names if tool.describe(n)["mainloop_arch"] == "Sm120"} == set(mine)
    assert all(any(e in names for _, names in shipped.values()) for e in entries)


# ---------------------------------------------------------------------------------------------------------------
# Predictions against the committed compiled sizes
# ---------------------------------------------------------------------------------------------------------------


def _committed_rows() -> list[dict]:
    rows = []
    for path in sorted(ROOT.glob("results/static/*__vllm-moe/results.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


def test_predictions_byte_exact_on_committed_rows():
    """Every SM120/SM121 row (both releases, three targets) is predicted to the byte, stage count included; the
    sm_100a rows, which have no rules, are refused rather than guessed; sm_90a rows are unbuildable."""
    rows = _committed_rows()
    sm120 = [r for r in rows if r["arch"] in ("sm_120a", "sm_121a")]
    assert len(sm120) >= 6 and {r["engine"] for r in sm120} == set(vm.RELEASES)
    for r in rows:
        args = dict(tile=r["tile"], schedule=r["schedule"], epilogue=r["epilogue"], arch=r["arch"],
                    cutlass_version=r["cutlass_version"])
        if r["arch"] == "sm_100a":
            assert r["smem_bytes"] and r["prediction"].startswith("cannot predict")
            with pytest.raises(CannotPredict):
                predict("vllm-moe", **args)
        elif r["arch"] == "sm_90a":
            assert r["smem_bytes"] is None and r["verdict"] == "unsupported"
            with pytest.raises(Unbuildable):
                predict("vllm-moe", **args)
        else:
            p = predict("vllm-moe", **args)
            assert (p.stages, p.smem_bytes) == (r["stages"], r["smem_bytes"]), r["config"]
            assert (p.smem_mainloop_bytes, p.smem_epilogue_bytes) == (r["smem_mainloop_bytes"],
                                                                      r["smem_epilogue_bytes"])
            assert r["prediction"] == "exact" and p.fits(r["smem_limit_bytes"]) == (r["verdict"] == "fits")
