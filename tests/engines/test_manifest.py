"""The engine manifest (tileprobe.engines.manifest) and the dependency walk it is written from
(tileprobe.audit.dependencies): in a copy of the cached vLLM wheel with one @triton.jit helper edited (`softplus` in
mamba_ssm.py, which the Mamba-2 SSD kernels import from another file), Triton's own walk names that file for exactly
the entries whose kernels call it; an audit of the copy is refused with one line naming the file and those entries
(exit 2); with --rules-off every stated rule declines and the rows say so. The same copy unedited matches. A file
only the walk reaches (triton_kernels' helpers of the gpt-oss MoE, outside the entries' served-module lists) is
guarded too."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tokenize
import zipfile
from pathlib import Path

import pytest

from tileprobe.engines import manifest
from tileprobe.engines.triton_configs import find_engine
from tileprobe.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
HELPER = "vllm/model_executor/layers/mamba/ops/mamba_ssm.py"
OGS_HELPER = "vllm/third_party/triton_kernels/numerics_details/flexpoint.py"  # @triton.jit helpers of matmul_ogs


@pytest.fixture(scope="module")
def slim(tmp_path_factory):
    """A copy of the cached vLLM wheel (the release the engine lookup prefers) with its Python and JSON files only
    (tens of MB, not 336: no compiled extension is read by the manifest, the walk or the Triton launches)."""
    try:
        src = find_engine("vllm", None)
    except UsageError as exc:
        pytest.skip(f"no vllm wheel: {exc}")
    want = manifest.read("vllm", src.version)
    if want is None:
        pytest.skip(f"{src.label()}: no manifest")
    folder = tmp_path_factory.mktemp("slim")
    out = folder / Path(src.origin).name
    with zipfile.ZipFile(src.origin) as z, zipfile.ZipFile(out, "w") as w:
        for name in z.namelist():
            if name.endswith((".py", ".json", ".dist-info/METADATA")):
                w.writestr(name, z.read(name))
    return out, want


def _edited(slim, folder: Path, rel: str = HELPER, scale: float = 2.0) -> Path:
    """The slim copy with a planted change in a @triton.jit helper's body (a new first statement: same name, other
    code): `softplus` in mamba_ssm.py, or the first @triton.jit function of `rel`."""
    path, _ = slim
    folder.mkdir(parents=True, exist_ok=True)
    edited = folder / path.name
    with zipfile.ZipFile(path) as z, zipfile.ZipFile(edited, "w") as w:
        for name in z.namelist():
            data = z.read(name)
            if name == rel:
                text = data.decode()
                pattern = (r"(@triton\.jit\s*\n(\s*)def softplus\(dt\):\n)" if rel == HELPER else
                           r"(@triton\.jit\s*\n(\s*)def \w+\([^)]*\)[^:]*:\n)")
                text, n = re.subn(pattern, lambda m: f"{m.group(1)}{m.group(2)}    _tileprobe_planted = {scale}\n",
                                  text, count=0 if rel == HELPER else 1)
                assert n, f"no @triton.jit helper to edit in {rel}"
                data = text.encode()
            w.writestr(name, data)
    return edited


@pytest.fixture(scope="module")
def edited_walk(slim, tmp_path_factory):
    """The edited copy and Triton's dependency walk of every vLLM audit entry in it."""
    from tileprobe.audit import dependencies
    from tileprobe.audit.kernels import kernels_for

    edited = _edited(slim, tmp_path_factory.mktemp("edited"))
    src = find_engine("vllm", edited)
    return edited, dependencies.walk(src, kernels_for("vllm"), tmp_path_factory.mktemp("walk-cache"))


def _calls_softplus(src, entry) -> bool:
    """Independent of Triton: does the code of a module the entry serves call `softplus(...)` (Python's tokens: not
    a definition, a comment or a string)?"""
    for module in sorted(set(entry.allow) | {entry.module}):
        rel = manifest.module_file(src, module)
        if rel is None:
            continue
        toks = [t for t in tokenize.generate_tokens(io.StringIO(src.read_text(rel)).readline)
                if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)]
        if any(t.string == "softplus" and t.type == tokenize.NAME and toks[i + 1].string == "("
               and toks[i - 1].string != "def" for i, t in enumerate(toks[1:-1], 1)):
            return True
    return False


def test_the_walk_names_an_edited_helper_for_exactly_the_entries_whose_kernels_call_it(edited_walk):
    from tileprobe.audit.kernels import kernels_for

    edited, walked = edited_walk
    src = find_engine("vllm", edited)
    callers = sorted(k.name for k in kernels_for("vllm") if _calls_softplus(src, k))
    named = sorted(name for name, files in walked.items() if isinstance(files, list) and HELPER in files)
    assert callers and named == callers, (named, callers)
    # the walk crosses modules: an SSD kernel's file is walked beside the helper's (it imports softplus from there)
    chunk = walked["vllm-mamba2-chunk-scan"]
    assert "vllm/model_executor/layers/mamba/ops/ssd_chunk_state.py" in chunk and HELPER in chunk


