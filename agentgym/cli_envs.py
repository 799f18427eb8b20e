"""`agentgym list | info ENV | check ENV...|--all | play ENV`: look at, check and play envs from a terminal."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from agentgym.errors import ConfigError

PLAY_HELP = """Type an action and press Enter (one line per turn; a tool call is one line of JSON in tags).
Commands:  :help  this text    :reset [SEED]  new episode (same seed, or SEED)
           :oracle  show a good action (if the env knows one)    :oracle!  play it
           :tools  tool schemas    :quit  leave (end of input leaves too)
An action that starts with ':' is typed with '::' in front (`::x` sends `:x`)."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("list", help="list registered env ids (and suites)")
    p.add_argument("prefix", nargs="?", default="", help="only ids that start with this, e.g. agentgym/Toy")
    p.add_argument("--suite", help="only the envs of this suite")
    p.add_argument("--suites", action="store_true", help="list the suites instead of the envs")
    p.set_defaults(func=cmd_list)

    p = subparsers.add_parser("info", help="show an env's spec, instructions and tool schemas; with --policy, the "
                                           "first prompt that model sees")
    p.add_argument("env", help="env id, e.g. agentgym/Toy-KeyDoor-v0")
    p.add_argument("--policy", metavar="SPEC", help="also show the first prompt this policy sees, in its own chat "
                                                    "template and tool-call format (e.g. hf:smollm2-135m-instruct)")
    p.add_argument("--tool-format", metavar="NAME", help="with --policy: the tool-call format (hermes, llama3, "
                                                         "mistral, qwen3_coder, harmony, ...; default: from the "
                                                         "chat template)")
    p.add_argument("--seed", type=int, default=None, help="with --policy: the task seed of the first observation "
                                                          "(default 0)")
    p.set_defaults(func=cmd_info)

    p = subparsers.add_parser("check", help="check envs against the text-env contract; with --oracle, that each "
                                            "env's oracle solves its tasks within the eval's defaults")
    p.add_argument("envs", nargs="*", metavar="ENV", help="env ids to check")
    p.add_argument("--all", action="store_true", help="check every registered env")
    p.add_argument("--family", nargs="+", metavar="NAME", help="check every id of these families (ScienceWorld, "
                                                             "Household, Toy, ...: the name after agentgym/)")
    p.add_argument("--seeds", default=None, help="comma-separated reset seeds (default: 0,1; with --oracle, "
                                                  "--episodes seeds drawn fresh)")
    p.add_argument("--max-steps", type=int, default=12, help="steps per checked episode (default: 12)")
    p.add_argument("--oracle", action="store_true", help="play each env's oracle at the eval's defaults (turn limit, "
                                                         "context) on fresh seeds; fail on max_turns, context_full "
                                                         "or a state the oracle has no action for")
    p.add_argument("--episodes", type=int, default=2, help="with --oracle: fresh seeds per env (default: 2)")
    p.add_argument("--split", help="with --oracle: the reset split (default: the eval's, test)")
    p.add_argument("-v", "--verbose", action="store_true", help="list the checks passed and Gymnasium's warnings")
    p.set_defaults(func=cmd_check)

    p = subparsers.add_parser("play", help="play an env yourself in the terminal")
    p.add_argument("env", help="env id, e.g. agentgym/Toy-KeyDoor-v0")
    p.add_argument("--seed", type=int, default=0, help="task seed (default: 0)")
    p.add_argument("--max-turns", type=int, default=None, help="override the registered turn limit")
    p.set_defaults(func=cmd_play)


# ----------------------------------------------------------------------------------------------- list / info

def _suites_of(env_id: str) -> list[str]:
    from agentgym.registration import list_suites, suite

    return [name for name in list_suites() if any(e.env_id == env_id for e in suite(name))]


def cmd_list(args: argparse.Namespace) -> int:
    from agentgym.registration import list_envs, list_suites, spec, suite

    if args.suites:
        for name in list_suites():
            print(f"{name:<20} {len(suite(name))} envs")
        return 0
    ids = [e.env_id for e in suite(args.suite)] if args.suite else list_envs(args.prefix)
    width = max((len(i) for i in ids), default=0)
    for env_id in ids:
        turns = spec(env_id).max_episode_steps
        print(f"{env_id:<{width}}  max_turns={turns if turns else '-'}")
    if not ids:
        print(f"no env ids start with {args.prefix!r}; run `agentgym list` to see them all", file=sys.stderr)
    return 0


def _format_kwargs(kwargs: dict[str, Any]) -> str:
    return json.dumps(kwargs, default=repr) if kwargs else "{}"


