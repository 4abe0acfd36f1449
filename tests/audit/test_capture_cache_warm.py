"""A warm audit reads each entry's capture from tileprobe.audit.capture_cache: a second audit with the same
--cache-dir opens no engine session (the engine's launchers do not run again) and writes the same rows; an input the
capture depends on (the model's head_dim, a file of the engine wheel) is another key, so the capture runs again; a
broken cache entry is one warning line and is captured again. One cheap entry (SGLang's Triton decode attention, its
backend forced), one point, a random GQA model. Also: the tuned-config folder the engine reads is in every key, and
`memo` keeps plain answers (None too) and never a live object."""

from __future__ import annotations

import contextlib
import csv
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from tileprobe.audit import capture, capture_cache
from tileprobe.audit.run import AuditOptions, run_audit

pytestmark = pytest.mark.triton
ENTRY = "sglang-decode-attention"


@pytest.fixture
def sessions(monkeypatch):
    """Every engine session the audit opens (capture.engine_session, as run.py calls it), with its launches."""
    opened: list = []
    real = capture.engine_session

    @contextlib.contextmanager
    def counting(*args, **kwargs):
        with real(*args, **kwargs) as session:
            opened.append(session)
            yield session

    monkeypatch.setattr(capture, "engine_session", counting)
    return opened


def _model(folder: Path, rng, head_dim: int) -> str:
    kv = rng.choice([1, 2, 4, 8])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "num_attention_heads": kv * rng.choice([2, 4]), "num_key_value_heads": kv,
        "head_dim": head_dim, "hidden_size": 4096, "torch_dtype": "bfloat16"}))
    return str(folder)


def _audit(tmp_path: Path, name: str, model: str, point: tuple[int, int], wheel: str | None = None):
    return run_audit(AuditOptions("sglang", model, "rtx-pro-6000", batches=(point[0],), seq_lens=(point[1],),
                                  out=tmp_path / name, cache_dir=str(tmp_path / "cache"), kernels=(ENTRY,),
                                  attention_backend="triton", engine_wheel=wheel))


def _csv(out: Path) -> list[dict]:
    with (out / "results.csv").open() as f:
        return [{k: v for k, v in row.items() if k != "timestamp"} for row in csv.DictReader(f)]


def _entries(tmp_path: Path, kind: str) -> list[Path]:
    root = tmp_path / "cache" / capture_cache.FOLDER
    return [p for p in root.rglob("*.json") if json.loads(p.read_text())["kind"] == kind]


def test_a_second_audit_runs_no_launcher_and_writes_the_same_rows(sglang, rng, tmp_path, sessions, capsys):
    model = _model(tmp_path / "model", rng, rng.choice([64, 128, 256]))
    point = (rng.randint(1, 64), rng.choice([256, 1024, 4096]))
    cold = _audit(tmp_path, "cold", model, point)
    assert len(sessions) == 1 and sessions[0].launches, "the cold audit runs the engine's launcher once"
    launches = len(sessions[0].launches)
    assert cold.rows and all(r["verdict"] != "unanswered" for r in cold.rows), cold.rows
    assert len(_entries(tmp_path, "capture")) == 1 and len(_entries(tmp_path, "selection")) == 1

    sessions.clear()
    warm = _audit(tmp_path, "warm", model, point)
    assert sessions == [], "the warm audit opened an engine session: the capture ran again"
    assert _csv(tmp_path / "warm") == _csv(tmp_path / "cold")
    assert [{k: v for k, v in r.items() if k != "timestamp"} for r in warm.rows] == \
        [{k: v for k, v in r.items() if k != "timestamp"} for r in cold.rows]
    run = {k: json.loads((tmp_path / k / "run.json").read_text()) for k in ("cold", "warm")}
    assert {k for k in run["cold"] if run["cold"][k] != run["warm"][k]} <= {"command", "date", "phases"}

    # a broken entry: one warning line, captured again (the same launches, the same rows), and written back whole
    entry, = _entries(tmp_path, "capture")
    entry.write_text(entry.read_text()[: rng.randint(0, 200)])
    capsys.readouterr()
    again = _audit(tmp_path, "again", model, point)
    err = capsys.readouterr().err
    assert len(sessions) == 1 and len(sessions[0].launches) == launches
    broken = [ln for ln in err.splitlines() if "is broken" in ln]
    assert len(broken) == 1 and broken[0].startswith("tileprobe: warning: audit capture cache entry"), err
    assert _csv(tmp_path / "again") == _csv(tmp_path / "cold") and len(again.rows) == len(cold.rows)
    sessions.clear()
    _audit(tmp_path, "after", model, point)
    assert sessions == [] and "is broken" not in capsys.readouterr().err


