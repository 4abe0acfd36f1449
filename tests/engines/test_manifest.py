"""The engine manifest (tileprobe.engines.manifest): an audit of a wheel whose files differ from the release's
manifest (here a copy of vLLM 0.33.0's with one @triton.jit helper edited: `softplus` in mamba_ssm.py, which the
Mamba-2 SSD kernels import from another file) is refused with one line naming the file and every entry that depends
on it (exit 2); with --rules-off it runs with no rule asked, every launch compiled, and the banner on the table,
report.md and run.json. The same copy unedited matches."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tileprobe.engines import manifest
from tileprobe.engines.triton_configs import find_engine
from tileprobe.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
HELPER = "vllm/model_executor/layers/mamba/ops/mamba_ssm.py"


@pytest.fixture(scope="module")
def slim(tmp_path_factory):
    """A copy of the cached vLLM 0.33.0 wheel holding every file its manifest names (a few MB, not 336)."""
    try:
        src = find_engine("vllm", None)
    except UsageError as exc:
        pytest.skip(f"no vllm wheel: {exc}")
    want = json.loads(manifest.path_for("vllm", src.version).read_text())
    files = sorted({rel for entry in want["entries"].values() for rel in entry})
    folder = tmp_path_factory.mktemp("slim")
    out = folder / Path(src.origin).name
    with zipfile.ZipFile(src.origin) as z, zipfile.ZipFile(out, "w") as w:
        for name in z.namelist():
            if name in files or name.endswith(".dist-info/METADATA") or name.endswith("__init__.py"):
                w.writestr(name, z.read(name))
    return out, want


def _edited(slim, tmp_path: Path, rng) -> Path:
    path, _ = slim
    edited = tmp_path / path.name
    with zipfile.ZipFile(path) as z, zipfile.ZipFile(edited, "w") as w:
        for name in z.namelist():
            data = z.read(name)
            if name == HELPER:
                text = data.decode()
                scale = rng.choice([1.0, 0.5, 2.0])
                # a planted change inside the helper's body (a new first statement): same name, other code
                text, n = re.subn(r"(@triton\.jit\s*\n(\s*)def softplus\(dt\):\n)",
                                  lambda m: f"{m.group(1)}{m.group(2)}    dt = dt * {scale}\n", text)
                assert n, "softplus is no longer a @triton.jit helper of mamba_ssm.py"
                data = text.encode()
            w.writestr(name, data)
    return edited


def test_the_copy_matches_and_an_edited_helper_is_refused_naming_every_entry_that_uses_it(slim, tmp_path, rng):
    path, want = slim
    assert manifest.check(find_engine("vllm", path)).text == ""
    users = sorted(e for e, files in want["entries"].items() if HELPER in files)
    assert users and all("mamba" in e or "ssm" in e or "ssd" in e or "conv" in e for e in users)
    edited = _edited(slim, tmp_path, rng)
    with pytest.raises(UsageError) as err:
        manifest.check(find_engine("vllm", edited))
    assert HELPER in str(err.value) and all(u in str(err.value) for u in users), err.value
    p = subprocess.run([sys.executable, "-m", "tileprobe", "audit", "--engine", "vllm", "--engine-wheel", str(edited),
                        "--model", "nemotron-h-8b", "--target", "rtx-pro-6000", "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=os.environ | {"PYTHONPATH": str(ROOT)})
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and HELPER in lines[0] and "--rules-off" in lines[0], p.stderr
    assert not (tmp_path / "out").exists()


def test_rules_off_asks_no_rule_and_says_so(slim, tmp_path, rng):
    edited = _edited(slim, tmp_path, rng)
    banner = manifest.check(find_engine("vllm", edited), rules_off=True).text
    assert banner.startswith("RULES OFF") and HELPER in banner
    with pytest.raises(UsageError, match="no manifest"):
        manifest.check(find_engine("vllm", _renamed(edited, tmp_path, "0.29.9")))


def _renamed(path: Path, tmp_path: Path, version: str) -> Path:
    """The same files as another release: its name and its METADATA's Version."""
    out = tmp_path / "renamed" / path.name.replace("0.33.0", version)
    out.parent.mkdir(exist_ok=True)
    with zipfile.ZipFile(path) as z, zipfile.ZipFile(out, "w") as w:
        for name in z.namelist():
            data = z.read(name)
            if name.endswith(".dist-info/METADATA"):
                data = re.sub(rb"^Version: .*$", f"Version: {version}".encode(), data, count=1, flags=re.M)
            w.writestr(name, data)
    return out
