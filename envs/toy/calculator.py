"""A tool-calling toy: answer an arithmetic question, with a `calculate` tool to help.

Rewards: 1.0 for a correct final answer (`answer` tool or `<answer>` tag); the `tool` component gives
a small bonus the first time the calculator returns the right value (a turn-level signal).
"""
from __future__ import annotations

import ast
import operator
from typing import Any


from agentgym.core import ToolEnv, make_info
from agentgym.tools import Tool, ToolResult

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod, ast.USub: operator.neg, ast.UAdd: operator.pos}


def safe_eval(expression: str) -> int:
    """Integer arithmetic with + - * // % and parentheses; anything else raises ValueError."""
    if len(expression) > 200:
        raise ValueError("expression too long (max 200 characters)")
    try:
        node = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {exc.msg}") from None

    def ev(n: ast.AST) -> int:
        if isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool):
            return n.value
        if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
            left, right = ev(n.left), ev(n.right)
            if isinstance(n.op, (ast.FloorDiv, ast.Mod)) and right == 0:
                raise ValueError("division by zero")
            if isinstance(n.op, ast.Mult) and abs(left) * abs(right) > 10**30:
                raise ValueError("number too large")
            return _OPS[type(n.op)](left, right)
        if isinstance(n, ast.UnaryOp) and type(n.op) in _OPS:
            return _OPS[type(n.op)](ev(n.operand))
        raise ValueError("only integers and + - * // % ( ) are allowed")

    return ev(node)


class CalculatorEnv(ToolEnv):
    snapshot_fields = ("question", "target", "rewarded_tool", "task_id")

    def __init__(self, max_operand: int = 99, tool_bonus: float = 0.1):
        super().__init__()
        self.max_operand = max_operand
        self.tool_bonus = tool_bonus
        self.reward_range = (min(0.0, tool_bonus), 1.0 + max(0.0, tool_bonus))  # the answer's 1.0 and a tool bonus
        self.question = ""
        self.target = 0
        self.rewarded_tool = False
        self._tools = [Tool(self._calculate, name="calculate"), Tool(self._answer, name="answer")]

    @property
    def instructions(self) -> str:
        return ("Answer the arithmetic question. You may call the calculate tool, then give the final "
                "answer with the answer tool or inside <answer></answer>.")

    def tool_list(self) -> list[Tool]:
        return self._tools

    def _calculate(self, expression: str) -> str:
        """Evaluate an integer arithmetic expression.

        Args:
            expression: Integers with + - * // % and parentheses, e.g. "(3 + 4) * 5".
        """
        return str(safe_eval(expression))

    def _answer(self, text: str) -> str:
        """Give the final answer; the episode ends.

        Args:
            text: The answer, a number.
        """
        return "Answer received."

    def reset_task(self, seed: int | None, options: dict[str, Any]):
        rng = self.np_random  # seeded by reset(seed); an unseeded reset continues that stream (Gymnasium's rule)
        a, b, c = (int(x) for x in rng.integers(2, self.max_operand + 1, size=3))
        self.question = f"What is {a} * {b} + {c}?"
        self.target = a * b + c
        self.rewarded_tool = False
        self.task_id = f"calc-{a}-{b}-{c}"
        return self.question, make_info(task_id=self.task_id, anchor=("question", self.task_id))

    def score(self, action: str, results: list[ToolResult], answer: str | None):
        components: dict[str, float] = {}
        if self.tool_bonus and not self.rewarded_tool and any(
                r.ok and r.name == "calculate" and r.output.strip() == str(self.target) for r in results):
            self.rewarded_tool = True
            components["tool"] = self.tool_bonus
        if answer is None:
            return components, False, False
        success = answer.strip().rstrip(".").replace(",", "") == str(self.target)
        components["outcome"] = 1.0 if success else 0.0
        return components, True, success

    def oracle_action(self) -> str:
        return f"<answer>{self.target}</answer>"