def test_the_walk_reaches_files_no_served_module_list_names(edited_walk):
    """gpt-oss's MXFP4 MoE calls triton_kernels (served as an alias package, not in AuditKernel.allow): the walk
    names its @triton.jit helper files, and the manifest guards them."""
    from tileprobe.audit.kernels import KERNELS

    edited, walked = edited_walk
    src = find_engine("vllm", edited)
    k = KERNELS["vllm-moe-mxfp4-decode"]
    listed = {manifest.module_file(src, m) for m in (*k.allow, k.module)}
    beyond = [f for f in walked[k.name] if f not in listed]
    assert OGS_HELPER in beyond, walked[k.name]
    # each a file of Triton callables: @triton.jit, or @triton.constexpr_function (a JITCallable Triton hashes too)
    assert all(re.search(r"@triton\.(jit|constexpr_function)\b", src.read_text(f)) for f in beyond), beyond


def test_the_copy_matches_and_an_edited_helper_is_refused_naming_every_entry_that_uses_it(slim, edited_walk,
                                                                                          tmp_path):
    path, want = slim
    assert manifest.check(find_engine("vllm", path)).text == ""
    edited, walked = edited_walk
    users = sorted(name for name, files in walked.items() if isinstance(files, list) and HELPER in files)
    with pytest.raises(UsageError) as err:
        manifest.check(find_engine("vllm", edited))
    assert HELPER in str(err.value) and all(u in str(err.value) for u in users), err.value
    p = subprocess.run([sys.executable, "-m", "tileprobe", "audit", "--engine", "vllm", "--engine-wheel", str(edited),
                        "--model", "nemotron-h-8b", "--target", "rtx-pro-6000", "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=os.environ | {"PYTHONPATH": str(ROOT)})
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert HELPER in lines[0] and "--rules-off" in lines[0] and all(u in lines[0] for u in users), p.stderr
    assert not (tmp_path / "out").exists()


def test_an_edited_file_only_the_walk_names_is_refused(slim, tmp_path):
    edited = _edited(slim, tmp_path / "ogs", OGS_HELPER)
    with pytest.raises(UsageError) as err:
        manifest.check(find_engine("vllm", edited))
    assert OGS_HELPER in str(err.value) and "vllm-moe-mxfp4-decode" in str(err.value), err.value


def test_rules_off_every_rule_declines_and_the_rows_say_so(edited_walk, tmp_path):
    edited, _ = edited_walk
    banner = manifest.check(find_engine("vllm", edited), rules_off=True).text
    assert banner.startswith("RULES OFF") and HELPER in banner
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "tileprobe", "audit", "--engine", "vllm", "--engine-wheel", str(edited),
                        "--model", "nemotron-h-8b", "--target", "rtx-pro-6000", "--out", str(out), "--rules-off",
                        "--kernel", "vllm-mamba2-selective-state-update", "--batch", "1",
                        "--cache-dir", str(tmp_path / "cache")],
                       capture_output=True, text=True, timeout=600, cwd=ROOT,
                       env=os.environ | {"PYTHONPATH": str(ROOT)})
    assert p.returncode in (0, 1, 3), p.stdout[-2000:] + p.stderr[-2000:]
    assert "RULES OFF" in p.stdout and HELPER in p.stdout
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    triton = [r for r in rows if r["family"] == "triton-audit"]
    assert triton and all(r["prediction"].startswith("cannot predict: rules off") for r in triton), \
        [r["prediction"] for r in triton]
    assert " 0 predicted" in p.stdout
    assert json.loads((out / "run.json").read_text())["rules_off"] == banner
    assert (out / "report.md").read_text().startswith(f"> **{banner}**")


def test_a_release_with_no_manifest_is_refused_and_named(slim, tmp_path):
    path, _ = slim
    with pytest.raises(UsageError, match="no manifest for this release") as err:
        manifest.check(find_engine("vllm", _renamed(path, tmp_path, "0.29.9")))
    assert "vllm 0.29.9" in str(err.value) and "--rules-off" in str(err.value)
    banner = manifest.check(find_engine("vllm", _renamed(path, tmp_path / "b", "0.29.9")), rules_off=True).text
    assert banner.startswith("RULES OFF") and "0.29.9" in banner


def _renamed(path: Path, tmp_path: Path, version: str) -> Path:
    """The same files as another release: its name and its METADATA's Version."""
    name = re.sub(r"^vllm-[^-]+-", f"vllm-{version}-", path.name)
    out = tmp_path / "renamed" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path) as z, zipfile.ZipFile(out, "w") as w:
        for name in z.namelist():
            data = z.read(name)
            if name.endswith(".dist-info/METADATA"):
                data = re.sub(rb"^Version: .*$", f"Version: {version}".encode(), data, count=1, flags=re.M)
            w.writestr(name, data)
    return out


def test_the_committed_manifest_lists_what_each_entry_serves_reads_and_walks_now(slim, edited_walk):
    """The pinned release's manifest is what `tools/engine_manifest.py write` would write from tileprobe's entries as
    they are now (the same files per entry, the same walk, the same sha256 but the planted helper's): an entry whose
    served modules or read files change without the manifest written again fails here, not silently unguarded."""
    from tileprobe.audit.kernels import kernels_for

    edited, walked = edited_walk
    _, want = slim
    built = manifest.build(find_engine("vllm", edited), kernels_for("vllm"), walked)["entries"]
    assert sorted(built) == sorted(want["entries"])
    for name, got in built.items():
        listed = want["entries"][name]
        assert sorted(got["files"]) == sorted(listed["files"]), (name, set(got["files"]) ^ set(listed["files"]))
        assert got["walk"] == listed["walk"], name
        assert {rel for rel, sha in got["files"].items() if sha != listed["files"][rel]} <= {HELPER}, name
