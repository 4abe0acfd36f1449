"""One release rule for every command that reads an engine (tileprobe.engines.manifest): check-configs, export
triton-configs, export flashinfer-blocklist and engines fetch hold a wheel to its release's manifest as the audit does
(a release with no manifest, or files that differ, is one line and exit 2; --rules-off reads it, and says so; a
re-typed piece the manifest records as not holding for a release is refused naming why), and every command that reads
Triton or an engine takes --rules-off and --any-triton. Real cached wheels, real pip."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tileprobe.engines import locate, manifest
from tileprobe.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
HELPER = "vllm/model_executor/layers/mamba/ops/mamba_ssm.py"
CONFIG = "E=8,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Workstation_Edition.json"


def _cli(*args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tileprobe", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)})


def _wheel(version: str) -> Path:
    found = [p.wheel for p in locate.releases("vllm") if p.wheel is not None and p.version == version]
    if not found:
        pytest.skip(f"no cached vllm {version} wheel")
    return Path(found[0])


def _copy(src: Path, out: Path, edit: float | None = None, version: str | None = None) -> Path:
    """The wheel's Python files and METADATA: `edit` plants a change in softplus (a @triton.jit helper of
    mamba_ssm.py), `version` makes it another release (its name and METADATA's Version)."""
    if version is not None:
        out = out.with_name(re.sub(r"^vllm-[^-]+-", f"vllm-{version}-", out.name))
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(out, "w") as w:
        for name in z.namelist():
            if not name.endswith((".py", ".dist-info/METADATA")):
                continue
            data = z.read(name)
            if name == HELPER and edit is not None:
                data, n = re.subn(rb"(@triton\.jit\s*\n(\s*)def softplus\(dt\):\n)",
                                  lambda m: m.group(1) + m.group(2) + f"    dt = dt * {edit}\n".encode(), data)
                assert n
            if version is not None and name.endswith(".dist-info/METADATA"):
                data = re.sub(rb"^Version: .*$", f"Version: {version}".encode(), data, count=1, flags=re.M)
            w.writestr(name, data)
    return out


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    """One small vLLM config file (one entry) for the RTX PRO 6000."""
    path = tmp_path_factory.mktemp("configs") / CONFIG
    path.write_text(json.dumps({"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1,
                                      "num_warps": 4, "num_stages": 3}}))
    return path


def test_every_command_that_reads_an_engine_or_triton_takes_rules_off_and_any_triton():
    import typer.main

    from tileprobe.cli import app

    root = typer.main.get_command(app)
    both = {"audit", "check-configs", "sweep", "autotune", "doctor", "export triton-configs"}
    engine_only = {"export flashinfer-blocklist", "engines fetch"}  # these read no Triton
    for path in sorted(both | engine_only):
        cmd = root
        for part in path.split():
            cmd = cmd.commands[part]
        flags = {o for p in cmd.params for o in p.opts}
        assert "--rules-off" in flags, path
        assert "--any-triton" in flags or path in engine_only, path


def test_check_configs_and_export_answer_vllm_0_34_0_through_its_own_launcher(config, tmp_path, rng):
    """vLLM 0.34.0 has a manifest, and its fused_moe_kernel takes parameters tileprobe's re-typed launch does not
    pass (b_desc, a_desc, group_n/group_k positions): check-configs and export form the launch with the release's own
    launcher (tileprobe.triton.captured) and answer with bytes, exit 0/1, where they used to refuse in one line
    (exit 2). A random entry each run. The triton-moe sweep, which still re-types the launch, still refuses it."""
    from tileprobe.triton.sweep import engine_release

    wheel = _wheel("0.34.0")
    assert manifest.supported("vllm", "0.34.0")
    entry = {"BLOCK_SIZE_M": rng.choice([16, 32, 64]), "BLOCK_SIZE_N": rng.choice([32, 64, 128]),
             "BLOCK_SIZE_K": rng.choice([32, 64, 128]), "GROUP_SIZE_M": rng.choice([1, 8]),
             "num_warps": rng.choice([4, 8]), "num_stages": rng.choice([2, 3, 4])}
    path = tmp_path / "in" / CONFIG
    path.parent.mkdir()
    path.write_text(json.dumps({str(rng.choice([1, 16, 256])): entry}))
    common = ("--engine", "vllm", "--engine-wheel", wheel, "--target", "rtx-pro-6000", "--hidden", "1024")
    p = _cli("check-configs", path, *common)
    assert p.returncode in (0, 1) and "of 2 entry launches do not fit" in p.stdout, p.stdout + p.stderr
    p = _cli("export", "triton-configs", path, "--out", tmp_path / "out", *common)
    assert p.returncode == 0, p.stdout + p.stderr
    prov = json.loads((tmp_path / "out" / "tileprobe-provenance.json").read_text())
    assert prov["engine"] == "vllm 0.34.0"
    got = next(iter(next(iter(prov["files"].values()))["entries"].values()))
    assert isinstance(got["original_bytes"], int) and all(
        "vllm 0.34.0's own launch" in s and "pointer path" in s for s in got["launches"].values()), got
    with pytest.raises(UsageError, match="triton-moe-launch.*group_n"):
        engine_release("vllm", str(wheel))


