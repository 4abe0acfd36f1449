"""Predictor-first answers for triton-moe launches: the one place the predictor (tileprobe.predict.triton_moe) is
asked, and the split of a batch of launches into those it answers and those Triton must compile.

`predict_launch(config, source, triton_version)` is the predictor call every caller uses (check-configs, export
triton-configs and its substitute search, sweep --family triton-moe): the launch's metadata.shared in bytes where the
rule was checked exact, else a CannotPredict saying why (returned, not raised). On top of the rule's own scope it
refuses a BLOCK_SIZE_* or num_warps that is not a power of two (tl.arange and Triton's layouts refuse or change them:
only a compile can say).

`plan(predictions, jobs, policy, size=...)` plans a batch for every caller (`answer` is triton-moe's, asking
predict_launch first; tileprobe.audit.answers asks its entries' rules): by default every launch the predictor
answers is answered by it (row evidence `predicted`) and the others are compiled (`compiled`), or, with `size`
(the audit), sized by Triton's allocation alone (`sized`, tileprobe.backends.triton.allocate);
`Policy.compile_all` compiles every launch (the old behaviour); `Policy.verify` N also compiles a random sample of N
distinct predicted (or sized) launches (seeded; the seed is printed by the callers and recorded) and names each
whose compiled bytes differ (`Answers.mismatches`). A compiled row also carries what the predictor said
(`prediction_columns`): the bytes and `exact` / `MODEL ERROR: ...`, or
`cannot predict: <why>`, the CUTLASS rows' columns.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tileprobe.backends.triton.compile import TritonBuild, TritonCompileError, compile_many
from tileprobe.backends.triton.source import KernelSource
from tileprobe.errors import TileprobeError, UsageError
from tileprobe.families import triton_moe as tm
from tileprobe.predict import CannotPredict
from tileprobe.predict import triton_moe as predict_tm

NOT_MEASURED = "not measured"  # the CUTLASS rows' word (tileprobe.predict.modeled): a predicted row is not compared
POW2_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_warps")
PREDICTOR = f"tileprobe.predict.triton_moe (Triton {', '.join(predict_tm.TRITON_VERSIONS)})"


def predict_launch(config, source: KernelSource | None, triton_version: str) -> int | CannotPredict:
    """metadata.shared for the launch `config` (a triton-moe families.base.Config) under Triton `triton_version`,
    or the CannotPredict that says why not. `source` is the kernel compiled (its sha256 keys the rule by kernel
    source: tileprobe.predict.triton_moe takes it where its rules are keyed so)."""
    if config.unsupported_reason:
        return CannotPredict(f"the launch is not reproduced ({config.unsupported_reason})")
    entry = tm.entry_of(config)
    odd = [f"{k}={entry[k]}" for k in POW2_KEYS if entry[k] & (entry[k] - 1)]
    if odd:
        return CannotPredict(f"{', '.join(odd)} not a power of two: Triton may refuse it; only a compile says")
    if source is None:
        return CannotPredict("no kernel source: the rules are keyed by the kernel's sha256")
    try:
        return predict_tm.predict(config.get("engine"), config.get("quant"), entry, tm.arch_cc(config.arch),
                                  triton_version, int(config.get("gemm_n")), int(config.get("gemm_k")),
                                  kernel_sha256=source.sha256)
    except CannotPredict as exc:
        return exc


@dataclass(frozen=True)
class Policy:
    """How launches are answered: predictor first (default), every one compiled (compile_all), and `verify` predicted
    launches compiled as a check (seeded by `seed`; None: drawn at random, then recorded in Answers.seed)."""
    compile_all: bool = False
    verify: int = 0
    seed: int | None = None

    def check(self) -> Policy:
        if self.verify < 0:
            raise UsageError(f"--verify {self.verify}: the number of predicted launches to compile, at least 0")
        if self.compile_all and self.verify:
            raise UsageError("--verify compiles a sample of the predicted launches; with --compile-all none is "
                             "predicted (every launch is compiled): give one of them")
        if self.seed is not None and self.seed < 0:
            raise UsageError(f"--verify-seed {self.seed}: a whole number, at least 0")
        return self

    @property
    def name(self) -> str:
        return "compile-all" if self.compile_all else "predictor-first"


class PredictionMismatch(TileprobeError):
    """--verify compiled a predicted launch and Triton's bytes differ: one line per launch (launch, predicted,
    compiled). The CLI prints them and exits 1."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(f"{len(lines)} predicted launch(es) differ from their compile")
        self.lines = lines


