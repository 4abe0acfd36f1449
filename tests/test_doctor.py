"""`tileprobe doctor` names each injected fault in one line, with the command that fixes it, and exits 2: a CUTLASS
tree without tools/util/include, no nvcc on PATH, a Triton release other than the engines' pin, no engine wheel.
The real toolchain otherwise (nvcc, flashinfer's CUTLASS, Triton 3.8.0)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tileprobe import doctor

from _cutlass_copy import tree_without_util

pytestmark = pytest.mark.nvcc


def failing(lines: list[str]) -> list[str]:
    return [ln for ln in lines if ln.startswith("FAIL")]


def test_a_cutlass_tree_without_tools_util_include(tmp_path):
    broken = tree_without_util(tmp_path / "cutlass-copy")
    checks = doctor.diagnose(cutlass_dir=str(broken))
    lines = doctor.lines(checks, terminal=False)
    (bad,) = failing(lines)
    assert bad.startswith("FAIL CUTLASS:") and "tools/util/include" in bad and str(broken) in bad
    assert "fix: export TILEPROBE_CUTLASS_DIR=" in bad
    assert doctor.exit_code(checks) == 2
    assert any(ln.startswith("ok   nvcc:") for ln in lines)  # the rest of the toolchain is fine, and said so


def test_no_nvcc_on_path(tmp_path):
    nvcc = shutil.which("nvcc")
    assert nvcc
    here = Path(nvcc).parent
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if d and not (Path(d) / "nvcc").exists())
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")} | {"PATH": path}
    proc = subprocess.run([sys.executable, "-m", "tileprobe", "doctor"], capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    bad = failing(proc.stdout.splitlines())
    assert len(bad) == 1 and bad[0].startswith("FAIL nvcc:") and "CUDA_HOME" in bad[0], proc.stdout
    assert str(here) not in path.split(os.pathsep) and "Traceback" not in proc.stderr


def test_another_triton_release_than_the_engines_pin(monkeypatch, rng):
    version = f"3.{rng.choice([5, 6, 7])}.{rng.randint(0, 3)}"
    monkeypatch.setattr(doctor, "triton_version", lambda: version)
    checks = doctor.diagnose(engine=rng.choice(["vllm", "sglang"]))
    lines = doctor.lines(checks, terminal=False)
    named = [ln for ln in lines if version in ln]
    assert len(named) == 1 and named[0].startswith("FAIL triton:") and "3.8" in named[0], lines
    assert "pip install 'triton==3.8.0'" in named[0]
    assert doctor.exit_code(checks) == 2
    # a CUTLASS sweep does not need Triton: the same release is a warning there, not a failure
    plain = doctor.diagnose()
    assert not [c for c in plain if c.name == "triton" and c.fails]


def test_no_engine_wheel(tmp_path, monkeypatch, rng):
    engine = rng.choice(["vllm", "sglang"])
    (tmp_path / "wheels").mkdir()
    monkeypatch.setenv("TILEPROBE_ENGINE_WHEELS", str(tmp_path / "wheels"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))  # the user cache's wheels/ too: empty
    checks = doctor.diagnose(engine=engine)
    lines = doctor.lines(checks, terminal=False)
    label = doctor.ENGINES[engine]
    (bad,) = failing(lines)
    assert bad.startswith(f"FAIL {label}:") and f"fix: tileprobe engines fetch {engine}" in bad, lines
    assert doctor.exit_code(checks) == 2
