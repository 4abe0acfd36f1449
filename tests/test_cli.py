"""Bad input: one clear line on stderr, exit code 2, never a traceback. Run as a user would, in a subprocess."""

import os
import subprocess
import sys

import pytest


def tileprobe(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "tileprobe", *args], capture_output=True, text=True, timeout=300,
                          env=e)


@pytest.mark.parametrize("args,needle", [
    (["sweep", "--static-only", "--tiles", "128x128"], "malformed tile"),
    (["sweep", "--static-only", "--family", "sm100-nope"], "unknown family"),
    (["sweep", "--target", "rtx-9090"], "unknown target"),
    (["sweep", "--static-only", "--target", "rtx-pro-6000", "--nvcc", "/nonexistent/nvcc"], "nvcc not found"),
    (["sweep", "--static-only", "--target", "rtx-pro-6000", "--cutlass-dir", "/nonexistent"], "no CUTLASS headers"),
    (["sweep", "--static-only", "--target", "rtx-pro-6000", "--stages", "two"], "not a whole number"),
    (["sweep", "--static-only", "--target", "rtx-pro-6000", "--shard", "3/2"], "--shard"),
    (["explain", "12x12"], "malformed tile"),
    # workload options are validated before any work, GPU or not (they used to be ignored without a GPU)
    (["sweep", "--batch", "0"], "batch size 0"),
    (["sweep", "--shape", "1:2:3"], "expected E:M:N:K"),
    (["sweep", "--routing", "zz"], "unknown routing"),
    (["sweep", "--tp", "0"], "--tp and --ep"),
    (["sweep", "--workload", "nope"], "unknown workload"),
    (["sweep", "--static-only", "--epilogue", "sideways"], "unknown epilogue"),
    (["sweep", "--jobs", "0"], "--jobs"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle, tmp_path):
    p = tileprobe(*args, "--out", str(tmp_path / "o")) if args[0] == "sweep" else tileprobe(*args)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr + p.stdout
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    if needle in ("nvcc not found", "no CUTLASS headers"):  # a tooling problem: then the doctor's help line
        assert lines[1:] == ["help: run `tileprobe doctor`"], p.stderr
        lines = lines[:1]
    assert len(lines) == 1 and needle in lines[0], p.stderr


def test_unwritable_out(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    p = tileprobe("sweep", "--static-only", "--target", "rtx-pro-6000", "--out", str(blocker / "sub"))
    assert p.returncode == 2 and "not writable" in p.stderr and "Traceback" not in p.stderr


def test_old_nvcc_is_refused(tmp_path):
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n")
    fake.chmod(0o755)
    p = tileprobe("sweep", "--static-only", "--target", "rtx-pro-6000", "--nvcc", str(fake), "--tiles", "128x128x128",
                  "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c"))
    assert p.returncode == 2 and "cannot build sm_120a" in p.stderr and "12.8" in p.stderr, p.stderr


def test_devices_without_gpu_lists_profiles():
    p = tileprobe("devices")
    assert p.returncode == 0
    for name in ("rtx-pro-6000", "rtx-5090", "dgx-spark-gb10", "b200", "h100", "h200"):
        assert name in p.stdout
    assert "101376" in p.stdout and "232448" in p.stdout


def test_a_family_whose_binaries_cannot_run_on_the_target_is_unsupported(tmp_path):
    """sm90-fp8 against an SM120 target: an sm_90a binary cannot run on sm_120 at all; nothing is compiled."""
    p = tileprobe("sweep", "--static-only", "--family", "sm90-fp8", "--target", "rtx-pro-6000", "--tiles",
                  "128x128x128", "--out", str(tmp_path / "o"), "--json", "--cache-dir", str(tmp_path / "c"))
    assert p.returncode == 0, p.stderr
    import json
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    assert rows and all(r["verdict"] == "unsupported" for r in rows)
    assert all("cannot run on rtx-pro-6000" in r["reason"] and r["evidence"] == "none" for r in rows)
    assert not any((tmp_path / "c").glob("describe-*"))


@pytest.mark.parametrize("args,needle", [
    (["sweep", "--seed", "x"], "--seed"),
    (["sweep", "--tp", "two"], "--tp"),
    (["sweep", "--compile-timeout", "soon"], "--compile-timeout"),
    (["check", "--jobs", "many"], "--jobs"),
    (["sweep", "--no-such-option"], "--no-such-option"),
    (["report"], "results"),
])
def test_parser_errors_are_one_line_too(args, needle):
    """Errors the option parser finds (a non-integer for an int option, an unknown option, a missing argument) read
    like ours: one line, exit 2, no usage box."""
    p = tileprobe(*args)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert p.returncode == 2 and len(lines) == 1 and needle in lines[0], p.stderr
    assert lines[0].startswith("tileprobe: error: ") and "╭" not in p.stderr + p.stdout


def _option_entries(help_text: str) -> dict[str, str]:
    """--help's option entries, each joined onto one line (click's plain layout: an entry starts with '  -')."""
    entries: dict[str, str] = {}
    current = None
    for line in help_text.splitlines():
        if line.startswith("  -"):
            current = line.split()[0]
            entries[current] = line
        elif current and line.startswith("      ") and line.strip():
            entries[current] += " " + line.strip()
        else:
            current = None
    return entries


@pytest.mark.parametrize("command", ["sweep", "explain", "check", "recommend", "report"])
def test_help_says_each_default_once_and_spells_shapes_literally(command):
    p = tileprobe(command, "--help")
    assert p.returncode == 0, p.stderr
    entries = _option_entries(p.stdout)
    assert entries, p.stdout
    doubled = [e for e in entries.values() if "(default" in e and "[default" in e]
    assert not doubled, doubled
    if command == "sweep":
        assert "E:M:N:K" in entries["--shape"] and "Examples:" in p.stdout, p.stdout
    if command in ("sweep", "explain"):
        assert "0" in entries["--stages"].split("[default")[0] and "auto" in entries["--stages"], entries["--stages"]


def test_top_level_help_has_examples_and_loads_no_heavy_module():
    p = tileprobe("--help")
    assert p.returncode == 0 and "Examples:" in p.stdout and "tileprobe sweep" in p.stdout, p.stdout
    heavy = ("pandas", "matplotlib", "matplotlib.pyplot", "jsonschema", "cuda.bindings.runtime", "typer.rich_utils")
    code = ("import sys, tileprobe.cli as c; sys.argv = ['tileprobe', 'sweep', '--help']\n"
            "try:\n    c.main()\nexcept SystemExit:\n    pass\n"
            f"print('LOADED', [m for m in {heavy!r} if m in sys.modules])")
    q = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "LOADED []" in q.stdout, q.stdout[-500:] + q.stderr[-500:]


@pytest.mark.parametrize("args,needle", [
    (["--stages", "2"], "--stages 2 does not apply"),
    (["--stages", "auto,3"], "--stages 0,3 does not apply"),
    (["--schedules", "cooperative"], "--schedules cooperative does not apply"),
    (["--cluster", "2x1x1"], "--cluster 2x1x1 does not apply"),
    (["--dtypes", "fp8xfp8"], "dispatches no fp8xfp8 on sm_120a"),
    (["--dtypes", "nvfp4xnvfp4,fp8xfp8"], "dispatches no fp8xfp8 on sm_120a"),
])
def test_flashinfer_moe_options_it_cannot_honour_are_refused(args, needle, tmp_path):
    """flashinfer-moe builds the engine's tactics (schedule, stages, cluster fixed by the engine); options that would
    change them, or a dtype pair the engine does not dispatch on the arch, are one line and exit 2, not ignored."""
    p = tileprobe("sweep", "--static-only", "--family", "flashinfer-moe", "--target", "rtx-pro-6000", *args,
                  "--out", str(tmp_path / "o"))
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and needle in lines[0], p.stderr
    assert not (tmp_path / "o" / "results.jsonl").exists() or not (tmp_path / "o" / "results.jsonl").read_text()


@pytest.mark.parametrize("extra", [["--compile"], ["--rebuild"], ["--gpus", "0"], ["--compile-timeout", "60"],
                                   ["--compile", "--gpus", "1"]])
def test_predict_only_refuses_what_it_would_ignore(extra, tmp_path):
    p = tileprobe("sweep", "--predict-only", "--tiles", "128x128x128", "--out", str(tmp_path / "o"), *extra)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    named = [a for a in extra if a.startswith("--")]
    assert len(lines) == 1 and "would be ignored" in lines[0] and all(o in lines[0] for o in named), p.stderr
    assert not (tmp_path / "o").exists()  # nothing started
