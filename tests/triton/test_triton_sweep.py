"""`sweep --family triton-moe` through the one sweep driver (tileprobe.sweep): options the family does not use are
refused, --shard splits the planned launches, --resume checks the rows' provenance (Triton version, kernel hash,
evidence mode), and `export triton-configs` refuses --tune's options without --tune. Cheap: --predict-only (the
predictor, nothing compiled) or refusals that come before any compile. The engine's kernel is read from its
installed package or a cached wheel (conftest fetches them); skipped without."""

from __future__ import annotations

import json
import sys

import pytest

from tileprobe import cli
from tileprobe.errors import UsageError
from tileprobe.families import triton_moe as tm
from tileprobe.results.rows import row_key
from tileprobe.triton.sweep import engine_kernel_source


def _engine(name: str):
    try:
        return engine_kernel_source(name, None)
    except UsageError as exc:
        pytest.skip(f"{name} {tm.ENGINES[name].release}: {exc}")


def _run(monkeypatch, capsys, *args) -> tuple[int, str]:
    """`tileprobe ARGS` in this process (cli.main: the exit code and stderr a user sees)."""
    monkeypatch.setattr(sys, "argv", ["tileprobe", *map(str, args)])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    return exc.value.code, capsys.readouterr().err


def _one_line_exit_2(code: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("tileprobe: error:"), (code, err)
    return lines[0]


def _base(rng, engine: str | None = None) -> list[str]:
    engine = engine or rng.choice(["vllm", "sglang"])
    _engine(engine)
    batches = ",".join(str(m) for m in sorted(rng.sample([1, 2, 8, 16, 48, 96, 256], rng.randint(2, 4))))
    return ["sweep", "--family", "triton-moe", "--engine", engine, "--workload",
            rng.choice(["qwen3-30b-a3b", "mixtral-8x7b"]), "--quant", rng.choice(["bf16", "fp8"]), "--target",
            rng.choice(["rtx-pro-6000", "rtx-5090", "dgx-spark-gb10"]), "--batch", batches, "--json"]


def _rows(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]


# Every sweep option triton-moe has no use for, with a value drawn per run: each must be refused, not ignored.
UNUSED = {
    "--tiles": lambda r: f"{r.choice([64, 128])}x{r.choice([64, 128])}x128",
    "--stages": lambda r: str(r.randint(2, 5)),
    "--schedules": lambda r: r.choice(["auto", "cooperative", "pingpong"]),
    "--epilogue": lambda r: r.choice(["no-c", "with-c"]),
    "--swap-ab": lambda r: r.choice(["on", "off"]),
    "--cluster": lambda r: f"{r.choice([2, 4])}x1x1",  # 1x1x1 is the default: not an option given
    "--dtypes": lambda r: r.choice(["nvfp4xnvfp4", "mxfp8xmxfp4"]),
    "--routing": lambda r: r.choice(["balanced", "skewed"]),
    "--peer": lambda r: "torch",
    "--run-timeout": lambda r: str(r.randint(5, 60)),
    "--cutlass-dir": lambda r: f"/nonexistent/cutlass-{r.randint(0, 99)}",
    "--nvcc": lambda r: f"/nonexistent/nvcc-{r.randint(0, 99)}",
    "--shape": lambda r: f"{r.choice([8, 64])}:16:4096:7168",
}


@pytest.mark.parametrize("flag", sorted(UNUSED))
def test_an_option_triton_moe_does_not_use_is_refused(flag, monkeypatch, capsys, tmp_path, rng):
    """One line naming the option, exit 2, before anything is planned or compiled (--predict-only here only keeps
    a failure cheap: without the check the sweep would run and exit 0)."""
    line = _one_line_exit_2(*_run(monkeypatch, capsys, *_base(rng), "--predict-only", "--out", tmp_path,
                                  flag, UNUSED[flag](rng)))
    assert flag in line and "triton-moe" in line, line
    assert not (tmp_path / "results.jsonl").exists()


def test_a_triton_option_is_refused_for_a_cutlass_family(monkeypatch, capsys, tmp_path, rng):
    flag, value = rng.choice([("--quant", "fp8"), ("--engine-wheel", tmp_path / "x.whl"),
                              ("--config-dir", tmp_path), ("--device-name", "NVIDIA GeForce RTX 5090"),
                              ("--any-triton", None)])
    fam = rng.choice(["sm120-nvfp4", "sm90-fp8"])
    line = _one_line_exit_2(*_run(monkeypatch, capsys, "sweep", "--family", fam, "--predict-only", "--out",
                                  tmp_path, flag, *([value] if value is not None else [])))
    assert flag in line and fam in line, line


def test_shards_split_the_planned_launches(monkeypatch, capsys, tmp_path, rng):
    """--shard i/n for every i: disjoint shards whose rows together are the unsharded sweep's, row for row."""
    base = _base(rng)
    n = rng.choice([2, 3])
    code, err = _run(monkeypatch, capsys, *base, "--predict-only", "--out", tmp_path / "all")
    assert code == 0, err
    strip = lambda r: {k: v for k, v in r.items() if k != "timestamp"}  # noqa: E731
    whole = {row_key(r): strip(r) for r in _rows(tmp_path / "all")}
    parts: list[dict] = []
    for i in range(n):
        code, err = _run(monkeypatch, capsys, *base, "--predict-only", "--shard", f"{i}/{n}", "--out",
                         tmp_path / f"s{i}")
        assert code == 0, err
        parts += _rows(tmp_path / f"s{i}")
        assert json.loads((tmp_path / f"s{i}" / "run.json").read_text())["shard"] == [i, n]
    assert len(parts) == len(whole), (len(parts), len(whole))  # disjoint: no launch in two shards
    assert {row_key(r): strip(r) for r in parts} == whole


def _swap(doc, old: str, new: str):
    """`doc` with every string `old` in it replaced by `new` (wherever run.json keeps it)."""
    if isinstance(doc, dict):
        return {k: _swap(v, old, new) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_swap(v, old, new) for v in doc]
    return new if doc == old else doc


@pytest.mark.parametrize("what", ["triton_version", "kernel"])
def test_resume_refuses_rows_of_another_triton_or_kernel(what, monkeypatch, capsys, tmp_path, rng):
    """A folder whose run.json names another Triton release or another kernel source: --resume adds nothing."""
    base = _base(rng)
    code, err = _run(monkeypatch, capsys, *base, "--predict-only", "--out", tmp_path)
    assert code == 0, err
    meta = json.loads((tmp_path / "run.json").read_text())
    assert meta["evidence_mode"] == "predicted"
    row = _rows(tmp_path)[0]
    if what == "triton_version":
        old, new = row["triton_version"], f"3.{rng.randint(0, 7)}.{rng.randint(0, 9)}"
    else:
        old = next(v for v in json.dumps(meta).split('"') if len(v) == 64 and v.startswith(row["engine_hash"]))
        new = "%064x" % rng.getrandbits(256)
    (tmp_path / "run.json").write_text(json.dumps(_swap(meta, old, new)))
    before = (tmp_path / "results.jsonl").read_text()
    line = _one_line_exit_2(*_run(monkeypatch, capsys, *base, "--predict-only", "--resume", "--out", tmp_path))
    assert "--resume" in line and old[:12] in line and new[:12] in line, line
    assert (tmp_path / "results.jsonl").read_text() == before


def test_resume_refuses_compiled_rows_under_predicted_ones(monkeypatch, capsys, tmp_path, rng):
    """Predicted rows, then the same sweep compiled (--compile-all) with --resume: refused before any compile (one
    run.json cannot say both)."""
    base = _base(rng)
    code, err = _run(monkeypatch, capsys, *base, "--predict-only", "--out", tmp_path)
    assert code == 0, err
    line = _one_line_exit_2(*_run(monkeypatch, capsys, *base, "--resume", "--out", tmp_path, "--jobs", "1",
                                  "--compile-all"))
    assert "evidence predicted -> compiled" in line, line


def test_triton_row_keys_hold_the_triton_version_and_kernel_hash(rng):
    row = {"config": f"c{rng.randint(0, 999)}", "target": "rtx-5090", "gemm": "down", "batch": rng.randint(1, 512),
           "triton_version": "3.8.0", "engine_hash": "%016x" % rng.getrandbits(64)}
    assert row_key(row) != row_key(row | {"triton_version": f"3.{rng.randint(0, 7)}.0"})
    assert row_key(row) != row_key(row | {"engine_hash": "%016x" % rng.getrandbits(64)})


TUNE_ONLY = {"--batches": lambda r: str(r.choice([1, 16, 64])), "--confirm-top": lambda r: str(r.randint(1, 16)),
             "--screen-reps": lambda r: str(r.randint(1, 9)), "--seed": lambda r: str(r.randint(0, 99)),
             "--prune-only": None}


@pytest.mark.parametrize("flag", sorted(TUNE_ONLY))
def test_export_without_tune_refuses_tune_options(flag, monkeypatch, capsys, tmp_path, rng):
    f = tmp_path / f"E={rng.choice([8, 128])},N={rng.choice([256, 768])},device_name=NVIDIA_H200.json"
    f.write_text(json.dumps({"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1,
                                   "num_warps": 4, "num_stages": 2}}))
    value = [TUNE_ONLY[flag](rng)] if TUNE_ONLY[flag] else []
    line = _one_line_exit_2(*_run(monkeypatch, capsys, "export", "triton-configs", f, "--target", "rtx-5090",
                                  "--out", tmp_path / "out", "--jobs", "1", flag, *value))
    assert flag in line and "--tune" in line, line
    assert not (tmp_path / "out").exists()
