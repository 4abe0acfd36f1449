"""tileprobe.engines.locate.find_release, the one lookup every command uses: --engine-wheel (a wheel or a folder),
then the install, then the wheel cache; a release found nowhere ends with `help: tileprobe engines fetch ARGS` naming
exactly that release, and every command says it the same way."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tileprobe.engines import locate, packages
from tileprobe.engines import triton_configs as tc
from tileprobe.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]


def _wheel(folder: Path, name: str, version: str, requires=()) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    whl = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n"
                                                                                  for r in requires)
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", meta)
        z.writestr(f"{name.split('-')[0]}/__init__.py", "")
    return whl


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty wheel cache of this test's own: $TILEPROBE_ENGINE_WHEELS and the user cache dir both in tmp_path."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv(locate.WHEELS_ENV, str(tmp_path / "env-wheels"))
    return tmp_path / "env-wheels"


def _not_installed(dist):
    if packages.installed(dist) is not None:
        pytest.skip(f"{dist} is installed here")


def test_wheel_then_install_then_cache(cache, tmp_path, rng):
    _not_installed("sglang")
    versions = [f"0.{rng.randrange(4, 9)}.{i}" for i in rng.sample(range(30), 3)]
    if rng.random() < 0.5 and locate.PINNED["sglang"] not in versions:  # the pinned release among them, or not
        versions[rng.randrange(3)] = locate.PINNED["sglang"]
    for v in versions:
        _wheel(cache, "sglang", v)
    # with none asked, the pinned release when it is among them (a draw can hit it), else the newest
    pinned = locate.PINNED["sglang"]
    newest = pinned if pinned in versions else max(versions, key=locate.version_key)
    assert locate.find_release("sglang").version == newest
    asked = rng.choice(versions)
    assert locate.find_release("sglang", asked).wheel.name.startswith(f"sglang-{asked}-")
    assert tc.find_engine("sglang").version == newest  # triton's reader goes through the same lookup
    own = _wheel(tmp_path / "mine", "sglang", "9.9.9")
    assert locate.find_release("sglang", None, own).wheel == own.resolve()  # --engine-wheel FILE wins
    assert locate.find_release("sglang", None, own.parent).version == "9.9.9"  # --engine-wheel DIR too
    with pytest.raises(UsageError, match="not of vllm"):
        locate.find_release("vllm", None, own)
    # flashinfer installed (0.7.4 here) and a pinned release asked for: the install is not it, the cache is.
    inst = packages.installed("flashinfer-python")
    pin = f"0.7.{rng.randrange(50, 99)}"
    _wheel(cache, "flashinfer-python", pin)
    got = locate.find_release("flashinfer-python", pin)
    assert got.version == pin and got.wheel is not None
    if inst is not None:
        assert locate.find_release("flashinfer-python").install is not None  # no version asked: the install


def test_not_found_names_the_fetch_command(cache, tmp_path, rng):
    _not_installed("vllm")
    v = f"0.{rng.randrange(40, 90)}.{rng.randrange(9)}"
    for dist, version, cmd in (("vllm", v, f"vllm=={v}"), ("vllm", None, f"vllm=={locate.PINNED['vllm']}"),
                               ("flashinfer-python", f"0.7.{rng.randrange(50, 99)}.post1", None)):
        with pytest.raises(UsageError) as exc:
            locate.find_release(dist, version)
        *_, last = str(exc.value).splitlines()
        assert last == f"help: tileprobe engines fetch {cmd or f'{dist}=={version}'}", str(exc.value)
    with pytest.raises(UsageError) as exc:
        locate.find_release("vllm", v, tmp_path / "nowhere")
    assert str(exc.value).splitlines()[-1] == f"help: tileprobe engines fetch vllm=={v} --dest {tmp_path / 'nowhere'}"


def _cli(*args, env):
    return subprocess.run([sys.executable, "-m", "tileprobe", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)} | env)


def test_every_command_says_the_fetch_that_fixes_it(tmp_path, rng):
    """check-configs, export triton-configs (no input) and export flashinfer-blocklist: the engine or the flashinfer
    it pins is not here, and each error ends with the fetch of exactly that release (exit 2, no traceback)."""
    for dist in ("vllm", "sglang"):
        _not_installed(dist)
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), locate.WHEELS_ENV: str(tmp_path / "w")}
    engine = rng.choice(["vllm", "sglang"])
    fix = f"help: tileprobe engines fetch {engine}=={locate.PINNED[engine]}"
    for args in (["check-configs", "--engine", engine],
                 ["export", "triton-configs", "--engine", engine, "--workload", "qwen3-30b-a3b", "--target",
                  "rtx-pro-6000", "--out", tmp_path / "o"],
                 ["export", "flashinfer-blocklist", "--engine", engine, "--target", "rtx-5090", "--out",
                  tmp_path / "b", "--model-only", ROOT / "results" / "static"]):
        p = _cli(*args, env=env)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and lines[-1] == fix and lines[0].startswith("tileprobe: error:"), (args, p.stderr)
        assert "Traceback" not in p.stderr and len(lines) == 2
    # The engine is here (a wheel pinning a flashinfer that is not): the blocklist names that flashinfer's fetch.
    pin = f"0.7.{rng.randrange(50, 99)}"
    _wheel(tmp_path / "w", engine, locate.PINNED[engine], [f"flashinfer-python=={pin}"])
    p = _cli("export", "flashinfer-blocklist", "--engine", engine, "--target", "rtx-5090", "--out", tmp_path / "b",
             "--model-only", ROOT / "results" / "static", env=env)
    assert p.returncode == 2 and p.stderr.strip().splitlines()[-1] == \
        f"help: tileprobe engines fetch flashinfer-python=={pin}", p.stderr