def test_another_head_dim_misses_the_cache(sglang, rng, tmp_path, sessions):
    dims = rng.sample([64, 128, 256], 2)
    point = (rng.randint(1, 64), rng.choice([256, 1024]))
    seed = rng.random()
    # the same config.json path, its head_dim rewritten: only the model's fields differ
    first = _audit(tmp_path, "a", _model(tmp_path / "model", type(rng)(seed), dims[0]), point)
    sessions.clear()
    other = _audit(tmp_path, "b", _model(tmp_path / "model", type(rng)(seed), dims[1]), point)
    assert len(sessions) == 1 and sessions[0].launches, "another head_dim was answered from the first model's capture"
    assert _csv(tmp_path / "a") != _csv(tmp_path / "b") and first.rows and other.rows
    assert len(_entries(tmp_path, "capture")) == 2


def test_a_file_changed_in_the_engine_wheel_misses_the_cache(sglang, rng, tmp_path, sessions):
    if sglang.kind != "wheel":
        pytest.skip(f"SGLang here is {sglang.kind}, not a wheel to copy")
    wheel = tmp_path / "wheels" / Path(sglang.origin).name
    wheel.parent.mkdir()
    shutil.copyfile(sglang.origin, wheel)
    model = _model(tmp_path / "model", rng, rng.choice([64, 128]))
    point = (rng.randint(1, 64), 1024)
    _audit(tmp_path, "first", model, point, str(wheel))
    sessions.clear()
    _audit(tmp_path, "same", model, point, str(wheel))
    assert sessions == [], "the same wheel copy missed the cache"
    # a file no manifest lists (the release check still passes), changed in place: the wheel's content is the key
    with zipfile.ZipFile(wheel, "a") as z:
        z.writestr(f"sglang/tileprobe_test_{rng.randrange(10**6)}.py", "CHANGED = True\n")
    _audit(tmp_path, "changed", model, point, str(wheel))
    assert len(sessions) == 1 and sessions[0].launches, "a changed wheel was answered from the old wheel's capture"
    assert _csv(tmp_path / "changed") == _csv(tmp_path / "first")


@pytest.mark.parametrize("variable", capture_cache.ENV_FOLDERS)
def test_the_tuned_config_folder_the_engine_reads_is_in_every_key(sglang, rng, tmp_path, monkeypatch, variable):
    """A tuned-config file written into the folder the engine's lookup reads (the remedy an over-limit row names)
    changes what the launcher picks: the audit run again must capture again."""
    folder = tmp_path / "tuned"
    folder.mkdir()
    monkeypatch.setenv(variable, str(folder))
    empty = capture_cache.fingerprint(sglang)
    name = f"E={rng.choice([8, 64, 128])},N={rng.choice([128, 256])},device_name=NVIDIA_RTX_PRO_6000.json"
    (folder / name).write_text(json.dumps({"1": {"BLOCK_SIZE_M": 16}}))
    written = capture_cache.fingerprint(sglang)
    (folder / name).write_text(json.dumps({"1": {"BLOCK_SIZE_M": 32}}))
    edited = capture_cache.fingerprint(sglang)
    assert empty != written != edited != empty
    assert capture_cache.fingerprint(sglang) == edited


def test_memo_keeps_plain_values_none_included_and_refuses_live_objects(sglang, rng, tmp_path):
    """capture_cache.memo, for a step that runs the engine's code on every audit: computed once per key (a None
    answer too), read back equal (tuples stay tuples), another input is another key; a value that is no plain data
    is returned uncached, never pickled."""
    calls = []

    def compute(value):
        def run():
            calls.append(value)
            return value
        return run

    inputs = {"target": "rtx-pro-6000", "head_dim": rng.choice([64, 128])}
    value = (["a", 1], {"k": (2.5, None)}, rng.randrange(10**6))
    for _ in range(2):
        assert capture_cache.memo("t", sglang, inputs, tmp_path, compute(value)) == value
        assert capture_cache.memo("t-none", sglang, inputs, tmp_path, compute(None)) is None
    assert calls == [value, None]
    assert capture_cache.memo("t", sglang, {**inputs, "head_dim": 256}, tmp_path, compute(value)) == value
    assert len(calls) == 3
    live = object()
    for _ in range(2):
        assert capture_cache.memo("t-live", sglang, inputs, tmp_path, compute(live)) is live
    assert calls[3:] == [live, live]
