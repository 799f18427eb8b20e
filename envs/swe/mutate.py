"""AST mutations that plant one small bug in a Python source file (pure functions, no I/O).

Each `Mutation` replaces one node's source span with new text, so the rest of the file (comments,
formatting) is untouched and the bug's diff is a line or two. Kinds: operator swaps, comparison swaps,
off-by-one constants, swapped call arguments, a removed branch, a removed early return, a wrong
variable, and/or swaps, a dropped `not`.
"""
from __future__ import annotations

import ast
import random
from dataclasses import dataclass

KINDS = ("operator", "comparison", "off_by_one", "swap_args", "remove_branch", "remove_return",
         "wrong_variable", "boolean", "drop_not")
_BINOP_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
               ast.Mod: ast.FloorDiv, ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd}
_CMP_SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
             ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}


@dataclass(frozen=True)
class Mutation:
    """Replace source[start:end] (character offsets) with `text`; `kind` and `line` describe it."""

    path: str
    kind: str
    line: int
    start: int
    end: int
    text: str
    description: str

    def apply(self, source: str) -> str:
        return source[: self.start] + self.text + source[self.end:]


class _Offsets:
    """(line, column in UTF-8 bytes) -> character offset, as ast positions need."""

    def __init__(self, source: str):
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def __call__(self, line: int, col_bytes: int) -> int:
        text = self.lines[line - 1] if line - 1 < len(self.lines) else ""
        return self.starts[line - 1] + len(text.encode()[:col_bytes].decode(errors="ignore"))


def _indent_tail(text: str, col: int) -> str:
    """Unparsed multi-line statements: indent every line after the first to the statement's column."""
    first, *rest = text.split("\n")
    return "\n".join([first, *(" " * col + r for r in rest)])


def _names_in(func: ast.AST) -> list[str]:
    """Locals of a function: parameters and assigned names, in first-seen order."""
    seen: list[str] = []
    args = getattr(func, "args", None)
    if args is not None:
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            if a.arg not in ("self", "cls") and a.arg not in seen:
                seen.append(a.arg)
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id not in seen:
            seen.append(node.id)
    return seen


def find_mutations(path: str, source: str, seed: int = 0) -> list[Mutation]:
    """Every candidate mutation of one file's functions, in a stable order."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    offset = _Offsets(source)
    rng = random.Random(f"{seed}:{path}")
    found: list[Mutation] = []

    def add(node: ast.AST, kind: str, new: ast.AST | str, description: str, statement: bool = False) -> None:
        text = new if isinstance(new, str) else ast.unparse(new)
        if statement:
            text = _indent_tail(text, node.col_offset)
        start = offset(node.lineno, node.col_offset)
        end = offset(node.end_lineno, node.end_col_offset)
        if source[start:end] != text:
            found.append(Mutation(path, kind, node.lineno, start, end, text, description))

    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for func in functions:
        local_names = _names_in(func)
        returns = sorted((n for n in ast.walk(func) if isinstance(n, ast.Return)), key=lambda n: (n.lineno, n.col_offset))
        for node in ast.walk(func):
            if node is not func and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue  # nested functions are visited as functions of their own
            _mutate_node(node, add, local_names, returns, rng)
    found.sort(key=lambda m: (m.start, m.kind, m.text))
    unique, seen = [], set()
    for m in found:
        if (m.start, m.end, m.text) not in seen:
            seen.add((m.start, m.end, m.text))
            unique.append(m)
    return unique


def _copy(node: ast.AST) -> ast.AST:
    return ast.parse(ast.unparse(node), mode="eval").body if isinstance(node, ast.expr) else \
        ast.parse(ast.unparse(node)).body[0]


def _mutate_node(node: ast.AST, add, local_names: list[str], returns: list[ast.Return], rng: random.Random) -> None:
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOP_SWAP:
        new = _copy(node)
        new.op = _BINOP_SWAP[type(node.op)]()
        add(node, "operator", new, f"{type(node.op).__name__} -> {type(new.op).__name__}")
    elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP_SWAP:
        new = _copy(node)
        new.ops = [_CMP_SWAP[type(node.ops[0])]()]
        add(node, "comparison", new, f"{type(node.ops[0]).__name__} -> {type(new.ops[0]).__name__}")
    elif isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= 1000:
        add(node, "off_by_one", str(node.value + 1), f"{node.value} -> {node.value + 1}")
        if node.value > 0:
            add(node, "off_by_one", str(node.value - 1), f"{node.value} -> {node.value - 1}")
    elif isinstance(node, ast.Call) and len(node.args) >= 2 and not any(isinstance(a, ast.Starred)
                                                                         for a in node.args[:2]):
        new = _copy(node)
        new.args[0], new.args[1] = new.args[1], new.args[0]
        if ast.unparse(new.args[0]) != ast.unparse(new.args[1]):
            add(node, "swap_args", new, "first two arguments swapped")
    elif isinstance(node, ast.If):
        if node.orelse and not (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)):
            new = _copy(node)
            new.orelse = []
            add(node, "remove_branch", new, "else branch removed", statement=True)
        elif not node.orelse:
            add(node, "remove_branch", "pass", "if block removed")
    elif isinstance(node, ast.Return) and len(returns) > 1 and node is not returns[-1]:
        add(node, "remove_return", "pass", "early return removed")
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in local_names:
        others = [n for n in local_names if n != node.id]
        if others:
            other = rng.choice(others)
            add(node, "wrong_variable", other, f"{node.id} -> {other}")
    elif isinstance(node, ast.BoolOp):
        new = _copy(node)
        new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        add(node, "boolean", new, f"{type(node.op).__name__} -> {type(new.op).__name__}")
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        add(node, "drop_not", ast.unparse(node.operand) if not isinstance(node.operand, (ast.BoolOp, ast.Compare))
            else f"({ast.unparse(node.operand)})", "`not` dropped")


def interleave_by_kind(mutations: list[Mutation], seed: int = 0) -> list[Mutation]:
    """A shuffled order that takes kinds in turn, so a small budget still gives varied bugs."""
    rng = random.Random(seed)
    by_kind: dict[str, list[Mutation]] = {}
    for m in mutations:
        by_kind.setdefault(m.kind, []).append(m)
    for group in by_kind.values():
        rng.shuffle(group)
    kinds = sorted(by_kind)
    rng.shuffle(kinds)
    order: list[Mutation] = []
    while any(by_kind.values()):
        for kind in kinds:
            if by_kind[kind]:
                order.append(by_kind[kind].pop())
    return order
