"""The quick start's duration is stated once: its script header and the README's quick start agree."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIGURE = re.compile(r"about (\d+) minutes", re.IGNORECASE)


def header_comment(script: str) -> str:
    lines = script.splitlines()[1:]  # after the shebang, up to the first line of code
    return "\n".join(line for line in lines[:next(i for i, x in enumerate(lines) if not x.startswith("#"))])


def test_quickstart_header_and_readme_give_one_duration():
    header = header_comment((ROOT / "scripts" / "quickstart.sh").read_text(encoding="utf-8"))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("## Quick start")
    section = readme[start:readme.index("\n## ", start + 1)]
    in_header, in_readme = set(FIGURE.findall(header)), set(FIGURE.findall(section))
    assert in_header == in_readme and len(in_readme) <= 1, (in_header, in_readme)
    assert FIGURE.findall("#   bash scripts/quickstart.sh   # about 15 minutes on 2 cores") == ["15"]