@dataclass
class Answers:
    """One batch of launches answered: per launch the predictor's answer, whether it is compiled, and (where the
    caller sizes what the predictor does not answer: the audit) whether Triton's allocation alone answers it."""
    predictions: list  # int | CannotPredict, per launch
    compile: list[bool]  # per launch: compiled (cannot predict, --compile-all, or in the --verify sample)
    sampled: list[bool]  # per launch: compiled as part of the --verify sample
    seed: int | None  # the --verify sample's seed (None: no sample drawn)
    policy: Policy = field(default_factory=Policy)
    sized: list[bool] | None = None  # per launch: sized by Triton's allocation (tileprobe.backends.triton.allocate)
    predictor: str = PREDICTOR

    def is_sized(self, i: int) -> bool:
        """Launch i is answered by Triton's allocation alone (a sampled one is compiled too, and checked with it)."""
        return bool(self.sized and self.sized[i])

    def predicted(self, i: int) -> int | None:
        """The bytes launch i is answered with, without a build (None: it is sized or compiled)."""
        p = self.predictions[i]
        return None if self.compile[i] or self.is_sized(i) or not isinstance(p, int) else p

    def word(self, i: int) -> str | None:
        """How launch i's row is answered: compiled, sized, predicted (None: not answered at all)."""
        return "compiled" if self.compile[i] else "sized" if self.is_sized(i) else \
            "predicted" if isinstance(self.predictions[i], int) else None

    def counts(self, jobs: list | None = None) -> dict:
        """How many launches were predicted / sized / compiled / could not be predicted (distinct ones if `jobs`)."""
        idx = list(range(len(self.compile)))
        if jobs is not None:
            idx = list({jobs[i]: i for i in idx if jobs[i] is not None}.values())
        words = [self.word(i) for i in idx]
        return {"predicted": words.count("predicted"), "sized": words.count("sized"),
                "compiled": words.count("compiled"),
                "cannot_predict": sum(isinstance(self.predictions[i], CannotPredict) for i in idx),
                "verified": sum(self.sampled[i] for i in idx)}

    def record(self, jobs: list | None = None) -> dict:
        """run.json's / provenance's account of how the launches were answered."""
        return {"policy": self.policy.name, "verify": self.policy.verify, "verify_seed": self.seed,
                "predictor": self.predictor, **self.counts(jobs)}

    def mode(self, launched: list[bool] | None = None) -> str:
        """The evidence the launches' rows carry together: predicted, sized, compiled, or mixed."""
        words = {self.word(i) for i in range(len(self.compile)) if launched is None or launched[i]} - {None}
        return words.pop() if len(words) == 1 else "mixed" if words else "compiled"

    def mismatches(self, builds: list, names: list[str], checks: list | None = None) -> list[str]:
        """One line per sampled launch whose compile differs from its answer: the prediction, or its sizing
        (`checks[i]`, the sized build of a sampled sized launch)."""
        out, seen = [], set()
        for i, (b, name) in enumerate(zip(builds, names)):
            p = self.predictions[i]
            if not self.sampled[i] or name in seen:
                continue
            if isinstance(p, int):
                how, said, why = "predicted", p, ""
            elif self.is_sized(i) and checks is not None:
                c = checks[i]
                how, said = "sized", c.shared if isinstance(c, TritonBuild) else None
                why = f"nothing ({getattr(c, 'line', c)})"
            else:
                continue
            got = b.shared if isinstance(b, TritonBuild) else None
            if said != got:
                seen.add(name)
                out.append(f"{name}: {how} " + (f"{said} B" if said is not None else why) + ", compiled "
                           + (f"{got} B" if got is not None else f"nothing ({getattr(b, 'line', b)})"))
        return out


