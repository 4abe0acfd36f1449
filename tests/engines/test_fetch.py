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


# ---------------------------------------------------------------------------------------------------------------
# Progress while downloading, and what a partly failed fetch leaves
# ---------------------------------------------------------------------------------------------------------------

FAKE_PIP = r'''
import sys, time, zipfile, pathlib
into, dist, version, log, pin, fail = sys.argv[1:7]
# the line announcing this download is out before the download ends (said as it starts, not after)
if f"{dist} {version}" not in pathlib.Path(log).read_text():
    sys.exit(f"ERROR: no line announced {dist} {version}")
if dist == fail:
    sys.exit(f"ERROR: No matching distribution found for {dist}=={version}")
time.sleep(0.4)
stem = dist.replace("-", "_")
with zipfile.ZipFile(pathlib.Path(into) / f"{stem}-{version}-py3-none-any.whl", "w") as z:
    z.writestr(f"{stem}-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
               + (f"Requires-Dist: flashinfer-python=={pin}\n" if dist != "flashinfer-python" else ""))
    z.writestr("pad.bin", b"\0" * 2_500_000)
'''


def _fake_pip(monkeypatch, tmp_path, log, pin, fail=""):
    script = tmp_path / "fake_pip.py"
    script.write_text(FAKE_PIP)
    monkeypatch.setattr(fetch, "pip_command", lambda dist, version, into: [
        sys.executable, str(script), str(into), dist, version, str(log), pin, fail])


def test_fetch_says_each_wheel_as_it_starts_while_it_downloads_and_its_size_when_done(tmp_path, monkeypatch, rng):
    v, pin = f"9.{rng.randrange(99)}.0", f"0.{rng.randrange(8, 99)}.{rng.randrange(9)}"
    log = tmp_path / "stderr.log"
    _fake_pip(monkeypatch, tmp_path, log, pin)
    monkeypatch.setattr(fetch, "HEARTBEAT_S", 0.1, raising=False)
    with open(log, "w", buffering=1) as err:
        monkeypatch.setattr(sys, "stderr", err)
        got = fetch.fetch([f"vllm=={v}"], tmp_path / "dest")
    assert [(w.dist, w.version) for w, _ in got] == [("vllm", v), ("flashinfer-python", pin)]
    lines = log.read_text().splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith("fetching ")]
    dones = [i for i, ln in enumerate(lines) if ln.startswith("fetched ")]
    assert len(starts) == len(dones) == 2 and starts[0] < dones[0] < starts[1] < dones[1], lines
    assert f"vllm {v}" in lines[starts[0]] and f"flashinfer-python {pin}" in lines[starts[1]], lines
    assert all("2.5 MB" in lines[i] for i in dones), lines  # each wheel's size when it is done
    assert any("still downloading" in ln for ln in lines[starts[0]:dones[0]]), lines  # a long one says so


def test_a_fetch_whose_pinned_flashinfer_is_not_served_says_so_and_holds_the_engine_to_its_manifest(
        tmp_path, monkeypatch, capsys, rng):
    """`tileprobe engines fetch vllm==V`: the engine's wheel arrives, the flashinfer release it pins is not on the
    index (pip: no matching distribution): one line says so and names the fallback to choose, and the fetch goes on;
    V is a release tileprobe has no manifest for, so the fetch ends in one error line saying the wheel is cached and
    why no command reads it without --rules-off (exit 2); with --rules-off it exits 0 and says rules are off."""
    import signal

    from tileprobe import cli

    v, pin = f"9.{rng.randrange(99)}.0", f"0.{rng.randrange(8, 99)}.{rng.randrange(9)}"
    dest = tmp_path / "dest"
    _fake_pip(monkeypatch, tmp_path, tmp_path / "stderr.log", pin, fail="flashinfer-python")
    (tmp_path / "stderr.log").write_text(f"vllm {v} flashinfer-python {pin}\n")  # the fake's start-line check

    def run(*extra):
        monkeypatch.setattr(sys, "argv", ["tileprobe", "engines", "fetch", f"vllm=={v}", "--dest", str(dest), *extra])
        handler = signal.getsignal(signal.SIGINT)
        try:
            with pytest.raises(SystemExit) as exit_:
                cli.main()
        finally:
            signal.signal(signal.SIGINT, handler)
        return exit_.value.code, capsys.readouterr()

    code, out = run()
    assert code == 2
    wheel = dest / f"vllm-{v}-py3-none-any.whl"
    assert wheel.is_file() and f"vllm {v}: {wheel}" in out.out
    (note,) = [ln for ln in out.err.splitlines() if ln.startswith("note: ")]
    assert f"flashinfer-python {pin} (pinned by vllm=={v}) is not served" in note and "fallback" in note, out.err
    (error,) = [ln for ln in out.err.splitlines() if ln.startswith("tileprobe: error: ")]
    assert f"vllm {v} is cached ({wheel}), but tileprobe has no manifest" in error and "--rules-off" in error, error
    code, out = run("--rules-off")
    assert code in (0, None) and "RULES OFF" in out.out and f"vllm {v}" in out.out, out
