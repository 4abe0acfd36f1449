"""The committed audits (results/audit/): run them again, and write their summary table.

`python3 tools/audit_committed.py run [--only SUBSTR]` runs `tileprobe audit` for every (target, engine, model) of
SET into results/audit/<target>__<engine>__<model>/ (the same batches and sequence length for all); folders of
results/audit/ that SET no longer names are reported, not deleted.
`python3 tools/audit_committed.py answers-check` runs them again predictor first (nothing compiled) and compares
every row with the committed compiled one (results/audit/answers-check.json).
`python3 tools/audit_committed.py coverage` prints how many distinct committed launches a stated rule answers.
`python3 tools/audit_committed.py table` prints the summary table of the committed rows (docs/audit.md carries it;
tests/audit/test_committed.py keeps the two equal): per audit, the attention backend the engine picked and its line,
the launches and which do not fit (kernel: bytes), the autotuned configs dropped, the launchers the engine does not
run there.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AUDITS = ROOT / "results" / "audit"
MODELS = AUDITS / "models"
ARGS = ("--batch", "1,8", "--seq-len", "2048", "--jobs", "2", "--compile-all")  # compiled rows, each with the rules' word
# (target, engine, model): the five kinds (MLA, GQA, sliding window, hybrids with linear attention / SSM,
# gpt-oss) for each engine that serves them, and the public reports' configs
SET = [
    *[("rtx-pro-6000", e, m) for m in ("kimi-k2", "qwen3-30b-a3b", "gemma-3-4b", "qwen3-next-80b-a3b",
                                       "gpt-oss-120b") for e in ("vllm", "sglang")],
    ("rtx-pro-6000", "vllm", "nemotron-h-8b"), ("rtx-pro-6000", "vllm", "minimax-m1"),
    ("rtx-pro-6000", "vllm", "gemma2-fp32-like"), ("rtx-pro-6000", "sglang", "gqa-h128-fp32"),
    ("h200", "sglang", "gqa-h128-fp32"), ("h200", "vllm", "gpt-oss-120b"),
    ("rtx-pro-6000", "vllm", "gpt-oss-120b", "--moe-backend", "triton"),  # vLLM's opt-in TRITON MXFP4 MoE on sm_120
    # the models users run, from their published config.json (results/audit/models/SOURCES.md), at each engine's
    # defaults, on an RTX PRO 6000 and a DGX Spark GB10 (sm_121: arch answered apart)
    *[(t, e, m) for t in ("rtx-pro-6000", "dgx-spark-gb10") for e in ("vllm", "sglang")
      for m in ("glm-4.5-air", "qwen3-235b-a22b", "llama-3.1-8b", "gemma-3-27b-it", "deepseek-v3.2")],
    *[("dgx-spark-gb10", e, m) for e in ("vllm", "sglang") for m in ("gpt-oss-120b", "qwen3-next-80b-a3b")],
    ("dgx-spark-gb10", "vllm", "nemotron-h-8b"),
]


def model_arg(model: str) -> str:
    path = MODELS / f"{model}.json"
    return str(path.relative_to(ROOT)) if path.is_file() else model


def folder(target: str, engine: str, model: str, *flags: str) -> Path:
    """results/audit/<target>__<engine>__<model>[__<flag>-<value>...]"""
    extra = "".join(f"__{flags[i].lstrip('-')}-{flags[i + 1]}" for i in range(0, len(flags), 2))
    return AUDITS / f"{target}__{engine}__{model}{extra}"


def run(only: str | None) -> int:
    worst = 0
    for target, engine, model, *flags in SET:
        out = folder(target, engine, model, *flags)
        if only and only not in out.name:
            continue
        cmd = [sys.executable, "-m", "tileprobe", "audit", "--engine", engine, "--model", model_arg(model),
               "--target", target, *ARGS, *flags, "--out", str(out.relative_to(ROOT))]
        print("$", " ".join(["tileprobe", *cmd[3:]]), flush=True)
        p = subprocess.run(cmd, cwd=ROOT, timeout=3600)
        worst = max(worst, p.returncode)
    named = {folder(*s).name for s in SET}
    for stale in sorted(d.name for d in AUDITS.iterdir() if d.is_dir() and d.name != "models"
                        and d.name not in named):
        print(f"not in SET (not deleted): results/audit/{stale}")
    return 0 if worst <= 1 else worst


def _rows(out: Path) -> list[dict]:
    return [json.loads(ln) for ln in (out / "results.jsonl").read_text().splitlines() if ln.strip()]


def table() -> str:
    lines = ["| target | engine | model (flags) | attention backend (engine line) | launches | over the limit (kernel: bytes) "
             "| autotune configs dropped | not run here | compiled kernels on the path: answered (fit / fail) / "
             "unanswered |", "|---|---|---|---|---|---|---|---|---|"]
    for target, engine, model, *flags in SET:
        out = folder(target, engine, model, *flags)
        if not (out / "run.json").is_file():
            continue
        meta = json.loads((out / "run.json").read_text())
        rows = _rows(out)
        sel = meta.get("attention_backend")
        backend = f"{sel['backend']} (`{sel['line']}`)" if sel else "-"
        path = [r for r in rows if r["family"] == "compiled-audit"]
        rows = [r for r in rows if r["family"] != "compiled-audit"]
        launched = [r for r in rows if r["verdict"] != "not-selected"]
        fails = [r for r in path if r["verdict"] in ("smem-over-limit", "no-code", "refused", "compile-error")]
        unans = [r for r in path if r["verdict"] == "unanswered"]
        fit = [r for r in path if r["verdict"] == "fits"]
        path_cell = (f"{len(fit) + len(fails)} ({len(fit)} / {len(fails)}"
                     + (": " + "; ".join(sorted({f"{r['layer']} {r['library']} {r['verdict']}" for r in fails}))
                        if fails else "") + f") / {len(unans)}") if path else "not run (committed before the path)"
        over = sorted({f"{r['kernel']}: {r['smem_bytes']}" for r in launched if r["verdict"] == "smem-over-limit"
                       and not r.get("autotune_dropped")})
        tuned = sorted({f"{r['kernel']} {r['autotune_dropped'].split(' (')[0]}" for r in launched
                        if r.get("autotune_dropped") and not r["autotune_dropped"].startswith("0 of")})
        elsewhere = sorted({r["gemm"] for r in rows
                            if r["verdict"] == "not-selected"})
        label = f"{model} ({' '.join(flags)})" if flags else model
        lines.append(f"| {target} | {meta['toolchain']['engine']} | {label} | {backend} | {len(launched)} | "
                     f"{'; '.join(over) or 'none'} | {'; '.join(tuned) or 'none'} | "
                     f"{', '.join(elsewhere) or 'none'} | {path_cell} |")
    return "\n".join(lines) + "\n"


def answers_check() -> int:
    """Run every committed audit again predictor first (the stated rules, else Triton's allocation alone: nothing
    compiled) into a temporary folder, compare each row's bytes and verdict with the committed compiled row of the
    same launch, and write results/audit/answers-check.json. Exit 1 on any difference."""
    report = {"command": "python3 tools/audit_committed.py answers-check", "audits": [], "rows": 0, "differ": []}
    with tempfile.TemporaryDirectory(prefix="tp-answers-") as tmp:
        for target, engine, model, *flags in SET:
            out = folder(target, engine, model, *flags)
            fresh = Path(tmp) / out.name
            t0 = time.perf_counter()
            cmd = [sys.executable, "-m", "tileprobe", "audit", "--engine", engine, "--model", model_arg(model),
                   "--target", target, *[a for a in ARGS if a != "--compile-all"], *flags, "--out", str(fresh),
                   "--cache-dir", str(Path(tmp) / "cache")]
            ran = subprocess.run(cmd, cwd=ROOT, timeout=3600, capture_output=True, text=True)
            committed = {r["config"]: r for r in _rows(out)}
            answered = {r["config"]: r for r in _rows(fresh)} if (fresh / "results.jsonl").is_file() else {}
            evidence: dict[str, int] = {}
            for key, r in answered.items():
                evidence[r["evidence"]] = evidence.get(r["evidence"], 0) + 1
                c = committed.get(key)
                if c is None or (r["smem_bytes"], r["verdict"]) != (c["smem_bytes"], c["verdict"]):
                    report["differ"].append({"audit": out.name, "config": key, "answered": r["smem_bytes"],
                                             "committed": c and c["smem_bytes"]})
            missing = sorted(set(committed) - set(answered))
            report["differ"] += [{"audit": out.name, "config": k, "answered": None} for k in missing]
            report["rows"] += len(answered)
            report["audits"].append({"audit": out.name, "rows": len(answered), "evidence": evidence,
                                     "seconds": round(time.perf_counter() - t0, 1), "exit": ran.returncode,
                                     # an audit that wrote no rows says why (its last error line), never silently
                                     **({} if answered else {"error": (ran.stderr.strip().splitlines() or [""])[-1]})})
    (AUDITS / "answers-check.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"{report['rows']} rows answered predictor first, {len(report['differ'])} differ from the committed "
          "compiled rows: results/audit/answers-check.json")
    return 1 if report["differ"] else 0


def coverage() -> dict:
    """How the committed audits' distinct launches stand with the stated rules (their `prediction` column): answered
    by a rule (and exact against the compile), or not, per kernel; rows deduplicated by (target, config: the launch's hash) across audits."""
    seen: dict[tuple, dict] = {}
    for target, engine, model, *flags in SET:
        out = folder(target, engine, model, *flags)
        for r in _rows(out) if (out / "results.jsonl").is_file() else []:
            if r["verdict"] != "not-selected" and r["family"] == "triton-audit":
                seen.setdefault((target, r["config"]), r)
    per: dict[str, list[int]] = {}
    for r in seen.values():
        per.setdefault(r["kernel"], [0, 0])[r["predicted_smem_bytes"] is None] += 1
    rules = sum(p for p, _ in per.values())
    return {"distinct_launches": len(seen), "predicted_by_a_rule": rules,
            "exact": sum(r["prediction"] == "exact" for r in seen.values()),
            "cannot_predict": len(seen) - rules,
            "cannot_predict_share": round((len(seen) - rules) / len(seen), 3) if seen else None,
            "per_kernel": {k: {"predicted": p, "cannot_predict": c} for k, (p, c) in sorted(per.items())}}


if __name__ == "__main__":
    if sys.argv[1:2] == ["answers-check"]:
        sys.exit(answers_check())
    if sys.argv[1:2] == ["coverage"]:
        sys.stdout.write(json.dumps(coverage(), indent=1) + "\n")
        sys.exit(0)
    if sys.argv[1:2] == ["run"]:
        sys.exit(run(sys.argv[3] if sys.argv[2:3] == ["--only"] else None))
    if sys.argv[1:2] == ["table"]:
        sys.stdout.write(table())
        sys.exit(0)
    sys.exit("usage: tools/audit_committed.py run [--only SUBSTR] | table | coverage | answers-check")
