"""A dynamic shared-memory request as a small expression, and the largest value of one variable that fits.

Grammar (nothing is evaluated by Python; this parser reads the text itself):
    expr  := term (('+' | '-') term)*
    term  := unary (('*' | '/' | '%' | '//') unary)*
    unary := ('-' | '+') unary | atom
    atom  := INTEGER | NAME | '(' expr ')'
Every operand is an integer (--set values are sizes: whole numbers >= 0), so `/` and `%` are C's on integers: the
quotient truncated toward zero, the remainder with the dividend's sign (C99 6.5.5), as the pasted C expression
computes them ((Dl - 10) / 4 is 0 at Dl=7, not -1). `//` (not C: there it starts a comment) floors, as Python's.
Values are unbounded (no int overflow). Bad input raises UsageError with one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

from tileprobe.errors import UsageError

MAX_LENGTH = 400
_TOKEN = re.compile(r"\s*(?:(\d[\d_]*)|([A-Za-z_][A-Za-z0-9_]*)|(//|[-+*/%()]))")


@dataclass(frozen=True)
class Num:
    value: int


@dataclass(frozen=True)
class Var:
    name: str


@dataclass(frozen=True)
class Neg:
    arg: "Node"


@dataclass(frozen=True)
class Bin:
    op: str
    left: "Node"
    right: "Node"


Node = Union[Num, Var, Neg, Bin]


def _tokens(text: str) -> list[tuple[str, str]]:
    text = text.replace("\u2212", "-")  # a typographic minus
    out, i = [], 0
    while i < len(text):
        if text[i:].strip() == "":
            break
        m = _TOKEN.match(text, i)
        if not m:
            raise UsageError(f"--dynamic {text!r}: unexpected {text[i:].strip()[:1]!r} at character {i + 1} "
                             "(allowed: integers, names, + - * / % // and parentheses)")
        num, name, op = m.groups()
        out.append(("num", num.replace("_", "")) if num else ("name", name) if name else ("op", op))
        i = m.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def fail(self, what: str):
        raise UsageError(f"--dynamic {self.text!r}: {what}")

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            self.fail("ends too early")
        self.i += 1
        return tok  # type: ignore[return-value]

    def expr(self, depth: int = 0) -> Node:
        node = self.term(depth)
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.take()[1]
            node = Bin(op, node, self.term(depth))
        return node

    def term(self, depth: int) -> Node:
        node = self.unary(depth)
        while self.peek() in (("op", "*"), ("op", "/"), ("op", "%"), ("op", "//")):
            op = self.take()[1]
            node = Bin(op, node, self.unary(depth))
        return node

    def unary(self, depth: int) -> Node:
        if depth > 50:
            self.fail("nested too deeply")
        if self.peek() in (("op", "-"), ("op", "+")):
            sign = self.take()[1]
            arg = self.unary(depth + 1)
            return Neg(arg) if sign == "-" else arg
        return self.atom(depth)

    def atom(self, depth: int) -> Node:
        kind, text = self.take()
        if kind == "num":
            return Num(int(text))
        if kind == "name":
            return Var(text)
        if text == "(":
            node = self.expr(depth + 1)
            if self.peek() != ("op", ")"):
                self.fail("missing ')'")
            self.take()
            return node
        self.fail(f"unexpected {text!r}")
        raise AssertionError  # fail raises


def parse(text: str) -> Node:
    """The expression tree of `text`; UsageError (one line) for anything outside the grammar."""
    if not text or not text.strip():
        raise UsageError("--dynamic: empty expression")
    if len(text) > MAX_LENGTH:
        raise UsageError(f"--dynamic: expression longer than {MAX_LENGTH} characters")
    p = _Parser(text)
    node = p.expr()
    if p.peek() is not None:
        p.fail(f"unexpected {p.peek()[1]!r} after a complete expression")  # type: ignore[index]
    return node


def names(node: Node) -> set[str]:
    if isinstance(node, Var):
        return {node.name}
    if isinstance(node, Neg):
        return names(node.arg)
    if isinstance(node, Bin):
        return names(node.left) | names(node.right)
    return set()


def c_div(a: int, b: int) -> int:
    """C's integer quotient: truncated toward zero."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def evaluate(node: Node, env: dict[str, int], text: str = "") -> int:
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Var):
        if node.name not in env:
            raise UsageError(f"--dynamic {text!r}: {node.name} has no value (give it with --set {node.name}=N)")
        return env[node.name]
    if isinstance(node, Neg):
        return -evaluate(node.arg, env, text)
    a, b = evaluate(node.left, env, text), evaluate(node.right, env, text)
    if node.op == "+":
        return a + b
    if node.op == "-":
        return a - b
    if node.op == "*":
        return a * b
    if b == 0:
        raise UsageError(f"--dynamic {text!r}: division by zero")
    if node.op == "/":
        return c_div(a, b)
    if node.op == "%":
        return a - b * c_div(a, b)
    return a // b


