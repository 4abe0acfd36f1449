"""FlashInfer tactics blocklists: FlashInfer's own loader accepts what tileprobe writes and filters exactly the
blocked IDs; --check catches an upgrade that renumbers tactics; diff lists moved IDs; bad input is one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tileprobe.engines import flashinfer_blocklist as blocklist
from tileprobe.engines import flashinfer_blocklist_check as bl_check
from tileprobe.results import resultset
from tileprobe.engines import flashinfer as ef
from tileprobe.engines import flashinfer_tactic_ids as tid
from tileprobe.errors import UsageError
from tileprobe import targets
from tileprobe.targets import device_names

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = {t: ROOT / "results" / "static" / f"{t}__flashinfer-moe"
          for t in ("rtx-pro-6000", "rtx-5090", "dgx-spark-gb10")}


def _installed() -> ef.FlashinferTree:
    try:
        return ef.find_flashinfer()
    except UsageError as exc:
        pytest.skip(str(exc))


def _fake_tree(tmp_path: Path, edit=None, loader: bool = True, version: str | None = None) -> Path:
    """A flashinfer-shaped folder: copies of the sources tileprobe reads (heuristic, dispatch, traits, the blocklist
    loader and autotuner), `edit(heuristic_text)` applied to cutlass_heuristic.cpp, empty header folders."""
    real = _installed()
    site = tmp_path / "site"
    root = site / "flashinfer"
    rels = [ef.HEURISTIC, ef.DISPATCH, ef.TRAITS, Path("autotuner") / "autotuner.py", Path("version.py")]
    rels += [Path("tactics_blocklist.py")] if loader else []
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(real.root / rel, root / rel)
    if edit:
        (root / ef.HEURISTIC).write_text(edit((root / ef.HEURISTIC).read_text()))
    for rel in ("data/cutlass/include", "data/cutlass/tools/util/include",
                "data/csrc/nv_internal/tensorrt_llm/cutlass_extensions/include"):
        (root / rel).mkdir(parents=True, exist_ok=True)
    (root / "_build_meta.py").write_text(f'__version__ = "{version or real.version}"\n')
    meta = site / f"flashinfer_python-{version or real.version}.dist-info" / "METADATA"
    meta.parent.mkdir()
    meta.write_text(f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {version or real.version}\n")
    return root


def _move_first_to_end(text: str, tile: str) -> str:
    """Move `tile` to the end of get_candidate_configs_sm120's all_tiles[] (what an upgrade that reorders does)."""
    start = text.index("all_tiles[] = {")
    end = text.index("};", start)
    block = text[start:end]
    entry = f"CutlassTileConfigSM120::{tile},"
    assert entry in block
    block = block.replace(entry, "", 1).rstrip() + f" {entry}\n  "
    return text[:start] + block + text[end:]


def tileprobe(*args):
    return subprocess.run([sys.executable, "-m", "tileprobe", *args], capture_output=True, text=True, timeout=600)


# ---------------------------------------------------------------------------------------------------------------
# FlashInfer's own loader (deliver 3)
# ---------------------------------------------------------------------------------------------------------------


