"""MkDocs hooks (mkdocs.yml `hooks:`): the pages written from the code and the repo rather than by hand.

- reference/cli.md: every command's `--help`, rendered from `agentgym.cli.build_parser()`;
- reference/config.md: every training option (type, default, doc) from the config dataclasses
  (`agentgym.train.options`, what `agentgym train --options` prints), the estimators and the updaters;
- reference/envs.md: the registered env ids and suites (`agentgym list`);
- contributing/markers.md: the pytest markers declared in pyproject.toml;
- guide/families/*.md, architecture.md, changelog.md: envs/*/README.md, ARCHITECTURE.md and CHANGELOG.md as
  they are, so each text lives in one place.

The reference pages on disk are stubs for readers of the repo; the built site has the generated ones.
The nav lists the known pages of each section in reading order, then every other page found in that folder:
a page someone adds under docs/guide/ or docs/results/ shows up without editing mkdocs.yml.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
import re
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# reading order of the pages written by hand; pages not named here follow, by file name
SECTIONS = {
    "Guide": ("guide", ["install.md", "tour.md", "envs.md", "tool-calls.md", "training.md", "sft.md", "evaluate.md", "vllm.md",
                        "async.md", "archer.md", "lookahead.md", "long-horizons.md", "remote-envs.md", "scaling.md",
                        "mcp.md"]),
    "Results": ("results", ["quickstart.md", "learning.md", "speed.md"]),
    "Reference": ("reference", ["cli.md", "config.md", "envs.md"]),
    "Contributing": ("contributing", ["tests.md", "markers.md", "benchmarks.md", "layout.md"]),
}


# ---- generated pages (pure functions of the code: tests/test_docs.py calls them) ----

def _subcommands(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub


def cli_reference() -> str:
    from agentgym.cli import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "110"  # argparse wraps help at the terminal's width; a fixed one keeps the page stable
    try:
        parser = build_parser()
        lines = ["# Command line reference", "",
                 "Generated from the command line's parsers (`agentgym COMMAND --help`) when the site is built.", "",
                 "```text", parser.format_help().rstrip(), "```", ""]

        def walk(p: argparse.ArgumentParser, depth: int) -> None:
            for _, sub in _subcommands(p):
                lines.extend([f"{'#' * depth} `{sub.prog}`", "", "```text", sub.format_help().rstrip(), "```", ""])
                walk(sub, depth + 1)

        walk(parser, 2)
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    return "\n".join(lines)


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _full_docs(cls: type, prefix: str = "") -> dict[str, str]:
    """{dotted option: its field's whole docstring} (options() keeps the first sentence, for a terminal)."""
    from agentgym.train.options import field_docs

    docs, out, instance = field_docs(cls), {}, cls()
    for f in (f for f in dataclasses.fields(cls) if f.init):
        value = getattr(instance, f.name)
        if dataclasses.is_dataclass(value):
            out.update(_full_docs(type(value), f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = docs.get(f.name, "")
    return out


def config_reference() -> str:
    from agentgym.train.config import TrainConfig
    from agentgym.train.options import format_options, options

    full = _full_docs(TrainConfig)

    lines = ["# Training config reference", "",
             "Generated from the config dataclasses (`train/config.py`; each option's doc is its field's docstring) "
             "when the site is built; `agentgym train --options` prints the same. Set any option in a YAML config "
             "or as a dotted override: `agentgym train toy_learning train.iterations=20 algorithm.estimator=grpo`.",
             ""]
    section = None
    for o in options():
        top = o.name.split(".")[0]
        if top != section:
            section = top
            lines += ["", f"## `{top}`", "", "| option | type | default | what |", "|---|---|---|---|"]
        lines.append(f"| `{o.name}` | {_cell(o.type)} | `{_cell(repr(o.default))}` | {_cell(full.get(o.name) or o.doc)} |")
    text = format_options()
    tail = text[text.index("Estimators"):] if "Estimators" in text else ""
    if tail:
        lines += ["", "## Estimators and updaters", "", "```text", tail.rstrip(), "```"]
    return "\n".join(lines) + "\n"


def _captured(argv: list[str]) -> str:
    from agentgym.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(argv)
    return out.getvalue().rstrip()


def envs_reference() -> str:
    return "\n".join(["# Registered envs", "",
                      "Generated from the registry (`agentgym list`, `agentgym list --suites`) when the site is built: "
                      "the built-in families and any plug-in installed where it was built.", "",
                      "## Suites", "", "```text", _captured(["list", "--suites"]), "```", "",
                      "## Env ids and turn limits", "", "```text", _captured(["list"]), "```", ""])


def markers_reference() -> str:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    rows = [marker.split(":", 1) for marker in config.get("markers", [])]
    return "\n".join(["# Test markers", "",
                      "Generated from pyproject.toml's `[tool.pytest.ini_options]` when the site is built. Select "
                      "with `-m`, e.g. `python3 -m pytest -m 'not slow' tests/train`; the `gpu` tests skip without "
                      "a CUDA GPU, `docker`/`browser`/`vllm` ones without their service.", "",
                      "| marker | meaning |", "|---|---|"]
                     + [f"| `{name.strip()}` | {_cell(doc.strip())} |" for name, doc in rows]) + "\n"


LIST_ITEM = re.compile(r"^(\d+\.|[-*]) ")
CODE_SPAN = re.compile(r"`[^`]*`")


def github_to_mkdocs(text: str) -> str:
    """Markdown written for GitHub, read by Python-Markdown: a list right after a paragraph line gets the blank line
    Python-Markdown needs to see a list, and a table row's code spans lose GitHub's `\\|` escapes (Python-Markdown
    keeps a code span's pipes in their cell and would print the backslash)."""
    out: list[str] = []
    fence = False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence:
            prev = out[-1] if out else ""
            if LIST_ITEM.match(line) and prev.strip() and not LIST_ITEM.match(prev) \
                    and not prev.startswith((" ", "|", "#", ">")):
                out.append("")
            if line.startswith("|"):
                line = CODE_SPAN.sub(lambda m: m.group(0).replace("\\|", "|"), line)
        out.append(line)
    return "\n".join(out) + "\n"


def repo_pages() -> dict[str, str]:
    """Texts kept elsewhere in the repo (written for GitHub), by their page path."""
    sources = {"architecture.md": ROOT / "ARCHITECTURE.md", "changelog.md": ROOT / "CHANGELOG.md"}
    for readme in sorted((ROOT / "envs").glob("*/README.md")):
        sources[f"guide/families/{readme.parent.name}.md"] = readme
    return {page: github_to_mkdocs(path.read_text()) for page, path in sources.items()}


def generated_pages() -> dict[str, str]:
    return {"reference/cli.md": cli_reference(), "reference/config.md": config_reference(),
            "reference/envs.md": envs_reference(), "contributing/markers.md": markers_reference(), **repo_pages()}


def nav(page_paths: set[str]) -> list:
    """The nav: Home, each section's known pages in order then the others by name, the families, the rest."""
    out: list = [{"Home": "index.md"}]
    for title, (folder, order) in SECTIONS.items():
        mine = [f"{folder}/{name}" for name in order if f"{folder}/{name}" in page_paths]
        others = sorted(p for p in page_paths if p.startswith(f"{folder}/") and p.count("/") == 1 and p not in mine)
        entries: list = mine + others
        if folder == "guide":
            families = sorted(p for p in page_paths if p.startswith("guide/families/"))
            if families:
                entries.append({"Env families": families})
        if folder == "reference" and "architecture.md" in page_paths:
            entries.append("architecture.md")
        out.append({title: entries})
    if "changelog.md" in page_paths:
        out.append({"Changelog": "changelog.md"})
    return out


# ---- MkDocs events ----

def on_files(files, config):
    for path, text in generated_pages().items():
        stub = files.get_file_from_path(path)  # reference/*.md on disk say where the page comes from (for GitHub)
        if stub is not None:
            files.remove(stub)
        files.append(File.generated(config, path, content=text))
    config["nav"] = nav({f.src_uri for f in files if f.src_uri.endswith(".md")})
    return files