def cmd_info(args: argparse.Namespace) -> int:
    from agentgym.checker import as_missing_dependency
    from agentgym.horizon import limit_source, random_outcome
    from agentgym.registration import make, spec

    if not args.policy and (args.tool_format or args.seed is not None):
        raise ConfigError("--tool-format and --seed choose the prompt shown with --policy SPEC; add --policy "
                          "(e.g. --policy hf:smollm2-135m-instruct)")
    env_spec = spec(args.env)
    entry = env_spec.entry_point
    print(f"id:           {env_spec.id}")
    print(f"entry point:  {entry if isinstance(entry, str) else getattr(entry, '__qualname__', repr(entry))}")
    print(f"max_turns:    {env_spec.max_episode_steps or '-'}")
    source = limit_source(env_spec.id)
    if source:
        print(f"  from:       {source}")
    if random_outcome(env_spec.id):
        print(f"  oracle:     random outcome: {random_outcome(env_spec.id)}")
    print(f"kwargs:       {_format_kwargs(env_spec.kwargs)}")
    print(f"suites:       {', '.join(_suites_of(env_spec.id)) or '-'}")
    try:
        env = make(args.env)
    except ImportError as exc:
        missing = as_missing_dependency(exc)
        if missing is None:
            raise
        print(f"(cannot make it here: {missing})")
        return 0
    try:
        base = env.unwrapped
        print(f"class:        {type(base).__module__}.{type(base).__qualname__}")
        print("\ninstructions:\n" + (_indent(getattr(base, "instructions", "")) or "  -"))
        tools = list(getattr(base, "tools", []))
        print(f"\ntools ({len(tools)}):" + ("" if tools else " none"))
        for tool_ in tools:
            print(_indent(json.dumps(tool_.schema, indent=2, default=repr)))
        if args.policy:
            show_prompt(env, args.policy, args.tool_format, args.seed or 0)
    finally:
        env.close()
    return 0


def show_prompt(env: Any, policy_spec: str, tool_format: str | None, seed: int, out: TextIO | None = None) -> None:
    """The first prompt `policy_spec` sees in `env`: its chat template, with the tools where that template
    (or, lacking `tools=` support, the tool-call format) puts them, and an example call in that format."""
    from agentgym.eval.runner import load_eval_policy
    from agentgym.toolcall_formats import get_format

    out = out or sys.stdout
    policy, chat = load_eval_policy(policy_spec)
    try:
        if tool_format:
            chat = chat.with_tool_format(tool_format)
        fmt = get_format(chat.tool_format)
        obs, _ = env.reset(seed=seed, options={"tool_format": fmt.name})
        base = env.unwrapped
        tools = list(getattr(base, "tools", []) or [])
        ids = chat.initial_prompt(getattr(base, "instructions", ""), obs, tools)
        where = ("by the chat template's own tools= support" if chat.supports_tools
                 else f"in the system text, in the {fmt.name} format's words")
        print(f"\nprompt for {policy_spec} (seed {seed}, {len(ids)} tokens; tool-call format {fmt.name}"
              f"{'' if tool_format else ', from the chat template'}; tools rendered {where}):", file=out)
        print(_indent(chat.decode(ids), "  | "), file=out)
        if tools:
            print(f"\na tool call in the {fmt.name} format ({fmt.doc.split(':', 1)[0]}):", file=out)
            print(_indent(tools[0].usage(fmt.name)), file=out)
    finally:
        close = getattr(policy, "close", None)
        if callable(close):
            close()


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


# ----------------------------------------------------------------------------------------------- check

def _parse_seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise ConfigError(f"--seeds must be comma-separated integers like 0,1,2, got {text!r}") from None
    if not seeds:
        raise ConfigError("--seeds needs at least one seed, e.g. --seeds 0,1")
    return seeds


def _checked_ids(args: argparse.Namespace) -> list[str]:
    from agentgym.registration import list_envs, spec

    if not args.envs and not args.all and not args.family:
        raise ConfigError("name the envs to check (agentgym check agentgym/Toy-KeyDoor-v0), a --family or pass --all")
    for env_id in args.envs:
        spec(env_id)  # a misspelt id fails here with "did you mean", before any checking
    if args.all:
        return list_envs()
    ids = list(args.envs)
    for name in args.family or ():
        members = [e for e in list_envs() if e.split("/", 1)[-1].split("-", 1)[0].lower() == name.lower()]
        if not members:
            families = sorted({e.split("/", 1)[-1].split("-", 1)[0] for e in list_envs()})
            raise ConfigError(f"no env family {name!r}; families: {', '.join(families)}")
        ids += [e for e in members if e not in ids]
    return ids