def test_flashinfers_loader_filters_exactly_the_blocked_ids(tmp_path, rng, monkeypatch):
    _installed()
    torch = pytest.importorskip("torch")
    # Imports on a machine without a GPU or CUDA runtime (torch is the CPU build here).
    from flashinfer.tactics_blocklist import TacticsBlocklist

    target = rng.choice(sorted(SWEEPS))
    gpu = rng.choice(device_names(target))
    other = rng.choice([n for t in SWEEPS for n in device_names(t) if n != gpu])
    print(f"target {target}, gpu {gpu!r}, other {other!r}")
    rs = resultset.load(SWEEPS[target])
    exports = blocklist.export(rs, target, tmp_path / "out", None, ["on", "off"], [gpu], model_only=True)
    assert len(exports) == 4  # two dtype pairs x finalize on/off
    assert any(e.blocked for e in exports), "the committed sweep has over-limit tactics; none blocked"
    rows = {r["config"]: r for r in rs.static}

    class MoERunner:  # the autotuner keys a runner by its class name only
        pass

    for e in exports:
        doc = json.loads(e.path.read_text())
        # Every blocked ID's config is over the limit in the sweep, and every in-list config that is over is blocked.
        over = {t.id for t in e.ids if rows[t.config.name]["verdict"] == "smem-over-limit"}
        listed = {i for ids in doc["invalid_tactics"].values() for i in ids}
        assert listed == over
        assert all(b["evidence"] == "sized" for b in doc["tileprobe"]["blocked"])

        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: gpu)
        bl = TacticsBlocklist()
        assert bl.load(str(e.path)) is True
        n1 = sum(t.gemm == "gemm1" for t in e.ids)
        n2 = len(e.ids) - n1
        # As MoERunner.get_valid_tactics offers them: gemm1 0..n1-1, gemm2 n1..n1+n2-1.
        for gemm, full in (("gemm1", list(range(n1))), ("gemm2", list(range(n1, n1 + n2)))):
            key = tid.OP_KEYS[gemm]
            op = key.rsplit("::", 1)[0]
            kept = bl.filter(op, MoERunner(), full)
            blocked = set(doc["invalid_tactics"][key])
            assert kept == [t for t in full if t not in blocked]
            assert set(full) - set(kept) == blocked

        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: other)
        skipped = TacticsBlocklist()
        assert skipped.load(str(e.path)) is False
        assert skipped.filter("trtllm::fused_moe::gemm2", MoERunner(), list(range(len(e.ids)))) == \
            list(range(len(e.ids)))


# ---------------------------------------------------------------------------------------------------------------
# The guard: check and diff (deliver 4)
# ---------------------------------------------------------------------------------------------------------------


def _export_one(tmp_path: Path, model_only: bool = True) -> Path:
    out = tmp_path / "bl.json"
    blocklist.export(resultset.load(SWEEPS["rtx-pro-6000"]), "rtx-pro-6000", out, ["nvfp4xnvfp4"], ["on"],
                     [device_names("rtx-pro-6000")[0]], model_only=model_only)
    return out


def test_check_in_the_model_is_unchanged_for_the_same_numbering(tmp_path):
    path = _export_one(tmp_path)
    assert json.loads(path.read_text())["tileprobe"]["numbering"]["state"] == "model-unchecked"
    res = bl_check.check(path, model_only=True)
    assert res.problems == [] and len(res.notes) == 1 and "unchecked" in res.notes[0]
    assert not res.numbering.exact and "unchecked" in res.verdict() and "exact" not in res.verdict().split()
    same = _fake_tree(tmp_path)  # an identical heuristic: the numbering is the same, only the tree hash differs
    res = bl_check.check(path, same, model_only=True)
    assert res.problems == [] and any("re-run the sweep" in n for n in res.notes)


@pytest.mark.nvcc
def test_check_is_exact_against_the_engines_own_enumeration(tmp_path):
    path = _export_one(tmp_path, model_only=False)
    assert json.loads(path.read_text())["tileprobe"]["numbering"]["state"] == "exact"
    res = bl_check.check(path, nvcc=blocklist.find_nvcc_or_none(None))
    assert res.problems == [] and res.notes == [] and res.verdict() == "exact" and res.numbering.compared > 0


