"""Isolated harness processes without a GPU: only a started point is ever blamed for a crash or a hang."""

import time
from pathlib import Path

from _fakes import fake_harness, problems

from tileprobe.backends.cutlass.runner import Answer, Died, Ended, run_points
from tileprobe.verdict import Verdict


def events(tmp_path, behaviour, ids, timeout=20):
    exe = fake_harness(tmp_path, behaviour)
    return list(run_points([str(exe), "--problems", str(problems(tmp_path, ids))], timeout))


def test_answers_arrive_in_order_with_their_stable_ids(tmp_path, rng):
    ids = rng.sample(range(100), 4)
    evs = events(tmp_path, {}, ids)
    assert [e.point for e in evs if isinstance(e, Answer)] == ids
    assert isinstance(evs[-1], Ended) and evs[-1].returncode == 0


def test_sticky_error_blames_only_its_own_point(tmp_path, rng):
    """The harness answers point k (launch-error) and exits 3: the next point was never started, so no event
    blames it; the caller gives it to a fresh process."""
    ids = [10, 11, 12, 13]
    k = rng.choice(ids[:-1])
    evs = events(tmp_path, {k: "sticky"}, ids)
    answered = [e.point for e in evs if isinstance(e, Answer)]
    assert answered == ids[: ids.index(k) + 1]
    assert not any(isinstance(e, Died) for e in evs)
    assert isinstance(evs[-1], Ended) and evs[-1].returncode == 3


def test_crash_during_a_point_blames_that_point(tmp_path, rng):
    ids = [3, 4, 5]
    k = rng.choice(ids)
    evs = events(tmp_path, {k: "segv"}, ids)
    died = [e for e in evs if isinstance(e, Died)]
    assert len(died) == 1 and died[0].point == k and died[0].verdict is Verdict.CRASHED
    assert "SIGSEGV" in died[0].reason


def test_hang_is_timeout_of_the_started_point_and_the_group_dies(tmp_path):
    start = time.monotonic()
    evs = events(tmp_path, {7: "hang"}, [6, 7, 8], timeout=2)
    died = [e for e in evs if isinstance(e, Died)]
    assert [d.point for d in died] == [7] and died[0].verdict is Verdict.TIMEOUT
    assert time.monotonic() - start < 30


def test_a_process_that_dies_before_starting_blames_nobody(tmp_path):
    evs = events(tmp_path, {0: "die-before"}, [0, 1])
    assert len(evs) == 1 and isinstance(evs[0], Ended) and evs[0].returncode == 1


def test_unstartable_binary_is_reported_not_raised(tmp_path):
    evs = list(run_points([str(Path(tmp_path) / "missing")], 5))
    assert isinstance(evs[0], Ended) and "cannot start" in evs[0].stderr_tail
