"""The --dynamic grammar: exact arithmetic, and --solve's answer equals a brute-force walk over every value."""

from fractions import Fraction

import pytest

from tileprobe.binary import expr
from tileprobe.errors import UsageError


def brute(text: str, env: dict, var: str, budget: int) -> int | None:
    node, best = expr.parse(text), None
    for v in range(0, 5 * budget + 2):
        if expr.evaluate(node, env | {var: v}) <= budget:
            best = v
        else:
            break
    return best


def test_arithmetic_is_exact():
    env = {"a": 7, "b": 2}
    assert expr.evaluate(expr.parse("a/b*2"), env) == 7
    assert expr.evaluate(expr.parse("a//b*2"), env) == 6
    assert expr.evaluate(expr.parse("-(a - 10) * b + 1_000"), env) == 1006
    assert expr.evaluate(expr.parse("a / 3"), env) == Fraction(7, 3)
    assert expr.evaluate(expr.parse("a \u2212 b"), env) == 5


def test_solve_equals_brute_force(rng):
    for _ in range(30):
        size = rng.choice([1, 2, 4, 8, 16])
        k, c, d = rng.randrange(1, 9), rng.randrange(0, 300), rng.randrange(1, 5)
        text = rng.choice([f"(D + n) * {size}", f"(D + n*{k}) * {size} + {c}", f"(n // {d} + D) * {size}",
                           f"(n + {c}) * {size} / {d} + D", f"{size} * (D - {c} + {k} * n)"])
        env, budget = {"D": rng.randrange(0, 500)}, rng.randrange(0, 3000)
        s = expr.solve(expr.parse(text), env, "n", budget, text)
        assert s.value == brute(text, env, "n", budget), (text, env, budget)
        if s.value is not None:
            assert s.request <= budget < s.next_request


def test_solve_refuses_a_falling_request_and_says_unbounded():
    with pytest.raises(UsageError, match="falls as n grows"):
        expr.solve(expr.parse("100000 - n*4"), {}, "n", 200000, "100000 - n*4")
    assert expr.solve(expr.parse("n*0 + 8"), {}, "n", 100, "n*0 + 8").unbounded
    assert expr.solve(expr.parse("(n + 10) * 4"), {}, "n", 39, "").value is None


@pytest.mark.parametrize("text", ["", "1 +", "(1", "1)", "2 ** 3", "a.b", "f(x)", "1e3", "'x'", "a if b else c",
                                  "--" * 30 + "1" * 0 + "(" * 60 + "1" + ")" * 60])
def test_outside_the_grammar_is_a_usage_error(text):
    with pytest.raises(UsageError):
        expr.parse(text)
