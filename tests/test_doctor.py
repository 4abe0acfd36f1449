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
    assert "pip install 'triton==3.8.0'" in named[0] and "--any-triton" in named[0]
    assert doctor.exit_code(checks) == 2
    # an installed Triton tileprobe cannot answer for fails every question (every command that compiles would use
    # it), a CUTLASS sweep's too; the fix the line names, --any-triton, makes it a release the runs may use
    plain = doctor.diagnose()
    assert [c for c in plain if c.name == "triton" and c.fails] and doctor.exit_code(plain) == 2
    fixed = doctor.diagnose(any_triton=True)
    (line,) = [c for c in fixed if c.name == "triton"]
    assert line.ok and version in line.detail and "--any-triton" in line.detail


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


# ---------------------------------------------------------------------------------------------------------------
# The engine a run would read: installed (read before any cached wheel), a real wheel's files
# ---------------------------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def _install(wheel: Path, site: Path, version: str | None = None, files=()) -> None:
    """Unpack `wheel`'s dist-info, vllm/__init__.py and `files` into `site` as pip would lay them out (the METADATA's
    Version, and the dist-info's name, made `version` when given: the same files as another release)."""
    import re
    import zipfile
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if not (".dist-info/" in name or name == "vllm/__init__.py" or name in files):
                continue
            data = z.read(name)
            if version is not None and ".dist-info/" in name:
                if name.endswith("/METADATA"):
                    data = re.sub(rb"^Version: .*$", f"Version: {version}".encode(), data, count=1, flags=re.M)
                name = re.sub(r"^vllm-[^/]+\.dist-info/", f"vllm-{version}.dist-info/", name)
            out = site / name
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)


def _doctor(site: Path, *args: str) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "tileprobe", "doctor", *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT)


def _cached_vllm():
    from tileprobe.engines import locate, manifest
    wheels = [p for p in locate.releases("vllm") if p.wheel is not None and manifest.supported("vllm", p.version)]
    if not wheels:
        pytest.skip("no cached vllm wheel of a release tileprobe has a manifest for")
    return wheels


def test_an_installed_engine_release_tileprobe_cannot_answer_for_fails_and_the_fix_it_prints_works(tmp_path, rng):
    """An installed vLLM whose release has no manifest (a real wheel's files as release 0.29.x) is what every command
    would read (the install comes before the wheel cache): exit 2 naming it, whatever the question; the fix line is
    a command, and running it passes."""
    wheel = rng.choice(_cached_vllm()).wheel
    version = f"0.29.{rng.randrange(10)}"
    _install(wheel, tmp_path / "site", version)
    for args in ((), ("--engine", "vllm")):
        p = _doctor(tmp_path / "site", *args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        (bad,) = [ln for ln in failing(p.stdout.splitlines()) if ln.startswith("FAIL vLLM:")]
        assert f"vllm {version}" in bad and "no manifest" in bad, bad
    fix = bad.split("; fix: ", 1)[1]
    assert fix.startswith("tileprobe doctor --engine vllm --engine-wheel "), fix
    command = fix.split(" (", 1)[0].split()
    again = _doctor(tmp_path / "site", *command[2:])
    assert again.returncode == 0, again.stdout
    (ok,) = [ln for ln in again.stdout.splitlines() if ln.startswith("ok   vLLM:")]
    assert command[-1] in ok and "a release tileprobe answers for" in ok, again.stdout
    # and --rules-off, the other fix it names, reads the install as it is
    off = _doctor(tmp_path / "site", "--engine", "vllm", "--rules-off")
    assert off.returncode == 0 and "RULES OFF" in off.stdout, off.stdout


def test_an_installed_release_with_a_manifest_is_one_tileprobe_answers_for(tmp_path):
    """The same install as the cached wheel of a release with a manifest (every file it lists): ok, named."""
    from tileprobe.engines import manifest, packages
    pkg = max(_cached_vllm(), key=lambda p: p.version)
    files = {rel for e in manifest.read("vllm", pkg.version)["entries"].values() for rel in e["files"]}
    _install(pkg.wheel, tmp_path / "site", files=files)
    assert packages.from_wheel(pkg.wheel).version == pkg.version
    p = _doctor(tmp_path / "site", "--engine", "vllm")
    (line,) = [ln for ln in p.stdout.splitlines() if "vLLM:" in ln]
    assert line.startswith("ok   vLLM:") and f"vLLM {pkg.version} ({tmp_path / 'site' / 'vllm'})" in line, p.stdout
