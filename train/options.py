"""Every training option with its default and its one-line doc, read from the config dataclasses
themselves (`agentgym train --options`): the field docstrings in train/config.py are the documentation."""
from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import typing
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Option:
    name: str      # dotted, as an override writes it
    type: str
    default: Any
    doc: str       # the field's docstring, first sentence


def field_docs(cls: type) -> dict[str, str]:
    """{field: docstring} from the string literal written right after each field of a dataclass (and of the
    dataclasses it extends: the train config's rollout section extends the engine's RolloutConfig)."""
    docs: dict[str, str] = {}
    for base in cls.__mro__[1:]:
        if dataclasses.is_dataclass(base):
            docs.update(field_docs(base))
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):  # no source (a frozen build): options without docs
        return docs
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _first_sentence(text: str, limit: int = 160) -> str:
    cut = text.split(". ")[0].rstrip(".")
    return cut if len(cut) <= limit else cut[:limit - 3] + "..."


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is typing.Literal:
        return "|".join(map(str, typing.get_args(tp)))
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def options(cls: type | None = None, prefix: str = "") -> list[Option]:
    """The leaves of the config tree under `cls` (default: the whole TrainConfig), in declaration order."""
    if cls is None:
        from agentgym.train.config import TrainConfig

        cls = TrainConfig
    hints, docs, out = typing.get_type_hints(cls), field_docs(cls), []
    instance = cls()
    for f in (f for f in dataclasses.fields(cls) if f.init):  # init=False fields are derived, not options
        value, tp = getattr(instance, f.name), hints[f.name]
        if dataclasses.is_dataclass(value):
            out += options(type(value), f"{prefix}{f.name}.")
        else:
            out.append(Option(f"{prefix}{f.name}", _type_name(tp), value, _first_sentence(docs.get(f.name, ""))))
    return out


def format_options() -> str:
    """The text `agentgym train --options` prints: options, then the estimators and updaters."""
    from agentgym.train.estimators import estimators
    from agentgym.train.updaters import UPDATERS

    rows = options()
    width = max(len(o.name) for o in rows)
    lines = ["Options (override any as key=value; defaults before a preset is applied):", ""]
    for o in rows:
        lines.append(f"  {o.name:<{width}}  = {o.default!r}  [{o.type}]" + (f"\n  {'':<{width}}    {o.doc}" if o.doc
                                                                              else ""))
    lines += ["", "Estimators (algorithm.estimator):"]
    for e in estimators().values():
        needs = [w for w, on in (("critic", e.needs_critic), ("groups", e.needs_groups)) if on]
        lines.append(f"  {e.name:<14} {e.doc}" + (f"  [needs {', '.join(needs)}]" if needs else ""))
    lines += ["", "Updaters (chosen by rollout.action_mode):"]
    lines += [f"  {u.name:<14} {u.doc}; refuses: {', '.join(r.option for r in u.refusals) or 'nothing'}"
              for u in UPDATERS.values()]
    return "\n".join(lines)
