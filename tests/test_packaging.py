"""What `pip install /path/to/tileprobe` (not editable) installs: the harness sources and the JSON Schemas."""

import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _setuptools_ok() -> bool:
    try:
        return int(importlib.metadata.version("setuptools").split(".")[0]) >= 68
    except importlib.metadata.PackageNotFoundError:
        return False


@pytest.mark.skipif(not _setuptools_ok(), reason="building the wheel here needs setuptools>=68")
def test_wheel_carries_harness_sources_and_schemas(tmp_path):
    src = tmp_path / "src"  # a copy, so the build leaves no build/ or egg-info in the checkout
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("tileprobe", "cutlass_harness"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                        str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    (whl,) = (tmp_path / "dist").glob("tileprobe-*.whl")
    names = set(zipfile.ZipFile(whl).namelist())
    for f in (ROOT / "cutlass_harness").iterdir():
        if f.suffix in (".cu", ".cuh"):
            assert f"tileprobe/cutlass_harness/{f.name}" in names
    for f in (ROOT / "cutlass_harness" / "engine").glob("*.cu"):  # host drivers of engine code (tactic IDs)
        assert f"tileprobe/cutlass_harness/engine/{f.name}" in names
    for f in (ROOT / "tileprobe" / "schemas").glob("*.json"):
        assert f"tileprobe/schemas/{f.name}" in names
    assert "tileprobe/bandwidth.py" in names and "tileprobe/schema.py" in names
    meta = zipfile.ZipFile(whl).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = [ln for ln in meta.splitlines() if ln.startswith("Requires-Dist:")]
    assert not [r for r in requires if "==" in r.split(";")[0]], requires  # floors only; constraints.txt pins CI's
    assert not [r for r in requires if r.split()[1].startswith("torch") and "extra ==" not in r], requires


def test_harness_dir_prefers_the_checkout(monkeypatch, tmp_path):
    from tileprobe import build

    monkeypatch.delenv("TILEPROBE_HARNESS_DIR", raising=False)
    assert build._harness_dir() == ROOT / "cutlass_harness"
    monkeypatch.setenv("TILEPROBE_HARNESS_DIR", str(tmp_path))
    assert build._harness_dir() == tmp_path
