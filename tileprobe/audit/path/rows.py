"""The compiled kernels of the model's path as the audit's rows: each KernelCall answered by its family
(tileprobe.audit.path.families), one row per distinct call (a call made in several layers of the same kind is one
row), with the three answers in their own columns, plus the terminal table and report.md's section for them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from tileprobe.audit.path import families
from tileprobe.audit.path.call import CompiledAnswer, Context, KernelCall
from tileprobe.families import compiled_audit as fam
from tileprobe.progress import track
from tileprobe.results.rows import Outcome, StaticInfo, make_row
from tileprobe.targets import Target
from tileprobe.verdict import PATH_FAILURES, Verdict


@dataclass
class Answered:
    call: KernelCall
    library: str
    answer: CompiledAnswer
    verdict: Verdict
    row: dict


def _key(call: KernelCall) -> str:
    return hashlib.sha256(json.dumps([call.layer, call.phase, call.family, call.op, call.params], sort_keys=True,
                                     default=str).encode()).hexdigest()[:10]


def answer_all(calls: list[KernelCall], ctx: Context, arch: str, columns: dict, model_name: str,
               last_first: bool = False) -> list[Answered]:
    """Every distinct call answered, in the path's order; one progress step per call; a family's unexpected error is
    that row's `unanswered` with the error named (the audit goes on and the other rows stand). `last_first`: answered
    from the last call back (tileprobe.audit.path.ahead's worker fills the caches from the first call on, so the two
    meet once, each cache made by one of them), the rows still in the path's order."""
    seen: dict[str, KernelCall] = {}
    for c in calls:
        seen.setdefault(_key(c), c)
    out = []
    order = list(seen.items())
    with track(len(seen), "compiled kernels on the path") as bar:
        for key, call in (reversed(order) if last_first else order):
            try:
                library, ans = families.answer(call, ctx)
            except Exception as exc:  # noqa: BLE001 - one family's failure must not lose the other rows
                why = f"tileprobe's {call.family} family failed: {type(exc).__name__}: {exc}"
                library, ans = call.family, CompiledAnswer(call.op, families.unanswered(why),
                                                           families.unanswered(why), families.unanswered(why))
            verdict = ans.verdict(ctx.target)
            out.append(Answered(call, library, ans, verdict, _row(call, library, ans, verdict, ctx.target, arch,
                                                                  columns, model_name, key)))
            bar.done(f"{call.layer} [{call.phase}] {library}", verdict)
    return out[::-1] if last_first else out


def _row(call: KernelCall, library: str, ans: CompiledAnswer, verdict: Verdict, target: Target, arch: str,
         columns: dict, model_name: str, key: str) -> dict:
    cfg = fam.make_config(call.engine, call.layer, call.phase, library, call.op, ans.kernel, arch, call.chosen_by,
                          key)
    info = StaticInfo(smem_bytes=ans.smem_bytes, regs_per_thread=ans.registers)
    outcome = Outcome(cfg, verdict, ans.reason(target), info)
    params = ", ".join(f"{k}={v}" for k, v in call.params.items())
    return make_row(cfg, target, columns, outcome, point={"problem": f"{model_name}: {params}"},
                    extra={"engine": call.engine, "arch_answer": ans.arch.answer, "arch_evidence": ans.arch.evidence,
                           "gate_answer": ans.gate.answer, "gate_evidence": ans.gate.evidence,
                           "bytes_evidence": ans.bytes.evidence, "config_source": call.chosen_by})


def failures(answered: list[Answered]) -> list[str]:
    return [f"{a.call.engine} {a.call.layer} [{a.call.phase}] {a.library} {a.answer.kernel}: {a.verdict}: "
            f"{_first_failing(a)}" for a in answered if a.verdict in PATH_FAILURES]


def _first_failing(a: Answered) -> str:
    for name, part in (("arch", a.answer.arch), ("gate", a.answer.gate), ("bytes", a.answer.bytes)):
        if part.ok is False:
            return f"{name}: {part.answer}"
    return a.row.get("reason") or ""


def unanswered(answered: list[Answered]) -> list[str]:
    out = []
    for a in answered:
        if a.verdict is not Verdict.UNANSWERED:
            continue
        whys: dict[str, list[str]] = {}
        for n, p in (("arch", a.answer.arch), ("gate", a.answer.gate), ("bytes", a.answer.bytes)):
            if p.ok is None:
                whys.setdefault(p.answer, []).append(n)
        said = "; ".join(f"{' and '.join(names)}: {why}" for why, names in whys.items())
        out.append(f"{a.call.layer} [{a.call.phase}] {a.library} ({a.call.op}): {said}")
    return out


def terminal_table(answered: list[Answered], target: Target):
    from rich.table import Table
    from rich.text import Text
    t = Table(title=f"compiled kernels on the path ({target.name}, {target.smem_optin} B opt-in)", expand=False)
    for name in ("layer", "phase", "library / kernel", "arch", "gate", "shared B", "verdict"):
        t.add_column(name, overflow="fold", no_wrap=name == "verdict")
    for a in answered:
        t.add_row(*map(Text, (a.call.layer, a.call.phase, f"{a.library}: {a.answer.kernel}", _short(a.answer.arch),
                              _short(a.answer.gate), "-" if a.answer.smem_bytes is None else str(a.answer.smem_bytes),
                              str(a.verdict))))
    return t


def _short(part) -> str:
    mark = {True: "ok", False: "NO", None: "?"}[part.ok]
    text = part.answer if len(part.answer) <= 60 else part.answer[:57] + "..."
    return f"{mark} [{part.evidence}] {text}"


def markdown(answered: list[Answered], target: Target) -> str:
    """report.md's section: one line per row with the three answers and their evidence."""
    lines = [f"## Compiled kernels on the path ({target.name}, {target.smem_optin} B opt-in)", "",
             "| layer | phase | library | kernel | arch | gate | bytes | verdict |", "|---|---|---|---|---|---|---|---|"]

    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")
    for a in answered:
        b = a.answer.bytes
        size = "-" if a.answer.smem_bytes is None else f"{a.answer.smem_bytes} B"
        lines.append(f"| {cell(a.call.layer)} | {a.call.phase} | {cell(a.library)} | {cell(a.answer.kernel)} | "
                     f"{cell(a.answer.arch.answer)} [{a.answer.arch.evidence}] | {cell(a.answer.gate.answer)} "
                     f"[{a.answer.gate.evidence}] | {size}: {cell(b.answer)} [{b.evidence}] | {a.verdict} |")
    return "\n".join(lines) + "\n"
