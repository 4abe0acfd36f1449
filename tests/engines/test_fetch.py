"""tileprobe.engines.fetch.download: a wheel asked for by several processes at once (parallel test workers, two
terminals) is downloaded once, renamed into place whole, and every caller gets the same complete file. Real pip; a
small wheel (platformdirs, which tileprobe depends on); skipped when no index answers."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from importlib import metadata

import pytest

CODE = ("import sys; from pathlib import Path; from tileprobe.engines.fetch import download; "
        "print(download('platformdirs', sys.argv[1], Path(sys.argv[2])))")


def test_concurrent_downloads_give_one_whole_wheel(tmp_path):
    version = metadata.version("platformdirs")
    dest = tmp_path / "wheels"
    procs = [subprocess.Popen([sys.executable, "-c", CODE, version, str(dest)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=600) for p in procs]
    if any(p.returncode for p in procs):
        err = next(e for (_, e), p in zip(outs, procs) if p.returncode)
        if "failed" in err or "did not finish" in err:
            pytest.skip(f"no package index answered: {err.strip().splitlines()[-1]}")
        raise AssertionError(err)
    paths = {o.strip() for o, _ in outs}
    wheels = sorted(dest.glob("*.whl"))
    assert len(paths) == 1 and len(wheels) == 1 and str(wheels[0]) in paths, (paths, wheels)
    with zipfile.ZipFile(wheels[0]) as z:
        assert z.testzip() is None and any(n.endswith("METADATA") for n in z.namelist())
    assert not [p for p in dest.iterdir() if p.name.startswith(".download-")]  # no temporary folder left behind
