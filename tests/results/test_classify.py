"""Correctness policy: element-wise per group; a launch without a check is never `ok`."""

from tileprobe.results.classify import classify
from tileprobe.verdict import Evidence, Verdict, evidence_for


def answer(**kw):
    d = {"launch_status": "ok", "rel_err": 0.002, "nonfinite": 0, "checked_elements": 1 << 20, "bad_elements": 0,
         "bad_groups": 0, "groups": 256, "worst_group": 0, "worst_row": 0, "worst_col": 0, "worst_value": 1.0,
         "worst_ref": 1.0, "worst_ratio": 0.2, "atol": 0.05, "rtol": 0.02}
    d.update(kw)
    return d


def test_one_corrupted_tile_is_incorrect_and_named_even_with_a_tiny_pooled_error(rng):
    g = rng.randrange(256)
    bad = 64 * 128
    r = classify(answer(rel_err=0.004, bad_elements=bad, bad_groups=1, worst_group=g, worst_row=5, worst_col=77,
                        worst_value=-3.5, worst_ref=3.5, worst_ratio=60.0))
    assert r.verdict is Verdict.INCORRECT
    assert f"worst in group {g}" in r.reason and f"{bad} of" in r.reason and "(row 5, col 77)" in r.reason


def test_verified_only_with_an_element_wise_check():
    assert classify(answer()).verdict is Verdict.OK
    for missing in ({"rel_err": None}, {"bad_elements": None}):
        r = classify(answer(**missing))
        assert r.verdict is Verdict.UNCHECKED and "launched evidence only" in r.reason
        assert evidence_for(r.verdict) is Evidence.LAUNCHED and not r.verdict.works


def test_non_finite_outputs_are_incorrect():
    assert classify(answer(nonfinite=3, bad_elements=3, bad_groups=1)).verdict is Verdict.INCORRECT


def test_launch_failures_keep_their_reason():
    r = classify({"launch_status": "launch-error", "launch_reason": "initialize: kErrorInternal — 280576"})
    assert r.verdict is Verdict.LAUNCH_ERROR and "280576" in r.reason
    assert classify({"launch_status": "not-runnable-here", "launch_reason": "sm_120a"}).verdict is \
        Verdict.NOT_RUNNABLE_HERE


def test_evidence_words():
    assert evidence_for(Verdict.FITS) is Evidence.SIZED
    assert evidence_for(Verdict.FITS, compiled=True) is Evidence.COMPILED
    assert evidence_for(Verdict.OK) is Evidence.VERIFIED
    assert evidence_for(Verdict.CRASHED) is Evidence.LAUNCHED
    assert evidence_for(Verdict.NOT_RUN) is Evidence.NONE
    assert evidence_for(Verdict.UNSUPPORTED) is Evidence.NONE
