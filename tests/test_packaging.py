"""What `pip install /path/to/tileprobe` (not editable) installs: every subpackage, the harness sources (with their
families/ and stubs/) and the JSON Schemas; and that the installed copy, alone, sizes one config of every family."""

import importlib.metadata
import json
import os
import random
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tileprobe.families import FAMILIES

ROOT = Path(__file__).resolve().parent.parent


def _setuptools_ok() -> bool:
    try:
        return int(importlib.metadata.version("setuptools").split(".")[0]) >= 68
    except importlib.metadata.PackageNotFoundError:
        return False


def _wheel(tmp_path) -> Path:
    """Build the wheel from a copy of the checkout (so the build leaves no build/ or egg-info here)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        if (ROOT / name).is_file():
            shutil.copy(ROOT / name, src / name)
    for name in ("tileprobe", "cutlass_harness"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                        str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    (whl,) = (tmp_path / "dist").glob("tileprobe-*.whl")
    return whl


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The one wheel both tests read (built once for this file from this checkout: each test's own build took about
    5 CPU s of pip for the same bytes)."""
    return _wheel(tmp_path_factory.mktemp("wheel"))


@pytest.mark.skipif(not _setuptools_ok(), reason="building the wheel here needs setuptools>=68")
def test_wheel_carries_every_module_harness_source_and_schema(wheel):
    whl = wheel
    names = set(zipfile.ZipFile(whl).namelist())
    harness = [f for f in (ROOT / "cutlass_harness").rglob("*") if f.is_file() and "__pycache__" not in f.parts]
    assert any(f.parent.name == "families" for f in harness) and any(f.parent.name == "stubs" for f in harness)
    for f in harness:
        assert f"tileprobe/cutlass_harness/{f.relative_to(ROOT / 'cutlass_harness').as_posix()}" in names, f
    for f in (ROOT / "tileprobe").rglob("*.py"):  # every subpackage (families, predict, any added later)
        assert f.relative_to(ROOT).as_posix() in names, f
    for f in (ROOT / "tileprobe" / "schemas").glob("*.json"):
        assert f"tileprobe/schemas/{f.name}" in names
    assert "tileprobe/backends/cutlass/bandwidth.py" in names and "tileprobe/results/schema.py" in names
    assert "tileprobe/guard/include/tileprobe/guard.h" in names  # the C++ launch guard (`tileprobe include`)
    eps = zipfile.ZipFile(whl).read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "[pytest11]\ntileprobe = tileprobe.pytest_plugin" in eps, eps  # `pytest --tileprobe-known-good`
    meta = zipfile.ZipFile(whl).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = [ln for ln in meta.splitlines() if ln.startswith("Requires-Dist:")]
    assert not [r for r in requires if "==" in r.split(";")[0]], requires  # floors only; constraints.txt pins CI's
    assert not [r for r in requires if r.split()[1].startswith("torch") and "extra ==" not in r], requires


def test_harness_dir_prefers_the_checkout(monkeypatch, tmp_path):
    from tileprobe.backends.cutlass import build

    monkeypatch.delenv("TILEPROBE_HARNESS_DIR", raising=False)
    assert build.harness_dir() == ROOT / "cutlass_harness"
    monkeypatch.setenv("TILEPROBE_HARNESS_DIR", str(tmp_path))
    assert build.harness_dir() == tmp_path


@pytest.mark.nvcc
@pytest.mark.skipif(not _setuptools_ok(), reason="building the wheel here needs setuptools>=68")
def test_installed_wheel_alone_sizes_one_config_of_every_family(tmp_path, wheel):
    """The wheel in a fresh venv (no system site-packages; the test environment's dependencies reached through a .pth
    line, tileprobe itself only from the wheel), run from outside the checkout with `python -I`: the console script
    answers --help, and a static sweep of each registered family's first config gives `sized` rows."""
    whl = wheel
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "deps.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    p = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index",
                        str(whl)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "TILEPROBE_HARNESS_DIR", "TILEPROBE_FLASHINFER_DIR")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    run = tmp_path / "run"
    run.mkdir()
    helps = subprocess.run([str(venv / "bin" / "tileprobe"), "--help"], capture_output=True, text=True, timeout=120,
                           cwd=run, env=env)
    assert helps.returncode == 0 and "sweep" in helps.stdout, helps.stdout[-1500:] + helps.stderr[-1500:]
    script = run / "installed_sweep.py"
    shutil.copy(ROOT / "benchmarks" / "installed_sweep.py", script)
    cache = os.environ.get("TILEPROBE_TEST_CACHE") or str(tmp_path / "cache")
    cutlass_families = sorted(n for n, f in FAMILIES.items() if f.backend == "cutlass")
    fresh = random.choice(cutlass_families)  # sized in a cache of its own: one real build from the wheel's harness
    p = subprocess.run([str(py), "-I", str(script), str(run / "out"), cache, fresh], capture_output=True, text=True,
                       timeout=3600, cwd=run, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rec = json.loads(p.stdout.strip().splitlines()[-1])
    print(json.dumps(rec, indent=1))
    assert Path(rec["tileprobe"]).is_relative_to(venv) and Path(rec["harness"]).is_relative_to(venv), rec
    assert set(rec["families"]) == set(cutlass_families) and rec["fresh"] == fresh
    # The fresh family's one build: compiled here, by the installed harness's describe.cu.
    (entry,) = [e for e in Path(rec["fresh_cache"]).iterdir() if e.is_dir() and e.name.startswith("describe-")]
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["ok"] and Path(meta["command"][-3]).is_relative_to(venv), meta["command"][-3:]
    assert (entry / "harness").is_file() and rec["families"][fresh][0]["config"] in entry.name
    for name, rows in rec["families"].items():
        assert len(rows) == 1, (name, rows)
        row = rows[0]
        assert row["evidence"] == "sized" and row["verdict"] in ("fits", "smem-over-limit"), (name, row)
        assert isinstance(row["smem_bytes"], int) and row["smem_bytes"] > 0, (name, row)
