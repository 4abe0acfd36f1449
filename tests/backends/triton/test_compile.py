"""The Triton compile cache's failure policy, with the real Triton compiler on a four-line kernel:
a broken entry is one warning line and compiled again; a failure that says nothing about the config is never
cached; the compiler's environment is in the key; TRITON_CACHE_DIR never leaks into the caller's process."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("triton")

import triton  # noqa: E402

from tileprobe.backends.triton import compile as tc  # noqa: E402
from tileprobe.backends.triton.source import extract  # noqa: E402
from tileprobe.errors import EnvironmentFault  # noqa: E402

pytestmark = pytest.mark.triton


KERNEL = extract('''import triton
import triton.language as tl


@triton.jit
def add_one(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)
''', "add_one", "test kernel")


def job(rng) -> tc.KernelJob:
    return tc.KernelJob(KERNEL, ("*fp32",), (("BLOCK", rng.choice([16, 32, 64, 128])),), rng.choice([90, 120]))


def results(cache) -> list:
    return sorted(cache.rglob("result.json"))


def test_a_truncated_result_is_one_warning_and_compiled_again(tmp_path, rng, capsys):
    j = job(rng)
    first = tc.compile_job(j, tmp_path)
    assert isinstance(first, tc.TritonBuild) and not first.cached
    (entry,) = results(tmp_path)
    for compile_ in (lambda: tc.compile_job(j, tmp_path), lambda: tc.compile_many([j], 1, tmp_path)[0]):
        text = entry.read_text()
        entry.write_text(text[: rng.randrange(1, len(text) - 1)])
        capsys.readouterr()
        again = compile_()
        err = capsys.readouterr().err
        assert isinstance(again, tc.TritonBuild) and not again.cached and again.shared == first.shared
        assert len(err.strip().splitlines()) == 1 and "broken" in err and "rebuilding" in err, err
        assert "Traceback" not in err
        assert tc.compile_job(j, tmp_path).cached  # the rebuilt entry serves the next call


def test_triton_cache_dir_is_the_callers_after_a_compile(tmp_path, rng, monkeypatch):
    before = str(tmp_path / f"mine-{rng.getrandbits(32):x}") if rng.random() < 0.5 else None
    if before is None:
        monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    else:
        monkeypatch.setenv("TRITON_CACHE_DIR", before)
    got = tc.compile_job(job(rng), tmp_path / "cache", rebuild=True)
    assert isinstance(got, tc.TritonBuild)
    assert os.environ.get("TRITON_CACHE_DIR") == before


def test_a_transient_failure_is_not_cached(tmp_path, rng, monkeypatch):
    """An OSError inside the compile (a full disk, a tool that cannot start) is returned as that launch's error,
    marked transient, and not cached: the next run compiles it."""
    j = job(rng)
    real = triton.compile

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(triton, "compile", full_disk)
    failed = tc.compile_job(j, tmp_path)
    assert isinstance(failed, tc.TritonCompileError) and "No space left" in failed.line
    assert results(tmp_path) == [] and failed.transient
    monkeypatch.setattr(triton, "compile", real)
    again = tc.compile_job(j, tmp_path)
    assert isinstance(again, tc.TritonBuild) and not again.cached


def test_the_same_transient_failure_for_several_launches_is_the_environments(tmp_path, rng, monkeypatch):
    def no_tool(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "ptxas")

    monkeypatch.setattr(triton, "compile", no_tool)
    jobs = [tc.KernelJob(KERNEL, ("*fp32",), (("BLOCK", b),), rng.choice([90, 120]))
            for b in rng.sample([16, 32, 64, 128, 256], rng.choice([2, 3]))]
    with pytest.raises(EnvironmentFault) as info:
        tc.compile_many(jobs, 1, tmp_path)
    assert "ptxas" in info.value.what and "\n" not in info.value.what
    assert results(tmp_path) == []


def test_the_key_holds_the_compilers_environment(rng, monkeypatch, tmp_path):
    j = job(rng)
    for var in ("TRITON_PTXAS_PATH", "PTXAS_OPTIONS", "TRITON_CACHE_DIR"):
        monkeypatch.delenv(var, raising=False)
    base = j.key("3.8.0")
    ptxas = tmp_path / "ptxas"
    ptxas.write_text(f"#!/bin/sh\n# {rng.getrandbits(64):x}\n")
    monkeypatch.setenv("TRITON_PTXAS_PATH", str(ptxas))
    with_ptxas = j.key("3.8.0")
    ptxas.write_text(ptxas.read_text() + "# another build of it\n")
    assert len({base, with_ptxas, j.key("3.8.0")}) == 3  # the override, and its bytes (size, time)
    monkeypatch.delenv("TRITON_PTXAS_PATH")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # where caches go changes no compile
    assert j.key("3.8.0") == base and j.key("3.6.0") != base
