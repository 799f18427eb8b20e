"""The docs site (mkdocs.yml, docs/): it builds in strict mode (a broken link, anchor or snippet fails), its reference
pages are generated from the code, and a page added under docs/guide or docs/results shows up in the nav."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="needs the docs extra: pip install -e '.[docs]'")
ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("agentgym_docs", ROOT / "docs" / "hooks" / "agentgym_docs.py")
hooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hooks)


def test_the_cli_reference_has_every_command_and_option():
    from agentgym.cli import build_parser

    page = hooks.cli_reference()
    progs = []

    def walk(parser):
        for _, sub in hooks._subcommands(parser):
            progs.append(sub.prog)
            walk(sub)

    walk(build_parser())
    assert {"agentgym train", "agentgym eval", "agentgym new env", "agentgym list"} <= set(progs)
    for prog in progs:
        assert f"`{prog}`" in page, prog
    assert "--print-config" in page and "--version" in page


def test_the_config_reference_has_every_option():
    from agentgym.train.options import options

    page = hooks.config_reference()
    names = [o.name for o in options()]
    assert "train.iterations" in names and "algorithm.estimator" in names
    for name in names:
        assert f"| `{name}` |" in page, name
    assert "## Estimators and updaters" in page and "gigpo" in page


def test_markers_come_from_pyproject():
    page = hooks.markers_reference()
    for marker in ("slow", "gpu", "vllm", "docker", "browser", "model", "ray"):
        assert f"| `{marker}` |" in page


def test_a_page_added_to_guide_or_results_is_in_the_nav():
    pages = {"index.md", "guide/install.md", "guide/zz-new-topic.md", "results/speed.md", "results/a-family.md",
             "guide/families/household.md", "reference/cli.md", "changelog.md"}
    nav = hooks.nav(pages)
    sections = {title: entries for entry in nav for title, entries in entry.items()}
    assert sections["Guide"][:2] == ["guide/install.md", "guide/zz-new-topic.md"]
    assert {"Env families": ["guide/families/household.md"]} in sections["Guide"]
    assert sections["Results"] == ["results/speed.md", "results/a-family.md"]
    assert sections["Changelog"] == "changelog.md"


@pytest.mark.slow
def test_the_site_builds_in_strict_mode(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    site = tmp_path / "site"
    for page in ("index.html", "guide/envs/index.html", "guide/tour/index.html", "reference/cli/index.html", "reference/config/index.html",
                 "results/quickstart/index.html", "contributing/tests/index.html", "changelog/index.html"):
        assert (site / page).is_file(), page
    envs = (site / "guide" / "envs" / "index.html").read_text()
    assert '<span class="nc">GuessEnv' in envs   # the README's registration snippet, included (one source)
    assert "toy_learning" in (site / "guide" / "tour" / "index.html").read_text()   # and its tour
    assert "agentgym new env" in (site / "reference" / "cli" / "index.html").read_text()


def test_github_markdown_is_read_as_github_shows_it():
    text = ("Some text:\n- a list right after it\n- two\n\n```\nnot:\n- in code\n```\n"
            "| a | b |\n|---|---|\n| `<\\|tag\\|>` | x \\| y |\n")
    out = hooks.github_to_mkdocs(text)
    assert "Some text:\n\n- a list right after it\n- two\n" in out     # one blank line, not one per item
    assert "not:\n- in code" in out                                    # code blocks untouched
    assert "| `<|tag|>` | x \\| y |" in out                             # unescaped in code spans only