def test_check_names_each_moved_id_after_an_upgrade(tmp_path):
    path = _export_one(tmp_path)
    blocked = json.loads(path.read_text())["invalid_tactics"][tid.OP_KEYS["gemm2"]]
    assert blocked
    upgraded = _fake_tree(tmp_path, lambda t: _move_first_to_end(t, "CtaShape128x128x128B"))
    problems = bl_check.check(path, upgraded, model_only=True).problems
    then = {e[0]: tuple(e[1:]) for e in json.loads(path.read_text())["tileprobe"]["tactics"]}
    now = {t.id: (t.gemm, t.tactic, t.epilogue, t.swap_ab) for t in tid.tactic_ids("nvfp4xnvfp4", True,
                                                                                   flashinfer_dir=upgraded)}
    changed = sorted(i for i in then if then[i] != now.get(i))
    assert changed and len(problems) == len(changed)
    for i, line in zip(changed, problems):
        assert line.startswith(("blocked ID " if i in blocked else "ID ") + f"{i}:")
    # The blocked variants moved one place down: each line says where the variant went.
    for i in blocked:
        line = next(p for p in problems if p.startswith(f"blocked ID {i}:"))
        assert f"now ID {i - 1}" in line
    p = tileprobe("export", "flashinfer-blocklist", "--check", str(path), "--flashinfer-dir", str(upgraded),
                  "--model-only")
    assert p.returncode == 1, p.stdout + p.stderr
    assert sum(l.startswith("CHANGED ") for l in p.stdout.splitlines()) == len(changed)


def test_diff_lists_the_ids_that_moved(tmp_path, rng):
    tile = rng.choice([t.name for t in ef.sm120_tactics(0, _installed())][:-1])
    print(f"moved {tile} to the end")
    new = _fake_tree(tmp_path, lambda t: _move_first_to_end(t, tile))
    lines, notes = bl_check.diff_installs(_installed().root, new, ["nvfp4xnvfp4"], ["on"], model_only=True)
    assert len(notes) == 2 and all("unchecked" in n for n in notes)
    old_ids = {t.key(): t.id for t in tid.tactic_ids("nvfp4xnvfp4", True)}
    new_ids = {t.key(): t.id for t in tid.tactic_ids("nvfp4xnvfp4", True, flashinfer_dir=new)}
    assert len(lines) == sum(old_ids[k] != new_ids[k] for k in old_ids) > 0
    assert all(l.startswith("nvfp4xnvfp4 finalize on: ") and " -> " in l for l in lines)
    assert bl_check.diff_installs(_installed().root, _fake_tree(tmp_path / "same"), model_only=True)[0] == []


# ---------------------------------------------------------------------------------------------------------------
# Bad input (deliver 6)
# ---------------------------------------------------------------------------------------------------------------


