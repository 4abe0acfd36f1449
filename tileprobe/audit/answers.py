"""How each audit launch is answered, cheapest exact answer first (the audit's predictor-first, planned by the same
tileprobe.triton.predicted.plan as check-configs and export):

- `predicted`: the entry's stated rule (AuditKernel.predict: vLLM's fused_moe_kernel by the triton-moe predictor,
  keyed by Triton release and kernel sha256) answers it; nothing is built.
- `sized`: no rule answers it, and Triton's own stages run up to its shared-memory allocation
  (tileprobe.backends.triton.allocate), where metadata.shared is decided; no LLVM, PTX or cubin.
- `compiled`: `--compile-all`, the `--verify N` sample, or a Triton whose allocation prefix is not the checked one:
  the whole compile, with registers and spills.

`--verify N` compiles a seeded random sample of N distinct predicted or sized launches; a sampled sized launch is
sized as well (`checks`), and Answers.mismatches names each whose compiled bytes differ from its answer. Every row
says what the rule said (tileprobe.triton.predicted.prediction_columns).
"""

from __future__ import annotations

from tileprobe.backends.triton import allocate
from tileprobe.backends.triton.compile import KernelJob
from tileprobe.predict import CannotPredict
from tileprobe.triton.predicted import Answers, Policy, plan as plan_answers

RULES = "the audit entries' stated rules (tileprobe.audit.answers), else Triton's allocation alone " \
        "(tileprobe.backends.triton.allocate)"


def predict(p, triton_version: str) -> int | CannotPredict:
    """A planned launch's bytes by its entry's rule, or why there is none (returned, not raised)."""
    rule = p.kernel.predict
    if rule is None:
        return CannotPredict(f"no stated rule for {p.launch.kernel}'s shared-memory layout: sized by Triton's own "
                             "allocation, or compiled")
    try:
        return rule(p.launch, p.job, triton_version)
    except CannotPredict as exc:
        return exc


def sizing(policy: Policy) -> str | None:
    """Why launches are compiled rather than sized (None: sized, where no rule answers them)."""
    return "--compile-all" if policy.compile_all else allocate.unavailable()


def plan(planned: list, policy: Policy, triton_version: str, rules_off: str = "") -> Answers:
    """Answer each planned launch (planned[i].job) as the policy says; `rules_off` (the manifest's banner): no rule is
    asked, every launch is compiled and its row says why."""
    why = allocate.unavailable()
    preds = [CannotPredict(f"rules off: {rules_off}") if rules_off else predict(p, triton_version) for p in planned]
    ans = plan_answers(preds, [p.job for p in planned], policy, size=why is None)
    ans.predictor = RULES + (f" (not here: {why})" if why else "")
    return ans


def jobs(ans: Answers, planned: list) -> list[KernelJob | None]:
    """Each launch's build: None (predicted), its allocation alone, or its compile."""
    return [p.job.compiled() if ans.compile[i] else p.job.sized() if ans.is_sized(i) else None
            for i, p in enumerate(planned)]


def checks(ans: Answers, planned: list) -> list[KernelJob | None]:
    """Per sampled sized launch, its sizing (the answer its compile is compared with); None elsewhere."""
    return [p.job.sized() if ans.sampled[i] and ans.is_sized(i) else None for i, p in enumerate(planned)]
