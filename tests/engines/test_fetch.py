"""tileprobe.engines.fetch.download: a wheel asked for by several processes at once (parallel test workers, two
terminals) is downloaded once, renamed into place whole, and every caller gets the same complete file. Real pip; a
small wheel (platformdirs, which tileprobe depends on); skipped when no index answers."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from tileprobe.engines import fetch, locate, packages
from tileprobe.errors import UsageError

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


# ---------------------------------------------------------------------------------------------------------------
# What `tileprobe engines fetch` fetches: the engines and the flashinfer releases they pin
# ---------------------------------------------------------------------------------------------------------------


def _wheel(folder, name: str, version: str, requires=()):
    folder.mkdir(parents=True, exist_ok=True)
    stem = name.replace("-", "_")
    whl = folder / f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr(f"{stem}-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    return whl


def test_the_plan_fetches_each_engines_flashinfer_pin(tmp_path, rng):
    # The releases tileprobe reads: their pins come with them (read from the wheels when they are here).
    default = fetch.plan()
    engines = [(w.dist, w.version) for w in default if w.pinned_by is None]
    assert engines == list(locate.PINNED.items())
    pins = {w.pinned_by: w.version for w in default if w.pinned_by is not None}
    assert set(pins) == {f"{e}=={v}" for e, v in locate.PINNED.items()} and all(pins.values())
    for e, v in locate.PINNED.items():
        try:
            pkg = locate.find_release(e, v)
        except UsageError:
            continue  # not here: the table's pin is planned (and re-read from the wheel once fetched)
        assert pins[f"{e}=={v}"] == pkg.pin("flashinfer-python") == locate.FLASHINFER_PINS[(e, v)]
    # Another release, its wheel in --dest: its own METADATA's pin is planned, whatever it is.
    v, pin = f"9.{rng.randrange(99)}.0", f"0.{rng.randrange(8, 99)}.{rng.randrange(9)}.post{rng.randrange(9)}"
    dest = tmp_path / "dest"
    _wheel(dest, "vllm", v, [f"flashinfer-python=={pin}", "torch==2.14.0"])
    got = fetch.plan([f"vllm=={v}", f"flashinfer=={pin}"], dest)
    assert [(w.dist, w.version) for w in got] == [("vllm", v), ("flashinfer-python", pin)]
    assert not fetch.plan([f"vllm=={v}"], dest, flashinfer=False)[1:]
    # Both wheels in --dest: fetch() hands them back and runs no pip (these versions exist on no index).
    fi = _wheel(dest, "flashinfer-python", pin)
    done = fetch.fetch([f"vllm=={v}"], dest)
    assert [(w.dist, w.version, p) for w, p in done] == [("vllm", v, dest / f"vllm-{v}-py3-none-any.whl"),
                                                         ("flashinfer-python", pin, fi)]
    assert packages.from_wheel(done[1][1]).version == pin


def test_the_download_is_pip_download_no_deps_of_one_release(tmp_path, rng):
    version = f"0.7.{rng.randrange(9)}"
    cmd = fetch.pip_command("flashinfer-python", version, tmp_path)
    assert isinstance(cmd, list) and cmd[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in cmd and cmd[cmd.index("-d") + 1] == str(tmp_path) and cmd[-1] == \
        f"flashinfer-python=={version}"
    root = Path(__file__).resolve().parents[2]
    p = subprocess.run([sys.executable, "-m", "tileprobe", "engines", "fetch", "--dry-run"], capture_output=True,
                       text=True, timeout=120, cwd=root, env=os.environ | {"PYTHONPATH": str(root)})
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert sum(line.startswith("flashinfer-python ") and "pinned by" in line for line in lines) == 2, p.stdout
