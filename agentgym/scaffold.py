"""`agentgym new env NAME`: a small installable package holding one text env, ready to check and train on.

It writes NAME/ with pyproject.toml (the `agentgym.envs` entry point), src/NAME/env.py (a `TextEnv` with a
placeholder task), src/NAME/__init__.py (its registration), tests/test_env.py (`check_env` and the entry point)
and a README; `pip install -e NAME && pytest NAME` passes as written, and the command runs `check_env` on the
written env before it returns (the contract checked on the spot, not at the first training run). The files come from
agentgym/templates/env/ (`*.tmpl`, `str.format` fields). Nothing is written unless all of it can be: bad input is
refused first, and the package is laid out in a temp folder beside the target and renamed into place.
"""
from __future__ import annotations

import importlib.util
import keyword
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from agentgym.errors import AgentGymError

TEMPLATES = Path(__file__).with_name("templates")
NAME_RE = re.compile(r"[a-z][a-z0-9_]*")
# run in a fresh process by check_written: the package's module (argv[1]) registers its env, check_env checks it
CHECK_SCRIPT = """
import importlib, sys
import agentgym
module = importlib.import_module(sys.argv[1])
try:
    module.register()
    report = agentgym.check_env(module.ENV_ID)
except Exception as exc:  # its first line: an action's text in the message may span many
    print(f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}")
    sys.exit(1)
print(", ".join(report.checks))
"""


class ScaffoldError(AgentGymError):
    """`agentgym new` was given a name or folder it cannot use."""


def env_fields(name: str) -> dict[str, str]:
    """The template fields for an env package named `name` (a lowercase Python identifier)."""
    from agentgym import __version__

    class_name = "".join(part.capitalize() for part in name.split("_") if part) + "Env"
    return {"name": name, "class_name": class_name, "env_id": f"{name}/{class_name[:-3]}-v0",
            "agentgym_version": __version__}


def check_name(name: str, target: Path) -> None:
    """Refuse, with the reason and the fix, a name that is no importable package name or a target that exists."""
    if not NAME_RE.fullmatch(name) or keyword.iskeyword(name):
        raise ScaffoldError(f"{name!r} is not a valid package name: use a lowercase Python identifier "
                            "(letters, digits and _, starting with a letter; not a keyword), e.g. my_task")
    if target.exists() or target.is_symlink():
        raise ScaffoldError(f"{target} already exists; pick another name or --dir, or remove it first")
    if importlib.util.find_spec(name) is not None:
        raise ScaffoldError(f"a module named {name!r} is already importable here; pick another name so the "
                            "package does not shadow it")


def render_env_package(name: str, dest: Path) -> list[Path]:
    """Write the env package's files under `dest` (made here); returns them, relative to `dest`."""
    fields = env_fields(name)
    source = TEMPLATES / "env"
    written = []
    for template in sorted(source.rglob("*.tmpl")):
        rel = template.relative_to(source).with_suffix("")  # drop .tmpl
        if rel.parts[0] == "src":  # src/<name>/...: the import package
            rel = Path("src", name, *rel.parts[1:])
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(template.read_text().format(**fields))
        written.append(rel)
    if not written:
        raise ScaffoldError(f"no templates under {source}: this agentgym install is incomplete; reinstall it")
    return written


def new_env(name: str, parent: Path = Path(".")) -> Path:
    """Create the env package `parent/name`; raises ScaffoldError (and writes nothing) on bad input."""
    target = parent / name
    check_name(name, target)
    if not parent.is_dir():
        raise ScaffoldError(f"--dir {parent} is not a folder; make it first")
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=parent))
    except OSError as exc:
        raise ScaffoldError(f"cannot write in {parent}: {exc.strerror or exc}; pick another --dir") from exc
    try:
        render_env_package(name, staging)
        os.rename(staging, target)  # atomic on one file system: the package appears whole or not at all
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise ScaffoldError(f"cannot write {target}: {exc.strerror or exc}; nothing was left behind") from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def check_written(target: Path, name: str) -> list[str]:
    """Run check_env on the env just written, from its folder (a fresh process: nothing is installed or imported
    here); returns the names of the checks it passed, or raises ScaffoldError with the checker's one line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(target / "src"), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", CHECK_SCRIPT, name], env=env, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        last = (out.stdout.strip().splitlines() or out.stderr.strip().splitlines() or ["no output"])[-1]
        raise ScaffoldError(f"wrote {target}/, but its env fails check_env: {last}")
    return out.stdout.strip().split(", ")


def cmd_new_env(args) -> int:
    target = new_env(args.name, Path(args.dir))
    fields = env_fields(args.name)
    print(f"wrote {target}/ with {fields['env_id']} ({fields['class_name']} in src/{args.name}/env.py)")
    if args.check:
        print(f"check_env passed: {', '.join(check_written(target, args.name))}")
    print(f"next:  pip install -e {target} && pytest {target}\n"
          f"       agentgym eval --policy oracle --env {fields['env_id']} --episodes 5 --out runs/{args.name}")
    return 0


def add_parser(subparsers) -> None:
    new = subparsers.add_parser("new", help="scaffold a new package (an env) to extend agentgym",
                                description="Scaffold a new package that extends agentgym.")
    kinds = new.add_subparsers(dest="kind", metavar="KIND", required=True)
    env = kinds.add_parser("env", help="an installable env package: the env, its entry point, a check_env test",
                           description="Write NAME/: an installable package with one text env (a placeholder task "
                                       "to replace), registered through the agentgym.envs entry point, with a test "
                                       "that runs check_env and a README. Then: pip install -e NAME && pytest NAME.")
    env.add_argument("name", metavar="NAME", help="the package name: a lowercase Python identifier, e.g. my_task")
    env.add_argument("--dir", default=".", help="the folder to create NAME/ in (default: the current one)")
    env.add_argument("--no-check", dest="check", action="store_false",
                     help="skip running check_env on the written env (it takes a few seconds)")
    env.set_defaults(func=cmd_new_env)
