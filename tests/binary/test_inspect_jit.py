"""`tileprobe inspect` on PTX-only kernels: the PTX compiles show progress (one unit per PTX image compiled, only the
image that declares the kernel), each is bounded in time and a compile past the bound is a row that says so (the
run goes on), and --no-jit rows say the PTX was not compiled because of --no-jit, not that there is no ptxas."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tileprobe import cli
from tileprobe.binary import inspect as bi
from tileprobe.binary.elf import Image
from tileprobe.binary.jit import Jit
from tileprobe.targets import profile


def _ptx(names: list[str], sm: int = 90) -> bytes:
    body = "".join(f".visible .entry {n}()\n{{\n\tret;\n}}\n\n" for n in names)
    return f".version 8.0\n.target sm_{sm}\n.address_size 64\n\n{body}".encode()


def _images(rng) -> list[Image]:
    """Two PTX images of compute_90 (two kernels each) and one of compute_80 declaring a third kernel."""
    return [Image("ptx", 90, "", _ptx(["k_a", "k_b"]), "fatbin container 1 entry 1"),
            Image("ptx", 90, "", _ptx(["k_c", "k_d"]), "fatbin container 2 entry 1"),
            Image("ptx", 80, "", _ptx(["k_e"], 80), "fatbin container 3 entry 1")][:rng.choice([2, 3])]


@pytest.fixture
def binary(tmp_path, monkeypatch, rng):
    images = _images(rng)
    monkeypatch.setattr(bi, "images_in", lambda path: images)
    f = tmp_path / "k.so"
    f.write_bytes(b"\0")
    return f, images


def test_no_jit_rows_say_not_compiled_because_of_no_jit(binary):
    f, images = binary
    p = CliRunner().invoke(cli.app, ["inspect", str(f), "--target", "rtx-pro-6000", "--no-jit"])
    assert p.exit_code == 0, p.output
    rows = [ln for ln in p.output.splitlines() if ln.startswith("  runs: k_")]
    assert len(rows) == sum(len(bi.ptx_entries([im])) for im in images), p.output
    assert all(ln.endswith("; not compiled (--no-jit)") for ln in rows), rows
    assert "no ptxas" not in p.output
    # without --no-jit and no ptxas found, that is what the row says
    (a, *_) = bi.answer(images, [], profile("rtx-pro-6000"), None, ["k_a"], None)
    assert a.code.endswith("; no ptxas here to compile it") and "--no-jit" not in a.code


def _fake_ptxas(tmp_path: Path) -> Path:
    exe = tmp_path / "ptxas"
    exe.write_text("#!/bin/sh\nexec sleep 60\n")
    exe.chmod(0o755)
    return exe


def test_a_compile_past_the_time_bound_is_a_row_saying_so_and_the_run_goes_on(binary, tmp_path, monkeypatch,
                                                                                capsys):
    f, images = binary
    monkeypatch.setenv("TILEPROBE_PROGRESS", "lines")
    jit = Jit(_fake_ptxas(tmp_path), "13.0.fake", timeout_s=1)
    t0 = time.monotonic()
    report = bi.inspect(f, None, ["rtx-pro-6000"], None, jit)
    took = time.monotonic() - t0
    kernels = report["targets"][0]["kernels"]
    n_images = len(images)
    assert took < 1.0 * n_images + 8, took  # one bounded compile per image, not one per kernel
    assert kernels and all(a["runs"] and a["static_smem"] is None for a in kernels)
    assert all("did not finish" in a["code"] and "within 1 s (--jit-timeout)" in a["code"] for a in kernels), kernels
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("[")]
    assert len(lines) == n_images and all("timed out after 1 s" in ln for ln in lines), err
    assert lines[-1].startswith(f"[{n_images}/{n_images}] PTX compute_")


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas on PATH")
def test_each_ptx_compile_is_one_progress_unit_with_ptxas_own_bytes(binary, monkeypatch, capsys):
    f, images = binary
    monkeypatch.setenv("TILEPROBE_PROGRESS", "lines")
    jit = Jit(Path(shutil.which("ptxas")), "here", timeout_s=60)
    report = bi.inspect(f, None, ["rtx-pro-6000", "h200"], None, jit)
    for t in report["targets"]:
        assert all(a["runs"] and a["static_smem"] == 0 and "compiled here for sm_" in a["code"]
                   for a in t["kernels"]), t
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("[")]
    total = 2 * len(images)  # each image once per target arch (sm_120, sm_90)
    assert len(lines) == total and lines[-1].startswith(f"[{total}/{total}] "), err
    assert all(": 2 kernels " in ln or ": 1 kernel " in ln for ln in lines), lines


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas on PATH")
def test_a_kernel_no_ptx_declares_is_not_compiled_for_and_does_not_run(tmp_path, monkeypatch, rng, capsys):
    """vLLM's _moe_C: Marlin kernels with an sm_75 cubin only, beside multi-MB PTX images of other kernels. Every
    runnable PTX image used to be compiled looking for them (a quarter of an hour, silent); none declares them, so
    none is compiled and the row says they do not run there."""
    src, out = tmp_path / "old.ptx", tmp_path / "old.cubin"
    src.write_bytes(_ptx(["k_old"], 75))
    subprocess.run([shutil.which("ptxas"), "-arch=sm_75", "-o", str(out), str(src)], check=True)
    images = [Image("cubin", 75, "", out.read_bytes(), "fatbin container 9 entry 1"), *_images(rng)]
    monkeypatch.setattr(bi, "images_in", lambda path: images)
    monkeypatch.setenv("TILEPROBE_PROGRESS", "lines")
    f = tmp_path / "k.so"
    f.write_bytes(b"\0")
    report = bi.inspect(f, "k_old", ["rtx-pro-6000"], None, Jit(_fake_ptxas(tmp_path), "13.0.fake", timeout_s=30))
    (a,) = report["targets"][0]["kernels"]
    assert not a["runs"] and "cubins sm_75 do not run there" in a["code"] and "no PTX of it" in a["code"], a
    assert not [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[")]  # nothing compiled
