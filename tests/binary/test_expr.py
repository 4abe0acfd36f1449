"""The --dynamic grammar: C's integer arithmetic (checked against a C program), and --solve's answer equals a
brute-force walk over every value."""

import shutil
import subprocess

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


def _random_expr(rng, names: list[str], depth: int = 0) -> str:
    if depth > 3 or rng.random() < 0.3:
        return rng.choice(names + [str(rng.randrange(0, 40))])
    op = rng.choice(["+", "-", "*", "/", "/", "%"])
    text = f"{_random_expr(rng, names, depth + 1)} {op} {_random_expr(rng, names, depth + 1)}"
    return f"({text})" if rng.random() < 0.6 else text


def test_arithmetic_is_what_c_computes(rng, tmp_path):
    """Random expressions over integers, with negative intermediate values, evaluated here and by a C program the
    host compiler builds (long long arithmetic: / truncates toward zero, % takes the dividend's sign). Main's exact
    fractions gave 7/2 = 3.5 where C says 3, and floored -3/4 to -1 where C says 0."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no host C compiler")
    env = {n: rng.randrange(0, 600) for n in ("Dl", "Dr", "kv")}
    texts = ["(Dl - 10 - Dr) / 4", "7 / 2 * 2", "-(kv + 3) / 2", "(Dl - Dr - 700) % 7"]
    while len(texts) < 60:
        t = _random_expr(rng, list(env))
        try:
            expr.evaluate(expr.parse(t), env)
        except UsageError:  # division by zero: C's is undefined
            continue
        texts.append(t)
    decl = "".join(f"long long {n} = {v};\n" for n, v in env.items())
    body = "".join(f'printf("%lld\\n", (long long)({t}));\n' for t in texts)
    src = tmp_path / "e.c"
    src.write_text(f"#include <stdio.h>\nint main(void) {{\n{decl}{body}return 0;\n}}\n")
    subprocess.run([cc, "-O0", "-w", str(src), "-o", str(tmp_path / "e")], check=True, timeout=120)
    got = subprocess.run([str(tmp_path / "e")], capture_output=True, text=True, check=True, timeout=60).stdout.split()
    for t, c_value in zip(texts, got, strict=True):
        assert expr.evaluate(expr.parse(t), env) == int(c_value), (t, env)
    assert expr.evaluate(expr.parse("a \u2212 b"), {"a": 7, "b": 2}) == 5  # a typographic minus
    assert expr.evaluate(expr.parse("(a - 10) // 4"), {"a": 7}) == -1  # // floors (not C: there it is a comment)


def test_a_negative_set_value_is_refused():
    with pytest.raises(UsageError, match="not negative"):
        expr.parse_sets(["Dl=512,Dr=-64"])
    assert expr.parse_sets(["Dl=512,Dr=0"]) == {"Dl": 512, "Dr": 0}


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
