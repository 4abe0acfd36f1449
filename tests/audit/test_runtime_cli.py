"""`python -m tileprobe.audit.runtime` (the GPU attention check's entry point, run by hand on the lent machine): bad
input is one line on stderr and exit code 2, never a traceback, as the CLI's is."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")


def _run(tmp_path, *args):
    env = {k: v for k, v in os.environ.items() if k != "TILEPROBE_ENGINE_WHEELS"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "empty-cache")  # no engine wheel anywhere
    return subprocess.run([sys.executable, "-m", "tileprobe.audit.runtime", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_a_missing_engine_wheel_is_one_line_and_exit_2(tmp_path):
    res = _run(tmp_path, "--slim", str(tmp_path / "slim"))
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    first, *rest = res.stderr.strip().splitlines()
    assert first.startswith("python -m tileprobe.audit.runtime: error: need ")
    assert "no wheel of it is in the wheel cache" in first
    assert all(line.startswith("help: ") for line in rest)  # at most the fetch hint
    assert not (tmp_path / "slim").exists() or not any((tmp_path / "slim").iterdir())


@pytest.mark.parametrize("args", [["--case", "no-such-case", "--dry-run"], ["--dry-run"]])
def test_bad_options_exit_2_without_a_traceback(tmp_path, args):
    res = _run(tmp_path, *args)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("python -m tileprobe.audit.runtime: error: --")