def cmd_check(args: argparse.Namespace) -> int:
    from agentgym.checker import check_all

    if args.max_steps < 1:
        raise ConfigError(f"--max-steps must be >= 1, got {args.max_steps}")
    if args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
    if not args.oracle and (args.split or args.episodes != 2):
        raise ConfigError("--episodes and --split choose the episodes of --oracle; add --oracle")
    ids = _checked_ids(args)
    if args.oracle:
        return check_oracles(ids, _parse_seeds(args.seeds) if args.seeds else None, args.episodes, args.split)
    seeds = _parse_seeds(args.seeds or "0,1")
    counts = {"ok": 0, "failed": 0, "skipped": 0}
    for env_id in ids:
        outcome = check_all([env_id], seeds=seeds, max_steps=args.max_steps)[0]
        counts[outcome.status] += 1
        label = {"ok": "ok     ", "failed": "FAILED ", "skipped": "skipped"}[outcome.status]
        print(f"{label} {env_id}  {outcome.message}", flush=True)
        for warning in outcome.report.budget_warnings if outcome.report is not None else ():
            print(f"        warning: {warning}")
        if args.verbose and outcome.report is not None:
            print(f"        checks: {', '.join(outcome.report.checks)}")
            for warning in outcome.report.warnings:
                print(f"        gymnasium warning: {warning.strip()}")
    print(f"\n{counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if counts["failed"] else 0


def check_oracles(ids: list[str], seeds: tuple[int, ...] | None, episodes: int, split: str | None,
                  out: TextIO | None = None) -> int:
    """`agentgym check --oracle`: each id's oracle at the eval's defaults on `seeds` (None: fresh ones, drawn for
    each id); one line per id, the seed of every failed episode with the command that plays it again, and a
    line per family (solved / episodes). Exit 1 on a harness failure (max_turns, context_full, no oracle
    action) or an unsolved episode of a task not declared random (agentgym.horizon.declare_random_outcome)."""
    from agentgym.checker import as_missing_dependency
    from agentgym.errors import MissingDependencyError
    from agentgym.horizon import random_outcome
    from agentgym.oracle_check import play_oracle, fresh_seeds, has_oracle

    out = out or sys.stdout
    families: dict[str, list[int]] = {}  # family -> [episodes, solved, failed ids]
    failed = 0
    for env_id in ids:
        if not has_oracle(env_id):
            print(f"skipped {env_id}  (no oracle)", file=out, flush=True)
            continue
        played = list(seeds) if seeds else fresh_seeds(episodes)
        try:
            results = play_oracle(env_id, played, split=split)
        except (ImportError, MissingDependencyError) as exc:
            missing = exc if isinstance(exc, MissingDependencyError) else as_missing_dependency(exc)
            if missing is None:
                raise
            print(f"skipped {env_id}  ({str(missing)[:200]})", file=out, flush=True)
            continue
        random = random_outcome(env_id)
        bad = [r for r in results if r.problem or (not r.success and not random)]
        solved = sum(r.success for r in results)
        turns = sorted(r.turns for r in results if r.success)
        span = f" in {turns[0]}-{turns[-1]} turns" if turns else ""
        label = "FAILED " if bad else "ok     " if solved == len(results) else "misses "
        print(f"{label} {env_id}  {solved}/{len(results)} solved{span} (limit {results[0].limit}); seeds "
              f"{','.join(map(str, played))}", file=out, flush=True)
        for r in results:
            if r in bad or not r.success:
                again = f"agentgym check --oracle {env_id} --seeds {r.seed}" + (f" --split {split}" if split else "")
                print(f"        {r.describe()}  (again: {again})", file=out)
        if random and solved < len(results):
            print(f"        random outcome: {random}", file=out)
        family = env_id.split("/", 1)[-1].split("-", 1)[0]
        tally = families.setdefault(family, [0, 0, 0])
        tally[0] += len(results)
        tally[1] += solved
        tally[2] += bool(bad)
        failed += bool(bad)
    print("", file=out)
    for family, (n, solved, bad_ids) in families.items():
        print(f"{family:<14} {solved}/{n} oracle episodes solved ({100 * solved / n:.0f}%), {bad_ids} ids failed",
              file=out)
    print(f"{failed} ids failed", file=out)
    return 1 if failed else 0


# ----------------------------------------------------------------------------------------------- play

class _Player:
    """The interactive loop of `agentgym play`, on any input/output streams (tests pipe them)."""

    def __init__(self, env: Any, seed: int, out: TextIO):
        self.env, self.seed, self.out = env, seed, out
        self.done = False
        self.episode_return = 0.0
        self.turn = 0

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def reset(self, seed: int | None = None) -> None:
        if seed is not None:
            self.seed = seed
        obs, info = self.env.reset(seed=self.seed)
        self.done, self.episode_return, self.turn = False, 0.0, 0
        self.say(f"\n=== episode (seed {self.seed}) {info.get('task_id', '')}".rstrip())
        self.show(obs, info)

    def show(self, obs: str, info: dict[str, Any], ended: bool = False) -> None:
        self.say(f"\n{obs}")
        admissible = info.get("admissible_actions")
        if admissible and not ended:  # some envs still list them after the end; nothing is admissible then
            self.say(f"[admissible: {' | '.join(admissible)}]")

    def over(self) -> None:
        self.say(f"The episode is over. Type :reset to play seed {self.seed} again, :reset SEED for another "
                 "task, or :quit.")

    def step(self, action: str) -> None:
        if self.done:
            self.over()
            return
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.turn += 1
        self.episode_return += float(reward)
        self.show(obs, info, ended=terminated or truncated)
        parts = [f"reward={float(reward):g}", f"success={info.get('success')}",
                 f"valid={info.get('valid_action')}", f"turn={self.turn}"]
        if info.get("reward_components"):
            parts.append(f"components={json.dumps(info['reward_components'])}")
        self.say("[" + "  ".join(parts) + "]")
        if terminated or truncated:
            self.done = True
            why = "terminated" if terminated else "truncated (turn limit)"
            result = "solved" if info.get("success") else "not solved"
            self.say(f"=== episode {why}: {result} in {self.turn} turn(s), return={self.episode_return:g} "
                     f"success={info.get('success')}")
            self.over()

    def oracle(self, play_it: bool) -> None:
        """`:oracle` names the oracle's action and how to play it; `:oracle!` plays it as the next turn."""
        if self.done:
            self.over()
            return
        base = self.env.unwrapped
        hint = base.oracle_action() if hasattr(base, "oracle_action") else None
        if hint is None:
            self.say("this env has no oracle action here")
        elif play_it:
            self.say(f"(oracle plays) {hint}")
            self.step(hint)
        else:
            self.say(f"oracle: {hint}\n(type it to play it, or :oracle! to let the oracle play it)")

    def command(self, line: str) -> bool:
        """Handle a `:command`; False means quit."""
        name, _, rest = line[1:].strip().partition(" ")
        if name in ("quit", "q", "exit"):
            return False
        if name == "help":
            self.say(PLAY_HELP)
        elif name == "reset":
            if rest.strip() and not rest.strip().lstrip("-").isdigit():
                self.say(f"usage: :reset [SEED] (SEED an integer, got {rest.strip()!r})")
            else:
                self.reset(int(rest) if rest.strip() else None)
        elif name in ("oracle", "oracle!"):
            self.oracle(play_it=name.endswith("!"))
        elif name == "tools":
            tools = list(getattr(self.env.unwrapped, "tools", []))
            self.say("\n".join(json.dumps(t.schema) for t in tools) or "this env has no tools")
        else:
            self.say(f"unknown command {line.strip()!r}; type :help")
        return True


def play(env: Any, seed: int = 0, stdin: TextIO | None = None, out: TextIO | None = None) -> int:
    """Play `env` with actions read line by line from `stdin`; returns an exit code."""
    stdin, out = stdin or sys.stdin, out or sys.stdout
    player = _Player(env, seed, out)
    instructions = getattr(env.unwrapped, "instructions", "")
    player.say(f"{instructions}\n\n(:help for commands, :quit to leave)" if instructions else PLAY_HELP)
    player.reset()
    while True:
        print("> ", end="", file=out, flush=True)
        line = stdin.readline()
        if not line:  # end of input
            player.say("\nbye")
            return 0
        line = line.rstrip("\r\n")
        if not _isatty(stdin):  # piped input: echo it, so the transcript reads like a session
            print(line, file=out, flush=True)
        if line.startswith(":") and not line.startswith("::"):
            if not player.command(line):
                player.say("bye")
                return 0
        else:
            player.step(line[1:] if line.startswith("::") else line)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def cmd_play(args: argparse.Namespace) -> int:
    from agentgym.registration import make

    if args.max_turns is not None and args.max_turns < 1:
        raise ConfigError(f"--max-turns must be >= 1, got {args.max_turns}")
    env = make(args.env, max_turns=args.max_turns)
    try:
        return play(env, seed=args.seed)
    except KeyboardInterrupt:
        print("\nbye")
        return 0
    finally:
        env.close()