def plan(preds: list, jobs: list, policy: Policy, size: bool = False) -> Answers:
    """Plan a batch from the predictor's answers: jobs[i] is launch i's KernelJob (None when it is not built at all);
    equal jobs are one launch for the --verify sample (it draws distinct launches). `size`: a launch the predictor
    does not answer is sized by Triton's allocation instead of compiled (the audit)."""
    compile_ = [j is not None and (policy.compile_all or (not isinstance(p, int) and not size))
                for p, j in zip(preds, jobs)]
    sized = [j is not None and not c and not isinstance(p, int) for p, j, c in zip(preds, jobs, compile_)] \
        if size else None
    sampled = [False] * len(jobs)
    seed = None
    if policy.verify:
        seed = policy.seed if policy.seed is not None else random.randrange(2**31)
        distinct = list(dict.fromkeys(j for j, c in zip(jobs, compile_) if j is not None and not c))
        picked = set(random.Random(seed).sample(distinct, min(policy.verify, len(distinct))))
        for i, j in enumerate(jobs):
            if j in picked:
                compile_[i] = sampled[i] = True
    return Answers(preds, compile_, sampled, seed, policy, sized)


def answer(configs: list, jobs: list, source: KernelSource | None, triton_version: str, policy: Policy) -> Answers:
    """Plan a batch of triton-moe launches: configs[i] is launch i, jobs[i] its KernelJob (see `plan`)."""
    preds = [predict_launch(c, source, triton_version) if j is not None else CannotPredict("not compiled")
             for c, j in zip(configs, jobs)]
    return plan(preds, jobs, policy)


def prediction_columns(pred, build) -> dict:
    """predicted_smem_bytes and `prediction` for a row: what the predictor said, against the compile if there was
    one ('exact' / 'MODEL ERROR: ...'); 'not measured' for a row whose bytes are the prediction itself."""
    if isinstance(pred, CannotPredict):
        return {"predicted_smem_bytes": None, "prediction": f"cannot predict: {pred}"}
    if build is None:
        return {"predicted_smem_bytes": pred, "prediction": NOT_MEASURED}
    if isinstance(build, TritonCompileError):
        return {"predicted_smem_bytes": pred, "prediction": f"MODEL ERROR: predicted {pred} B, Triton did not "
                                                            "compile it"}
    if build.shared == pred:
        return {"predicted_smem_bytes": pred, "prediction": "exact"}
    return {"predicted_smem_bytes": pred, "prediction": f"MODEL ERROR: predicted {pred} B, compiled {build.shared} B"}


def verify_sample(launches: list[tuple[str, object, int]], n: int, seed: int | None, n_jobs: int, cache_dir
                  ) -> tuple[int, int, list[str]]:
    """After the fact (export's substitute search decides from predictions batch by batch): compile a seeded sample
    of `n` distinct predicted launches (name, KernelJob, predicted bytes) and compare. Returns (seed, how many were
    compiled, mismatch lines)."""
    seed = seed if seed is not None else random.randrange(2**31)
    distinct = list({job: (name, job, b) for name, job, b in launches}.values())
    picked = random.Random(seed).sample(distinct, min(n, len(distinct)))
    builds = compile_many([job for _, job, _ in picked], n_jobs, cache_dir)
    ans = Answers([b for _, _, b in picked], [True] * len(picked), [True] * len(picked), seed)
    return seed, len(picked), ans.mismatches(builds, [name for name, _, _ in picked])
