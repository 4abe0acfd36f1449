"""triton/audit.py's problem rule: a config file's name carries E and N, never the hidden size, so the preset it
is read as must be one of the hidden size the user gives (`--hidden`), and a label must not name another model."""

from __future__ import annotations

from tileprobe.triton.audit import problem_for
from tileprobe.workloads import PRESETS


def _cases():
    for m in PRESETS.values():
        for tp in (1, 2, 4, 8):
            if m.inter % tp == 0:
                yield m, tp


def test_a_given_hidden_size_names_a_preset_of_that_size(rng):
    cases = list(_cases())
    for m, tp in rng.sample(cases, min(12, len(cases))):
        p = problem_for(m.experts, m.inter // tp, m.hidden)
        named = PRESETS[p.how.split()[0]]
        assert p.hidden == m.hidden and named.hidden == m.hidden, (m.name, tp, p)
        # the named preset serves the file's E (its experts, or an EP shard of them) and N (inter / tp)
        assert p.experts_global == named.experts and named.experts // p.ep == m.experts, (m.name, tp, p)
        assert named.inter % (m.inter // tp) == 0 and p.top_k == named.top_k, (m.name, tp, p)


def test_a_hidden_size_no_matching_preset_has_is_said_to_be_given(rng):
    m, tp = rng.choice(list(_cases()))
    hidden = rng.choice([h for h in range(1024, 16384, 128) if h not in {x.hidden for x in PRESETS.values()}])
    p = problem_for(m.experts, m.inter // tp, hidden)
    assert p.hidden == hidden and p.how.endswith(f"hidden {hidden} given"), p


def test_the_qwen3_30b_file_with_its_hidden_size_is_qwen3_30b():
    """E=128, N=768 is qwen3-30b-a3b at tp1 and qwen3-235b-a22b at tp2; hidden 2048 is only the first's."""
    assert problem_for(128, 768, 2048).how == "qwen3-30b-a3b tp1"
    assert problem_for(128, 768, 4096).how == "qwen3-235b-a22b tp2"
