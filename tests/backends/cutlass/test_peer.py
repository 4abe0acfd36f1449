"""--peer torch: says so in one line without torch; a child failure comes back as an error, never a traceback."""

import importlib.util

from tileprobe.backends.cutlass import peer


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


def test_fp8_peer_applies_to_every_fp8_x_fp8_family_and_no_fp4_one(rng):
    """The SM90 flashinfer-moe family is FP8 x FP8 (its declared ab_bits is the SM120 default, 4): it gets the peer;
    MXFP8 x MXFP4 (8-bit activations, 4-bit weights) and NVFP4 do not."""
    from tileprobe.families import FAMILIES, expand_configs
    from tileprobe.families.base import Config, Tile
    from tileprobe.sweep import fp8_peer_applies

    def fim(arch, dt):
        return Config("flashinfer-moe", Tile(128, 128, 128), "auto", 0, rng.choice(["default", "finalize"]),
                      rng.choice([False, True]), arch, (1, 1, 1), (("dtypes", dt), ("tactic", "CtaShape128x128x128B")))

    fi = FAMILIES["flashinfer-moe"]
    assert fp8_peer_applies(fi, [fim("sm_90a", "fp8xfp8")])
    assert not fp8_peer_applies(fi, [fim("sm_120a", "mxfp8xmxfp4")])
    assert not fp8_peer_applies(fi, [fim("sm_120a", "nvfp4xnvfp4")])
    assert not fp8_peer_applies(fi, [fim("sm_90a", "fp8xfp8"), fim("sm_120a", "mxfp8xmxfp4")])
    sm90 = expand_configs(FAMILIES["sm90-fp8"], "sm_90a", ["128x128x128"], ["cooperative"])
    assert fp8_peer_applies(FAMILIES["sm90-fp8"], sm90)
    nv = expand_configs(FAMILIES["sm120-nvfp4"], "sm_120a", ["128x128x128"], ["cooperative"])
    assert not fp8_peer_applies(FAMILIES["sm120-nvfp4"], nv)
