"""What Triton's autotuner does with each config of an @triton.autotune launch: keeps it, drops it, or crashes on it.

Triton 3.8's `Autotuner._bench` (triton/runtime/autotuner.py) launches every config the engine's pruning left and
catches exactly three errors, timing such a config as inf so it is never picked: `OutOfResources` (the launch check
of metadata.shared against the device's opt-in limit: an over-limit config), `CompileTimeAssertionFailure` (a
tl.static_assert) and `PTXASError`. Any other compile error (a CompilationError of the frontend, an MLIR pass
failure) propagates out of `Autotuner.run`: the engine's first launch of the kernel raises it, whatever the other
configs are. With one config left (one listed, or one after pruning) nothing is benchmarked: it is launched as it
is, so even an over-limit one raises (`Groups.empty`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tileprobe.verdict import Verdict

# The exceptions Autotuner._bench catches (Triton 3.8: `except (OutOfResources, CompileTimeAssertionFailure,
# PTXASError)`), by class name as a compile error's line starts (tileprobe.backends.triton.compile.one_line)
CAUGHT = ("OutOfResources", "CompileTimeAssertionFailure", "PTXASError")


def error_kind(reason: str) -> str | None:
    """The exception class name of a compile-error row's reason ('triton 3.8.0: CompilationError: at 3:4: ...')."""
    head = reason.split(": ", 1)[1] if reason.lower().startswith("triton ") and ": " in reason else reason
    name = head.split(":", 1)[0].strip()
    return name if name.isidentifier() else None


def dropped_why(outcome, limit: int) -> str | None:
    """Why the autotuner drops this config (None: it keeps it, or it crashes on it: `crashes`)."""
    if outcome.verdict is Verdict.SMEM_OVER_LIMIT:
        smem = getattr(getattr(outcome, "info", None), "smem_bytes", None)
        return f"over the {limit} B opt-in limit" + (f" ({smem} B): OutOfResources" if smem is not None else "")
    if outcome.verdict is Verdict.COMPILE_ERROR and error_kind(outcome.reason) in CAUGHT:
        return f"{error_kind(outcome.reason)}, which the autotuner catches"
    return None


def crashes(outcome) -> bool:
    """A compile error the autotuner does not catch: the engine's first launch of the kernel raises it."""
    return outcome.verdict is Verdict.COMPILE_ERROR and error_kind(outcome.reason) not in CAUGHT


@dataclass
class Groups:
    """The autotuned launches judged: per planned launch the autotuner drops (while it has another to run), its
    `autotune_dropped` text; per group one note line; the groups left with nothing (`empty`: the launch raises
    OutOfResources, a failure); the planned launches whose compile error the autotuner does not catch (`crash`: each
    a failure of its own)."""

    marks: dict[int, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    empty: list = field(default_factory=list)
    crash: set[int] = field(default_factory=set)

    def __getitem__(self, key: str):  # tuned["marks"], as the audit reads it
        return getattr(self, key)


def judge(tuned: list, planned: list, outcomes: list, target) -> Groups:
    """Each autotune group (run.Tuned: `planned` indices, `listed`, `kernel`, `call_site`) of the audit's planned
    launches, by their outcomes (tileprobe.results.rows.Outcome)."""
    out = Groups()
    for t in tuned:
        drop = {i: why for i in t.planned if (why := dropped_why(outcomes[i], target.smem_optin))}
        crash = [i for i in t.planned if crashes(outcomes[i])]
        left = [i for i in t.planned if outcomes[i].verdict is Verdict.FITS]
        n = len(t.planned)
        base = f"{len(drop)} of {n} configs dropped by the autotuner on {target.name}"
        detail = f"the engine's pruning left {n} of the {t.listed} its decorator lists"
        for i, why in drop.items():  # with nothing left the launch runs one of them and raises: not dropped
            if left or crash:
                out.marks[i] = f"{base} (this one: {why}; {detail})"
        first = planned[left[0]].launch if left else None
        if crash:
            pick = (f"{len(crash)} fail to compile with an error the autotuner does not catch: the engine's first "
                    "launch raises it")
        elif first:
            pick = (f"the autotuner is left with {len(left)}: first "
                    + ", ".join(f"{k}={v}" for k, v in first.options if k in ("num_warps", "num_stages"))
                    + "".join(f", {k}={v}" for k, v in first.args if k.startswith("BLOCK") and isinstance(v, int)))
        else:
            pick = "nothing is left: the launch raises OutOfResources"
        out.notes.append(f"AUTOTUNE {t.kernel} ({t.call_site}): {base} ({_count(drop.values()) or 'none'}; "
                         f"{detail}); {pick}")
        out.crash.update(crash)
        if not left and not crash:
            out.empty.append(t)
    return out


def _count(whys) -> str:
    """'9 over the opt-in limit, 1 PTXASError' from the reasons each config was dropped."""
    counts: dict[str, int] = {}
    for w in whys:
        key = "over the opt-in limit" if w.startswith("over the") else w.split(",", 1)[0]
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in counts.items())