def parse_sets(values: list[str] | None) -> dict[str, int]:
    """--set Dl=512,Dr=64 (repeatable) as {'Dl': 512, 'Dr': 64}; a value is a size or count: never negative."""
    env: dict[str, int] = {}
    for item in values or []:
        for part in item.split(","):
            part = part.strip()
            if not part:
                continue
            name, eq, value = part.partition("=")
            name, value = name.strip(), value.strip().replace("_", "")
            if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or not re.fullmatch(r"-?\d+", value):
                raise UsageError(f"--set {part!r}: expected NAME=INTEGER, e.g. Dl=512")
            if int(value) < 0:
                raise UsageError(f"--set {part!r}: {name} is a size or count, so not negative")
            env[name] = int(value)
    return env


def show(value: int) -> str:
    return str(value)


@dataclass(frozen=True)
class Solution:
    """The largest `var` whose request fits `budget`; None when even var=0 does not; `unbounded` when no value
    raises the request above the budget."""
    var: str
    value: int | None
    request: int | None  # the request at value
    next_request: int | None  # the request at value + 1 (over the budget)
    unbounded: bool = False


LIMIT = 1 << 62


def check_solvable(node: Node, env: dict[str, int], var: str, text: str = "") -> None:
    """UsageError unless `var` is in the expression, has no --set value, and every other name has one."""
    if var in env:
        raise UsageError(f"--solve {var}: it also has a value in --set")
    if var not in names(node):
        raise UsageError(f"--solve {var}: {var} is not in the expression {text!r}")
    missing = names(node) - set(env) - {var}
    if missing:
        raise UsageError(f"--dynamic {text!r}: {', '.join(sorted(missing))} has no value (give it with --set)")


def solve(node: Node, env: dict[str, int], var: str, budget: int, text: str = "") -> Solution:
    """The largest integer var >= 0 with request(var) <= budget, by doubling then bisection. The request must not
    fall as var grows (bytes per element times a count): where a probe shows it falling, UsageError."""
    check_solvable(node, env, var, text)

    def f(v: int) -> int:
        return evaluate(node, env | {var: v}, text)

    seen: list[tuple[int, int]] = []

    def probe(v: int) -> int:
        r = f(v)
        for w, rw in seen:
            if (w < v and rw > r) or (w > v and rw < r):
                raise UsageError(f"--dynamic {text!r}: the request falls as {var} grows ({var}={w}: {show(rw)} B, "
                                 f"{var}={v}: {show(r)} B); --solve needs a request that grows with {var}")
        seen.append((v, r))
        return r

    if probe(0) > budget:
        return Solution(var, None, f(0), None)
    lo, hi = 0, 1
    while probe(hi) <= budget:
        lo, hi = hi, hi * 2
        if hi > LIMIT:
            return Solution(var, None, None, None, unbounded=True)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid) <= budget:
            lo = mid
        else:
            hi = mid
    return Solution(var, lo, f(lo), f(lo + 1))
