"""How each audit launch is answered, cheapest exact answer first (the audit's predictor-first):

- `predicted`: the entry's stated rule (AuditKernel.predict: vLLM's fused_moe_kernel by the triton-moe predictor,
  keyed by Triton release and kernel sha256) answers it; nothing is built.
- `sized`: no rule answers it, and Triton's own stages run up to its shared-memory allocation
  (tileprobe.backends.triton.allocate), where metadata.shared is decided; no LLVM, PTX or cubin.
- `compiled`: `--compile-all`, the `--verify N` sample, or a Triton whose allocation prefix is not the checked one:
  the whole compile, with registers and spills.

`--verify N` compiles a seeded random sample of N distinct predicted or sized launches and names each whose
compiled bytes differ from its answer (`mismatches`); the sampled rows carry the compile. Every row says what the
rule said (`columns`: predicted_smem_bytes and `exact` / `MODEL ERROR` / `not measured`, or `cannot predict: why`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tileprobe.backends.triton import allocate
from tileprobe.backends.triton.compile import KernelJob, TritonBuild
from tileprobe.predict import CannotPredict
from tileprobe.triton.predicted import Policy

PREDICTED, SIZED, COMPILED = "predicted", "sized", "compiled"


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


@dataclass
class Plan:
    predictions: list  # int | CannotPredict per launch
    modes: list[str]  # PREDICTED / SIZED / COMPILED per launch
    sampled: list[bool]  # per launch: compiled as part of the --verify sample (its answer is checked)
    seed: int | None
    policy: Policy
    unsized: str | None  # why Triton's allocation cannot be run alone here (None: it can)

    def jobs(self, planned: list) -> list[KernelJob | None]:
        """Each launch's build: None (predicted), its allocation alone, or its compile."""
        return [None if m == PREDICTED else p.job.sized() if m == SIZED else p.job.compiled()
                for p, m in zip(planned, self.modes)]

    def checks(self, planned: list) -> list[KernelJob | None]:
        """Per launch, the answer a sampled launch's compile is compared with, when it is a build (its sizing)."""
        return [p.job.sized() if s and not isinstance(pr, int) else None
                for p, s, pr in zip(planned, self.sampled, self.predictions)]

    def counts(self) -> dict:
        return {"predicted": self.modes.count(PREDICTED), "sized": self.modes.count(SIZED),
                "compiled": self.modes.count(COMPILED),
                "cannot_predict": sum(isinstance(p, CannotPredict) for p in self.predictions),
                "verified": sum(self.sampled)}

    def record(self) -> dict:
        """run.json's account of how the launches were answered."""
        return {"policy": self.policy.name, "verify": self.policy.verify, "verify_seed": self.seed,
                "rules": "the entries' stated rules (tileprobe.audit.answers); sized: tileprobe.backends.triton."
                         "allocate" + (f" (not here: {self.unsized})" if self.unsized else ""), **self.counts()}

    def mode(self) -> str:
        words = set(self.modes)
        return words.pop() if len(words) == 1 else "mixed" if words else COMPILED

    def mismatches(self, builds: list, checks: list, names: list[str]) -> list[str]:
        """One line per sampled launch whose compile differs from its answer (the rule's, or its sizing)."""
        out = []
        for i, (b, c, name) in enumerate(zip(builds, checks, names)):
            if not self.sampled[i]:
                continue
            said = self.predictions[i] if isinstance(self.predictions[i], int) else \
                c.shared if isinstance(c, TritonBuild) else None
            how = "predicted" if isinstance(self.predictions[i], int) else "sized"
            got = b.shared if isinstance(b, TritonBuild) else None
            if said != got:
                out.append(f"{name}: {how} " + (f"{said} B" if said is not None else f"nothing ({getattr(c, 'line', c)})")
                           + ", compiled " + (f"{got} B" if got is not None else f"nothing ({getattr(b, 'line', b)})"))
        return out


def plan(planned: list, policy: Policy, triton_version: str) -> Plan:
    """Answer each planned launch (planned[i].job distinct per i) as the policy says."""
    preds = [predict(p, triton_version) for p in planned]
    unsized = allocate.unavailable()
    if policy.compile_all:
        modes = [COMPILED] * len(planned)
    else:
        modes = [PREDICTED if isinstance(pr, int) else COMPILED if unsized else SIZED for pr in preds]
    sampled = [False] * len(planned)
    seed = None
    if policy.verify:
        seed = policy.seed if policy.seed is not None else random.randrange(2**31)
        answered = [i for i, m in enumerate(modes) if m != COMPILED]
        for i in random.Random(seed).sample(answered, min(policy.verify, len(answered))):
            sampled[i], modes[i] = True, COMPILED
    return Plan(preds, modes, sampled, seed, policy, unsized)

