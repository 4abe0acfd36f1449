"""check-configs and export triton-configs: bad input is one line and exit 2; an over-limit entry is caught with
Triton's own bytes; an exported folder is what the engine's own lookup (from its source) loads for each SKU name.

Compiling tests need Triton (the pinned 3.8.0) and the engine (installed or a wheel in $TILEPROBE_ENGINE_WHEELS);
they are skipped without them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _engine_exec import sglang_namespace, vllm_namespace
from tileprobe.backends.triton.toolchain import installed
from tileprobe.engines import triton_configs as tc
from tileprobe.engines import sglang, vllm
from tileprobe.errors import UsageError
from tileprobe.families import triton_moe as tm
from tileprobe.targets import DEVICE_NAMES, PROFILES

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args, env=None, timeout=900):
    return subprocess.run([sys.executable, "-m", "tileprobe", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=(os.environ | {"PYTHONPATH": str(ROOT)}) | (env or {}))


def _one_line_exit_2(p):
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tileprobe: error:") and "Traceback" not in p.stderr, p.stderr
    return lines[0]


def test_malformed_config_json_is_one_line(tmp_path, rng):
    name = f"E={rng.choice([8, 64, 128])},N={rng.choice([256, 768])},device_name=NVIDIA_GB10.json"
    good = {"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1}}
    text = json.dumps(good)
    for bad in (text[:-rng.randint(1, 8)], json.dumps({"one": good["1"]}), json.dumps([good["1"]])):
        (tmp_path / name).write_text(bad)
        line = _one_line_exit_2(_cli("check-configs", tmp_path / name, "--engine", "vllm"))
        assert name in line and "malformed config JSON" in line


def test_unknown_device_name_and_scheme_are_one_line(tmp_path):
    f = tmp_path / "E=8,N=256,device_name=NVIDIA_H200.json"
    f.write_text(json.dumps({"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1}}))
    line = _one_line_exit_2(_cli("export", "triton-configs", f, "--target", "rtx-5090", "--out", tmp_path / "o",
                                 "--device-name", "NVIDIA GeForce RTX 5090 Ti"))
    assert "unknown device name" in line
    with pytest.raises(UsageError, match="int4"):
        tc.scheme("int4")


def test_no_engine_and_no_wheel_is_one_line_and_the_fetch_that_fixes_it(tmp_path):
    if tc.package_dir("vllm") is not None:
        pytest.skip("vllm is installed here")
    p = _cli("check-configs", "--engine", "vllm", env={tc.WHEELS_ENV: str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)})
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    error, fix = p.stderr.strip().splitlines()
    assert error.startswith("tileprobe: error: need vllm: it is not installed") and \
        fix == f"help: tileprobe engines fetch vllm=={tc.PINNED['vllm']}"


def _compiling():
    if installed() is None:
        pytest.skip("Triton is not installed")
    try:
        return tc.find_engine("vllm")
    except UsageError as exc:
        pytest.skip(str(exc))


def _entry(rng, big: bool) -> dict:
    if big:  # (num_stages - 1) * (BM*BK + BK*BN) bf16 tiles alone: 3 * (128*128 + 128*256) * 2 = 294912 B
        return {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": rng.choice([1, 16]),
                "num_warps": 8, "num_stages": 4}
    return {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": rng.choice([32, 64]), "BLOCK_SIZE_K": rng.choice([64, 128]),
            "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": rng.choice([2, 3])}


@pytest.mark.parametrize("target", ["rtx-pro-6000", "rtx-4090"])
def test_check_configs_flags_the_over_limit_entry_with_compiled_bytes(target, tmp_path, rng):
    """A file named after the device is judged on that device (sm_120a / sm_89) by default."""
    _compiling()
    dev = rng.choice(DEVICE_NAMES[target])
    f = tmp_path / vllm.config_file_name(128, 768, tc.scheme("bf16"), dev)
    small_key, big_key = rng.sample([1, 2, 4, 8, 16, 32, 64], 2)
    f.write_text(json.dumps({str(small_key): _entry(rng, False), str(big_key): _entry(rng, True)}))
    p = _cli("check-configs", f, "--out", tmp_path / "out", "--jobs", "2", "--compile-all")
    assert p.returncode == 1, (p.stdout, p.stderr)
    over = [line for line in p.stdout.splitlines() if line.startswith("OVER ")]
    assert len(over) == 2 and all(f"[M={big_key}]" in line and f"on {target}:" in line for line in over), p.stdout
    assert all("Required:" in line and "Hardware limit: 101376" in line for line in over), over
    rows = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {r["evidence"] for r in rows} == {"compiled"}
    assert {r["arch"] for r in rows} == {"sm_120a" if target == "rtx-pro-6000" else "sm_89"}
    for r in rows:
        assert (r["smem_bytes"] > 101376) == (r["batch"] == big_key), r
        assert r["verdict"] == ("smem-over-limit" if r["batch"] == big_key else "fits")


def test_export_folder_is_what_vllm_loads_for_every_sku(tmp_path, rng):
    src = _compiling()
    f = tmp_path / "in" / vllm.config_file_name(128, 768, tc.scheme("bf16"), "NVIDIA H200")
    f.parent.mkdir()
    keys = rng.sample([1, 2, 4, 8, 16, 32, 64, 128], 3)
    entries = {str(keys[0]): _entry(rng, True), str(keys[1]): _entry(rng, False), str(keys[2]): _entry(rng, True)}
    f.write_text(json.dumps(entries))
    out = tmp_path / "out"
    p = _cli("export", "triton-configs", f, "--target", "rtx-pro-6000", "--out", out, "--jobs", "2")
    assert p.returncode == 0, (p.stdout, p.stderr)
    prov = json.loads((out / "tileprobe-provenance.json").read_text())
    assert prov["evidence"] in ("predicted, not timed", "compiled, not timed", "predicted and compiled, not timed")
    assert prov["smem_limit_bytes"] == 101376
    root = tmp_path / "tree"  # the engine's shipped folder stays empty: only the user's folder can answer
    (root / vllm.CONFIGS_DIR).mkdir(parents=True)
    for dev in DEVICE_NAMES["rtx-pro-6000"]:
        ns = vllm_namespace(src, root, dev, str(out))
        loaded = ns["get_moe_configs"](128, 768, None, 0, 0)
        written = out / vllm.config_file_name(128, 768, tc.scheme("bf16"), dev)
        assert loaded == {int(k): v for k, v in json.loads(written.read_text()).items()}
        info = prov["files"][written.name]["entries"]
        for k, e in entries.items():
            rec = info[k]
            assert rec["original"] == e | {"num_warps": e["num_warps"], "num_stages": e["num_stages"]}
            if e["BLOCK_SIZE_M"] == 128:  # the big ones: over, replaced
                assert not rec["kept"] and rec["original_bytes"] > 101376 >= rec["substitute_bytes"]
                assert loaded[int(k)] == rec["substitute"] and loaded[int(k)] != e
            else:
                assert rec["kept"] and rec["original_bytes"] <= 101376 and loaded[int(k)] == e


def test_export_folder_is_what_sglang_loads_for_every_sku(tmp_path, rng, monkeypatch):
    if installed() is None:
        pytest.skip("Triton is not installed")
    try:
        src = tc.find_engine("sglang")
    except UsageError as exc:
        pytest.skip(str(exc))
    f = tmp_path / "in" / "triton_3_4_0" / sglang.config_file_name(64, 1536, tc.scheme("bf16"), "NVIDIA H200")
    f.parent.mkdir(parents=True)
    keys = rng.sample([1, 2, 4, 8, 16, 32, 64, 128], 2)
    entries = {str(keys[0]): _entry(rng, False), str(keys[1]): _entry(rng, True)}
    f.write_text(json.dumps(entries))
    out = tmp_path / "out"
    p = _cli("export", "triton-configs", f, "--engine", "sglang", "--target", "rtx-pro-6000", "--out", out,
             "--jobs", "2")
    assert p.returncode == 0, (p.stdout, p.stderr)
    monkeypatch.setenv(sglang.USER_ENV, str(out))
    target = PROFILES["rtx-pro-6000"]
    for dev in DEVICE_NAMES["rtx-pro-6000"]:
        ns = sglang_namespace(src, tmp_path / "tree", dev, target.smem_optin, target.sms, (12, 0))
        loaded = ns["get_moe_configs"](64, 1536, None, 0, 0)
        written = out / "configs" / "triton_3_8_0" / sglang.config_file_name(64, 1536, tc.scheme("bf16"), dev)
        assert loaded == {int(k): v for k, v in json.loads(written.read_text()).items()}
        assert loaded[keys[0]] == entries[str(keys[0])] and loaded[keys[1]] != entries[str(keys[1])]
        assert loaded[keys[1]]["BLOCK_SIZE_M"] == 128  # the M tile is kept; stages / K / N shrink


def _lines(p, word):
    return [line for line in p.stdout.splitlines() if line.startswith(word + " ")]


def test_check_configs_that_checks_nothing_exits_2_with_a_line_each(tmp_path, rng):
    """Entries missing keys, a device tileprobe does not know, a dtype it does not size: nothing is compiled, so the
    answer is not "fits" (main exited 0 here): one NOT-CHECKED line per file or entry launch, and exit 2."""
    _compiling()
    good = _entry(rng, False)
    lacking = rng.choice([k for k in tm.ENTRY_KEYS if k not in tm.TRITON_DEFAULTS])  # keys with no Triton default
    cases = {
        "missing": (vllm.config_file_name(128, 768, tc.scheme("bf16"), "NVIDIA H200"),
                    {str(rng.choice([1, 8, 64])): {k: v for k, v in good.items() if k != lacking}}, lacking),
        "device": ("E=128,N=768,device_name=NVIDIA_Quadro_Z9000.json", {"1": good}, "NVIDIA_Quadro_Z9000"),
        "dtype": ("E=128,N=768,device_name=NVIDIA_H200,dtype=int8_w8a16.json", {"1": good}, "int8_w8a16"),
    }
    for what, (name, doc, said) in cases.items():
        d = tmp_path / what
        d.mkdir()
        (d / name).write_text(json.dumps(doc))
        p = _cli("check-configs", d / name, "--engine", "vllm", "--jobs", "1")
        assert p.returncode == 2, (what, p.returncode, p.stdout, p.stderr)
        lines = _lines(p, "NOT-CHECKED")
        assert lines and all(said in line for line in lines), (what, p.stdout)
        assert len(lines) == (2 if what == "missing" else 1), (what, p.stdout)  # vLLM: both GEMMs of one entry
        assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_check_configs_says_which_entries_were_not_checked_and_which_did_not_compile(tmp_path, rng):
    """One file: an entry that fits, one that lacks a key, one Triton cannot compile (BLOCK_SIZE_N not a power of
    two: tl.arange refuses it). The fitting one is not reported; the other two each get their own verdict (main
    said the compile error "does not fit", OVER); exit 1, since not every entry is known to fit."""
    _compiling()
    key_good, key_lacking, key_broken = rng.sample([1, 2, 4, 8, 16, 32, 64], 3)
    good = _entry(rng, False)
    broken = dict(good, BLOCK_SIZE_N=rng.choice([48, 80, 96]))
    lacking = {k: v for k, v in good.items() if k != "GROUP_SIZE_M"}
    f = tmp_path / vllm.config_file_name(128, 768, tc.scheme("bf16"), "NVIDIA H200")
    f.write_text(json.dumps({str(key_good): good, str(key_lacking): lacking, str(key_broken): broken}))
    p = _cli("check-configs", f, "--jobs", "2")
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert _lines(p, "OVER") == [], p.stdout
    nc, ce = _lines(p, "NOT-CHECKED"), _lines(p, "COMPILE-ERROR")
    assert len(nc) == 2 and all(f"[M={key_lacking}]" in x and "GROUP_SIZE_M" in x for x in nc), p.stdout
    assert len(ce) == 2 and all(f"[M={key_broken}]" in x and "compile-error" in x for x in ce), p.stdout
    assert not any(f"[M={key_good}]" in x for x in p.stdout.splitlines()[:-1]), p.stdout


def test_an_export_that_fails_part_way_leaves_the_folder_as_it_was(tmp_path, rng):
    """Two input files; the second's entry does not compile (BLOCK_SIZE_N not a power of two), after the first's
    files were made. main had written the first file's configs over OUT's (no provenance yet). OUT, holding the
    user's own file, an older export's config file and provenance, stays byte for byte; a run that succeeds then
    replaces only the files it writes, the user's file untouched, nothing left beside OUT."""
    _compiling()
    dev = rng.choice(DEVICE_NAMES["rtx-pro-6000"])
    inp = tmp_path / "in"
    inp.mkdir()
    first = vllm.config_file_name(128, 768, tc.scheme("bf16"), "NVIDIA H200")
    (inp / first).write_text(json.dumps({"1": _entry(rng, False)}))
    broken = inp / vllm.config_file_name(128, 960, tc.scheme("bf16"), "NVIDIA H200")  # sorted after the first
    broken.write_text(json.dumps({"1": dict(_entry(rng, False), BLOCK_SIZE_N=48)}))
    out = tmp_path / "out"
    out.mkdir()
    mine = vllm.config_file_name(128, 768, tc.scheme("bf16"), dev)
    before = {"notes.txt": f"mine {rng.random()}\n", "tileprobe-provenance.json": '{"old": true}\n',
              mine: json.dumps({"8": _entry(rng, False)})}
    for rel, text in before.items():
        (out / rel).write_text(text)
    args = ["export", "triton-configs", inp, "--target", "rtx-pro-6000", "--out", out, "--device-name", dev,
            "--hidden", "2048", "--jobs", "2"]
    p = _cli(*args)
    assert p.returncode == 2 and "does not compile" in p.stderr, (p.returncode, p.stdout, p.stderr)
    assert {q.name: q.read_text() for q in out.iterdir()} == before
    assert sorted(q.name for q in tmp_path.iterdir()) == ["in", "out"]
    broken.unlink()
    p = _cli(*args)
    assert p.returncode == 0, (p.stdout, p.stderr)
    after = {q.name: q.read_text() for q in out.iterdir()}
    assert after["notes.txt"] == before["notes.txt"] and after[mine] != before[mine]
    assert set(after) == set(before) and json.loads(after["tileprobe-provenance.json"])["files"].keys() == {mine}
    assert sorted(q.name for q in tmp_path.iterdir()) == ["in", "out"]
