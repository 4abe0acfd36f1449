"""tests/conftest.py fetches the engine wheels (pip download of vLLM, SGLang and the flashinfer releases they pin)
only for a session whose selected tests need them: a `-m gpu` run whose selected tests do not (or that skips them:
no GPU here) never reaches for the network. Checked with pytest --collect-only in a subprocess whose pip can reach
nothing and logs every run (PIP_LOG), and an empty wheel cache: no pip log, no warning; the same files without
`-m gpu` select the tests that need the wheels, and pip is run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# a file whose tests read the flashinfer pins, a triton-moe file, and GPU tests that need no engine wheel
FILES = ["tests/engines/test_blocklist_engines.py", "tests/triton/test_triton_sweep.py",
         "tests/backends/cutlass/test_bandwidth.py"]


def _collect(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    log = tmp_path / "pip.log"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "PIP_", "TILEPROBE_")) or k == "TILEPROBE_TEST_CACHE"}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"),  # an empty wheel cache: every engine wheel is missing
               PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_RETRIES="0",
               PIP_TIMEOUT="2", PIP_LOG=str(log), PIP_DISABLE_PIP_VERSION_CHECK="1")
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args,
                          *FILES], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return res, log


def test_a_gpu_run_that_needs_no_engine_wheel_downloads_nothing(tmp_path):
    res, log = _collect(tmp_path, "-m", "gpu")
    assert res.returncode in (0, 5), res.stdout[-2000:] + res.stderr[-2000:]
    assert not log.exists(), f"pip ran:\n{log.read_text()[-2000:]}"
    assert "pip download" not in res.stdout + res.stderr and "wheel cache:" not in res.stdout


def test_a_run_that_selects_tests_needing_the_wheels_fetches_them(tmp_path):
    res, log = _collect(tmp_path, "-k", "blocklist_engines")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert log.exists() and "flashinfer-python" in log.read_text()  # the engines' flashinfer pins were asked for
    assert "will skip" in res.stdout  # the failed download is said, and those tests skip
