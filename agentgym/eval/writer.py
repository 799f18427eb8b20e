"""Writes an eval's files: OUT/results.json (every trajectory), OUT/report.md, OUT/report.html, and the
compare.md / compare.html of several runs. The content comes from `reports` (rows, markdown) and `html`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

from agentgym.errors import ConfigError
from agentgym.eval.html import render_comparison_html, render_html
from agentgym.eval.records import EvalRun
from agentgym.eval.reports import build_results, load_results, render_comparison_markdown, render_markdown


def write_all(run: EvalRun) -> dict[str, str]:
    """Write results.json, report.md and report.html into the run's OUT dir; returns their paths."""
    out = Path(run.config.out_dir)
    results = build_results(run)
    paths = {"results": out / "results.json", "markdown": out / "report.md", "html": out / "report.html"}
    paths["results"].write_text(json.dumps(results, ensure_ascii=False, default=str), encoding="utf-8")
    paths["markdown"].write_text(render_markdown(results), encoding="utf-8")
    paths["html"].write_text(render_html(results), encoding="utf-8")
    return {k: str(v) for k, v in paths.items()}


def write_comparison(run_dirs: Sequence[str | Path], out_dir: str | Path, names: Sequence[str] | None = None,
                     images: Sequence[str | Path] = ()) -> dict[str, str]:
    """compare.md and compare.html over several eval OUT dirs (names default to the dir names).

    `images` (PNG files, e.g. training curves) are inlined into the HTML, which stays self-contained.
    """
    names = list(names or [Path(d).name for d in run_dirs])
    if len(names) != len(run_dirs):
        raise ConfigError(f"got {len(names)} names for {len(run_dirs)} runs; give one name per run")
    named = [(n, load_results(d)) for n, d in zip(names, run_dirs)]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    links = [os.path.relpath(Path(d).resolve() / "report.html", out.resolve()) for d in run_dirs]
    md, html = out / "compare.md", out / "compare.html"
    md.write_text(render_comparison_markdown(named), encoding="utf-8")
    pictures = []
    for image in images:
        if not Path(image).is_file():
            raise ConfigError(f"image {str(image)!r} does not exist; pass a PNG file (e.g. from `agentgym plot`)")
        pictures.append((Path(image).stem.replace("_", " ").capitalize(), Path(image).read_bytes()))
    html.write_text(render_comparison_html(named, links, pictures), encoding="utf-8")
    return {"markdown": str(md), "html": str(html)}
