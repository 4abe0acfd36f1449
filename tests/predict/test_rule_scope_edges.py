"""The stated Triton rules' scope edges, drawn at random every run: outside the Triton releases, kernel sources
(engine files) and compute capabilities each rule was checked on, the rule declines (CannotPredict, naming which edge)
instead of answering; inside all three it reaches its own parameters. The rules' own tests draw only launches the
rules answer; this one draws the launches they must not."""

from __future__ import annotations

import hashlib

import pytest

from tileprobe.predict import CannotPredict
from tileprobe.predict import recheck, triton_attention, triton_conv, triton_ogs, triton_ssd

MODULES = (triton_ssd, triton_conv, triton_attention, triton_ogs)


def _inside(mod, rng):
    """A (kernel, Triton release, source sha256) the rule was checked on."""
    key = rng.choice(sorted(mod.CHECKED))
    if mod is triton_ogs:
        version, kernel, sha = key
        return kernel, version, sha
    version, sha = key
    if mod is triton_attention:
        kernel = rng.choice(sorted(k for k, files in mod.KERNEL_FILES.items() if mod.CHECKED[key] in files))
    else:
        kernel = rng.choice(sorted(mod.KERNELS if mod is triton_ssd else mod.RULES))
    return kernel, version, sha


@pytest.mark.parametrize("mod", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_each_edge_declines_and_inside_reaches_the_rule(mod, rng):
    kernel, version, sha = _inside(mod, rng)
    cc = rng.choice(mod.CCS)
    # a release neither the table nor a reviewed recheck file (tileprobe/predict/rechecked/) names: 3.9.0 has one, whose
    # re-checked rules answer there (tests/predict/test_triton_recheck.py)
    rechecked = {p.stem for p in recheck.FOLDER.glob("*.json")}
    other_version = rng.choice([v for v in ("3.6.0", "3.7.1", "3.9.0", "4.0.0")
                                if v not in mod.TRITON_VERSIONS and v not in rechecked])
    with pytest.raises(CannotPredict, match=f"not {other_version}"):
        mod.predict(kernel, {}, cc, other_version, source_sha256=sha)
    other_sha = hashlib.sha256(f"edited {rng.random()}".encode()).hexdigest()
    with pytest.raises(CannotPredict, match="is not one the"):
        mod.predict(kernel, {}, cc, version, source_sha256=other_sha)
    other_cc = rng.choice([c for c in (75, 80, 86, 89, 90, 100, 103) if c not in mod.CCS])
    with pytest.raises(CannotPredict, match=f"not sm_{other_cc}"):
        mod.predict(kernel, {}, other_cc, version, source_sha256=sha)
    # inside every edge the rule itself runs: with no parameters it fails on them, not on its scope
    try:
        mod.predict(kernel, {}, cc, version, source_sha256=sha)
    except CannotPredict as exc:
        assert not any(w in str(exc) for w in ("checked on Triton", "is not one the", "checked for sm_")), exc
    except (KeyError, TypeError, ValueError, AttributeError):
        pass  # the rule reached its parameters