def test_a_modified_copy_is_refused_by_check_configs_and_export_and_read_with_rules_off(config, tmp_path, rng):
    edited = _copy(_wheel("0.33.0"), tmp_path / "w" / "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl",
                   edit=rng.choice([0.5, 2.0, 3.0]))
    cache = tmp_path / "cache"
    common = ("--engine", "vllm", "--engine-wheel", edited, "--target", "rtx-pro-6000", "--hidden", "1024",
              "--cache-dir", cache)
    for args in (("check-configs", config), ("export", "triton-configs", config, "--out", tmp_path / "out")):
        p = _cli(*args, *common)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and HELPER in lines[0] and "--rules-off" in lines[0], p.stderr
        assert not (tmp_path / "out").exists()
    p = _cli("check-configs", config, *common, "--rules-off")
    assert p.returncode in (0, 1) and "0 of 2 entry launches do not fit, 0 did not compile" in p.stdout, \
        p.stdout + p.stderr  # read, not refused (1: a file check-configs could not tie to the engine's MoE choice)
    assert any(ln.startswith("note: RULES OFF") and HELPER in ln for ln in p.stdout.splitlines()), p.stdout
    assert "0 distinct launches predicted" in p.stdout and "2 compiled" in p.stdout, p.stdout  # no rule asked
    p = _cli("export", "triton-configs", config, "--out", tmp_path / "out", *common, "--rules-off")
    assert p.returncode == 0, p.stdout + p.stderr
    prov = json.loads((tmp_path / "out" / "tileprobe-provenance.json").read_text())
    assert prov["rules_off"].startswith("RULES OFF") and HELPER in prov["rules_off"]
    assert prov["answers"]["predicted"] == 0 and prov["answers"]["compiled"] >= 1, prov["answers"]
    assert "RULES OFF" in p.stdout


def test_engines_fetch_of_a_release_with_a_manifest_caches_it_and_names_the_flashinfer_fallback(tmp_path):
    """`engines fetch vllm==0.34.0`: the wheel is there (cached), the flashinfer 0.7.3 it pins is not on the index
    here: exit 0, and one line saying so with the fallback release to fetch, one the index serves."""
    dest = tmp_path / "wheels"
    dest.mkdir()
    wheel = _wheel("0.34.0")
    (dest / wheel.name).symlink_to(wheel)
    p = _cli("engines", "fetch", "vllm==0.34.0", "--dest", dest)
    if "flashinfer-python 0.7.3:" in p.stdout:
        pytest.skip("this package index serves flashinfer-python 0.7.3")
    assert p.returncode == 0, p.stderr
    assert f"vllm 0.34.0: {dest / wheel.name}" in p.stdout
    notes = [ln for ln in p.stderr.splitlines() if "0.7.3" in ln and not ln.startswith("fetching ")]
    assert len(notes) == 1 and "pinned by vllm==0.34.0" in notes[0] and "not served" in notes[0], p.stderr
    fallback = re.search(r"`tileprobe engines fetch flashinfer-python==([^`]+)`", notes[0])
    assert fallback and fallback.group(1) != "0.7.3", notes[0]
    listed = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d",
                             str(tmp_path / "x"), "flashinfer-python==0.7.3"], capture_output=True, text=True,
                            timeout=300).stderr
    assert re.search(rf"from versions: [^)]*\b{re.escape(fallback.group(1))}\b", listed), listed[-500:]


def test_engines_fetch_of_a_release_with_no_manifest_caches_it_and_is_refused_in_one_line(tmp_path):
    dest = tmp_path / "wheels"
    other = _copy(_wheel("0.33.0"), dest / "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl", version="0.29.7")
    p = _cli("engines", "fetch", "vllm==0.29.7", "--dest", dest, "--no-flashinfer")
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("tileprobe: error:")]
    assert p.returncode == 2 and len(errors) == 1, p.stderr
    assert f"vllm 0.29.7 is cached ({other})" in errors[0] and "no manifest" in errors[0] and "--rules-off" in errors[0]
    p = _cli("engines", "fetch", "vllm==0.29.7", "--dest", dest, "--no-flashinfer", "--rules-off")
    assert p.returncode == 0 and "RULES OFF" in p.stdout, p.stdout + p.stderr


def test_the_blocklist_holds_the_engine_to_its_manifest_and_takes_a_chosen_flashinfer_only_with_rules_off(tmp_path):
    from tileprobe.engines import flashinfer, flashinfer_blocklist as blocklist

    other = _copy(_wheel("0.33.0"), tmp_path / "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl", version="0.29.8")
    p = _cli("export", "flashinfer-blocklist", "--engine", "vllm", "--engine-wheel", other, "--check",
             tmp_path / "none.json")
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "vllm 0.29.8" in lines[0] and "no manifest" in lines[0], p.stderr
    # vLLM 0.34.0 pins flashinfer 0.7.3; the user chooses another release's folder as the fallback
    wheel = _wheel("0.34.0")
    try:
        tree = flashinfer.find_flashinfer()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"no installed flashinfer: {exc}")
    if tree.version == "0.7.3":
        pytest.skip("the installed flashinfer is the pinned release")
    with pytest.raises(UsageError, match="--rules-off") as err:
        blocklist.release("vllm", wheel, tree.root)
    assert "0.7.3" in str(err.value) and tree.version in str(err.value)
    rel = blocklist.release("vllm", wheel, tree.root, rules_off=True)
    assert rel.banner.startswith("RULES OFF") and "0.7.3" in rel.banner and tree.version in rel.banner
    assert rel.tree.version == tree.version and rel.pin.version == "0.34.0"
