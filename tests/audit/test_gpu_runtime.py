"""On a GPU: the engines' own Triton attention kernels (SGLang extend / prefill / decode, vLLM unified attention 2D
and 3D, vLLM's Triton MLA decode), imported from the engines' wheels and launched with random inputs at the
parameters the engine's launcher picks (tileprobe.audit.runtime), match the fp64 reference of attention element by
element under the bound of tileprobe/results/tolerance.py; the same check fails on an output with flipped elements
and on an output the kernel never wrote (NaN poison).

The wheels: on the lent GPU machine carry the slim ones (`python -m tileprobe.audit.runtime --slim .engine-wheels`)
and set TILEPROBE_ENGINE_WHEELS=.engine-wheels."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tileprobe.audit import runtime, runtime_cases  # noqa: E402
from tileprobe.families import arch_for, family  # noqa: E402
from tileprobe.families import triton_audit as fam  # noqa: E402
from tileprobe.verdict import Verdict  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.triton]

CASES = runtime_cases.cases(132)


@pytest.fixture(scope="module")
def device():
    return runtime.device_target()


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_engine_kernel_verified_and_corruption_caught(request, name, device, rng):
    case = next(c for c in runtime_cases.cases(device.sms) if c.name == name)
    src = request.getfixturevalue(case.engine)
    arch = arch_for(family(fam.NAME), device.cc)
    seed = rng.randrange(2**31)
    cfg, outcome, fields, flipped = runtime.run_case(case, src, device, arch, seed, (5, 20), 4, launch=True)
    assert outcome.verdict is Verdict.OK, f"{name} seed {seed}: {outcome.reason}"
    assert fields["bad_elements"] == 0 and fields["checked_elements"] > 0
    assert 0 <= fields["worst_ratio"] <= 1 and fields["us_median"] > 0
    assert flipped is not None and flipped["bad_elements"] >= 1, f"{name}: flipped elements passed the check"


def test_unwritten_output_fails(device, rng):
    """An output the kernel never wrote (the NaN poison left in place) fails every element."""
    case = next(c for c in runtime_cases.cases(device.sms) if c.name == "sglang-decode-gqa")
    gen = torch.Generator(device="cuda").manual_seed(rng.randrange(2**31))
    built = case.build(runtime_cases.model_of(case), gen, "cuda")
    built.out.fill_(math.nan)
    bound = runtime.bound_for(built.keys)
    result = runtime.check(built, bound)
    assert result["bad_elements"] == result["checked_elements"] == result["nonfinite"] > 0
