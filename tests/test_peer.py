"""--peer torch: says so in one line without torch; a child failure comes back as an error, never a traceback."""

import importlib.util

from tileprobe import peer


def test_without_torch_the_option_says_so(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    why = peer.available("torch")
    assert why and "torch" in why and "\n" not in why
    assert "unknown peer" in peer.available("cublas")


def test_a_failing_child_is_an_error_not_a_crash(rng):
    m = rng.randint(1, 16)
    got = peer.measure(0, [(0, 1, [[m, 256, 512]])], timeout_s=300)
    # no GPU here: the child fails and says why; on a GPU machine it returns a time for point 0
    assert ("error" in got and "torch peer" in got["error"]) or (0 in got and (got[0] is None or got[0] > 0))