def _bad_cases(tmp_path: Path) -> list[tuple[list[str], str]]:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    old = _fake_tree(tmp_path / "old", loader=False)
    other = _fake_tree(tmp_path / "other", version="0.0.1")
    sweep = str(SWEEPS["rtx-pro-6000"])
    base = ["export", "flashinfer-blocklist"]
    return [
        (base + [sweep, "--target", "rtx-9090", "--out", str(tmp_path / "o")], "unknown target"),
        (base + [str(ROOT / "results" / "static" / "rtx-pro-6000__sm120-nvfp4"), "--target", "rtx-pro-6000",
                 "--out", str(tmp_path / "o")], "no flashinfer-moe rows"),
        (base + [sweep, "--target", "rtx-pro-6000", "--out", str(tmp_path / "o"), "--flashinfer-dir", str(old)],
         "cannot read tactics blocklists"),
        (base + [sweep, "--target", "rtx-pro-6000", "--out", str(tmp_path / "o"), "--flashinfer-dir", str(other)],
         "re-run the sweep"),
        # --model-only: the write fails after the export is made; without it the export first compiles the engine's
        # tactic enumeration with nvcc (about 30 CPU s, test_check_is_exact_against_the_engines_own_enumeration's)
        (base + [sweep, "--target", "rtx-pro-6000", "--out", str(blocker / "x.json"), "--dtypes", "nvfp4xnvfp4",
                 "--gpu-name", "G", "--model-only"], "cannot write"),
        (base + [sweep, "--target", "h200", "--out", str(tmp_path / "o")], "SM120"),
        (base + ["--check", str(blocker)], "not a JSON blocklist"),
        # Refused because they cannot be right (deliver 4):
        (base + [sweep, "--target", "rtx-pro-6000", "--out", str(tmp_path / "o"), "--gpu-name", "NVIDIA H200"],
         "is a h200 (sm_90a), not rtx-pro-6000"),
        (base + [sweep, "--target", "rtx-pro-6000", "--out", str(tmp_path / "o"), "--gpu-name", "NVIDIA GB10"],
         "is a dgx-spark-gb10 (sm_121a)"),
        (base + [sweep, "--target", "rtx-pro-6000", "--out", str(tmp_path / "o"), "--finalize", "on,on"],
         "names on twice"),
        (base + [sweep, "--target", "rtx-pro-6000", "--out", str(tmp_path / "o"), "--dtypes",
                 "mxfp8xmxfp4,mxfp8xmxfp4"], "names mxfp8xmxfp4 twice"),
        (base + ["--check", str(blocker), "--target", "rtx-pro-6000"], "--target only apply to an export"),
        (base + ["--check", str(blocker), "--finalize", "off", "--jobs", "3"], "--finalize, --jobs only apply"),
        (base + [sweep, "--target", "rtx-pro-6000", "--out", str(tmp_path / "o"), "--engine", "tgi"],
         "expected one of vllm, sglang, flashinfer"),
        (base + [sweep, "--target", "rtx-pro-6000", "--out", str(tmp_path / "o"), "--verify", "--model-only"],
         "contradict"),
        (["check", "--jobs", "0"], "--jobs must be at least 1"),
    ]


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    _installed()
    for args, needle in _bad_cases(tmp_path):
        p = tileprobe(*args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr + p.stdout
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        assert len(lines) == 1 and needle in lines[0], (args, p.stderr)


def test_predicted_rows_make_a_predicted_blocklist_only_when_asked(tmp_path):
    """Evidence comes from the rows: a --predict-only sweep's file says 'predicted', and is refused without
    --allow-predicted (deliver 3)."""
    sweep = tmp_path / "pred"
    p = tileprobe("sweep", "--family", "flashinfer-moe", "--target", "rtx-pro-6000", "--predict-only", "--dtypes",
                  "nvfp4xnvfp4", "--out", str(sweep), "--json")
    assert p.returncode == 0, p.stderr
    gpu = device_names("rtx-pro-6000")[0]
    args = ["export", "flashinfer-blocklist", str(sweep), "--target", "rtx-pro-6000", "--dtypes", "nvfp4xnvfp4",
            "--gpu-name", gpu, "--model-only", "--out"]
    p = tileprobe(*args, str(tmp_path / "refused.json"))
    assert p.returncode == 2 and "--allow-predicted" in p.stderr and not (tmp_path / "refused.json").exists()
    p = tileprobe(*args, str(tmp_path / "pred.json"), "--allow-predicted")
    assert p.returncode == 0, p.stderr
    doc = json.loads((tmp_path / "pred.json").read_text())
    assert doc["tileprobe"]["evidence"] == "predicted" and "model" in doc["tileprobe"]["evidence_note"]
    assert "evidence: predicted" in p.stdout
    assert doc["tileprobe"]["blocked"] and all(b["evidence"] == "predicted" for b in doc["tileprobe"]["blocked"])
    (tmp_path / "s").mkdir()
    sized = json.loads(_export_one(tmp_path / "s").read_text())
    assert sized["tileprobe"]["evidence"] == "sized"
    # The model and the sizes agree here, so the same IDs are listed: only the word differs.
    assert doc["invalid_tactics"] == sized["invalid_tactics"]


def test_the_file_is_replaced_atomically(tmp_path, monkeypatch):
    """A write that fails half-way (disk full after half the text) leaves the previous file whole, and no temporary
    file behind: the engine reads the file at start-up with no guard."""
    path = _export_one(tmp_path)
    before = path.read_text()
    real_fdopen = os.fdopen

    class HalfThenFull:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, text):
            self.f.write(text[: len(text) // 2])
            self.f.flush()
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(blocklist.os, "fdopen", lambda fd, mode: HalfThenFull(real_fdopen(fd, mode)))
    with pytest.raises(UsageError, match="No space left"):
        _export_one(tmp_path)
    monkeypatch.undo()
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bl.json"]


def test_committed_blocklists_are_current(tmp_path):
    """results/blocklists/flashinfer-0.7.4/ says what its sweeps and the installed flashinfer say today: each file is
    unchanged, and a fresh export from the committed rows lists the same IDs with the same evidence. (The vLLM and
    SGLang files are checked against their own releases in tests/engines/test_blocklist_engines.py.)"""
    files = sorted((ROOT / "results" / "blocklists" / f"flashinfer-{_installed().version}").rglob("*.json"))
    names = sum(len(v) for k, v in targets.DEVICE_NAMES.items() if targets.profile(k).arch in tid.SM120_ARCHS)
    assert len(files) == names * 4  # each SKU name x 2 pairs x 2 finalize modes
    for f in files:
        doc = json.loads(f.read_text())
        res = bl_check.check(f, model_only=True)
        assert res.problems == [] and res.notes == [res.numbering.note], (f, res.problems, res.notes)
        prov = doc["tileprobe"]
        (fresh,) = blocklist.export(resultset.load(ROOT / prov["rows"]), prov["target"], tmp_path / f.name,
                                    [prov["dtypes"]], [prov["finalize_fusion"]], [doc["_metadata"]["gpu"]],
                                    model_only=True)
        again = json.loads(fresh.path.read_text())
        assert again["invalid_tactics"] == doc["invalid_tactics"], f
        assert again["tileprobe"]["evidence"] == prov["evidence"] == "sized"
        assert all(b["evidence"] == "sized" for b in prov["blocked"])


def _tree_without(tmp_path: Path, missing: list[Path]) -> Path:
    """The installed flashinfer's package, linked file by file along the paths to `missing` and folder by folder
    elsewhere, without the files `missing` names: everything getTactics compiles from, except those."""
    real = _installed().root
    site = tmp_path / "site"
    root = site / "flashinfer"
    parts = {p for m in missing for p in m.parents if str(p) != "."}

    def link(rel: Path) -> None:
        for child in sorted((real / rel).iterdir()):
            r = rel / child.name
            if r in missing:
                continue
            if r in parts:
                (root / r).mkdir(parents=True, exist_ok=True)
                link(r)
            else:
                (root / r).parent.mkdir(parents=True, exist_ok=True)
                (root / r).symlink_to(child)

    link(Path("."))
    meta = site / f"flashinfer_python-{_installed().version}.dist-info" / "METADATA"
    meta.parent.mkdir()
    meta.write_text(f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {_installed().version}\n")
    return root


@pytest.mark.nvcc
def test_check_is_not_exact_for_a_tree_whose_enumeration_does_not_compile(tmp_path):
    """The review's repro: a flashinfer tree without the headers getTactics lives in (moe_gemm_template_dispatch.h,
    moe_kernels.h) numbers tactics nobody can check. tileprobe's model still reads it (so --model-only says
    'unchanged ... unchecked'); with nvcc present, --check compiles the engine's own enumeration, fails to, and says
    so instead of "exact" (exit 2). Before the fix it said "exact" and exited 0."""
    path = _export_one(tmp_path)
    kernels = ef.HEURISTIC.parent
    fake = _tree_without(tmp_path, [kernels / "moe_gemm" / "moe_gemm_template_dispatch.h",
                                    kernels / "include" / "moe_kernels.h"])
    assert (fake / ef.HEURISTIC).is_file() and not (fake / kernels / "include" / "moe_kernels.h").exists()
    model = tileprobe("export", "flashinfer-blocklist", "--check", str(path), "--flashinfer-dir", str(fake),
                      "--model-only")
    assert model.returncode == 0 and "unchecked" in model.stdout.splitlines()[-1], model.stdout + model.stderr
    p = tileprobe("export", "flashinfer-blocklist", "--check", str(path), "--flashinfer-dir", str(fake))
    said = p.stdout + p.stderr
    assert p.returncode == 2, said
    assert "Traceback" not in said and not any(l.rstrip().endswith(f"exact for flashinfer {_installed().version}")
                                               for l in said.splitlines()), said
    assert "own tactic enumeration does not compile" in p.stderr and "not called exact" in p.stderr, said
    assert "moe_gemm_template_dispatch.h" in p.stderr or "moe_kernels.h" in p.stderr, said


def test_explain_gives_the_stage_count_that_would_fit(rng):
    """The blocked tactics' stage answer: under the 3 stages the carveout picks, 2 would fit. The model's 2-stage
    mainloop equals the committed sized row of the swap-AB twin (which the carveout builds with 2 stages), and its
    epilogue the sized no-swap finalize row's."""
    tactic = rng.choice(["CtaShape256x128x64B", "CtaShape128x256x64B"])
    p = tileprobe("explain", tactic, "--family", "flashinfer-moe", "--target", "rtx-pro-6000", "--epilogue",
                  "finalize", "--predict-only")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    i = next(k for k, l in enumerate(lines) if "nvfp4xnvfp4 gemm2 (finalize) swap off" in l)
    assert "OVER by 1024 B" in lines[i] and "(3 stages)" in lines[i]
    rows = [json.loads(l) for l in (SWEEPS["rtx-pro-6000"] / "results.jsonl").read_text().splitlines()]
    twin = next(r for r in rows if r["tactic"] == tactic and r["epilogue"] == "finalize" and r["swap_ab"]
                and r["dtypes"] == "nvfp4xnvfp4")
    over = next(r for r in rows if r["tactic"] == tactic and r["epilogue"] == "finalize" and not r["swap_ab"]
                and r["dtypes"] == "nvfp4xnvfp4")
    assert twin["stages"] == 2 and over["verdict"] == "smem-over-limit"
    assert lines[i + 1].strip().startswith("2 stage(s) would fit:")
    assert f"mainloop {twin['smem_mainloop_bytes']} + epilogue {over['smem_epilogue_bytes']}" in lines[i + 1]
    assert "predicted" in lines[i + 1]


def test_another_sm120_gpu_gets_its_files_from_rows_of_the_same_arch_and_limit(tmp_path, rng):
    """An RTX 5080 (or any SM120 profile without its own sweep) gets files under its exact device names from
    rtx-pro-6000's rows, said so in the file; rows of another arch (GB10, sm_121a) are refused."""
    target = rng.choice(["rtx-5080", "rtx-5070-ti", "rtx-5070", "rtx-5060-ti", "rtx-pro-5000", "rtx-pro-4500",
                         "rtx-pro-4000"])
    out = tmp_path / target
    exports = blocklist.export(resultset.load(SWEEPS["rtx-pro-6000"]), target, out, ["nvfp4xnvfp4"], ["on"],
                               model_only=True)
    assert sorted(e.gpu for e in exports) == sorted(device_names(target))
    same = json.loads(_export_one(tmp_path).read_text())
    for e in exports:
        doc = json.loads(e.path.read_text())
        assert doc["_metadata"]["gpu"] == e.gpu and doc["invalid_tactics"] == same["invalid_tactics"]
        assert doc["tileprobe"]["rows_target"] == "rtx-pro-6000" and "sm_120a" in doc["tileprobe"]["rows_note"]
        assert doc["tileprobe"]["target"] == target
    with pytest.raises(UsageError, match="nor for another sm_120a target"):
        blocklist.export(resultset.load(SWEEPS["dgx-spark-gb10"]), target, tmp_path / "x", model_only=True)
