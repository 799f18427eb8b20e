"""Evaluation over envs × episodes × samples, resumable.

Every finished trajectory is appended (and flushed) to `OUT/trajectories.jsonl` the moment the rollout
engine hands it over, keyed by (env label, seed, sample). A later run with the same OUT reads that file
and runs only what is missing, so an interrupted eval loses at most the episodes that were in flight.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from agentgym.chat import ChatFormat
from agentgym.errors import ConfigError
from agentgym.eval.records import IDENTITY_FIELDS, DEFAULT_SEED, EvalConfig, EvalRecord, EvalRun
from agentgym.eval.writer import write_all
from agentgym.policy import Policy, SamplingParams, load_policy
from agentgym.registration import SuiteEntry, make
from agentgym.engine.rollout import RolloutConfig, rollout
from agentgym.trajectory import Trajectory

__all__ = ["DEFAULT_SEED", "EvalConfig", "EvalRecord", "EvalRun", "run_eval"]  # the records are re-exported
TRAJECTORIES_FILE = "trajectories.jsonl"
CONFIG_FILE = "eval_config.json"


def compact(traj: Trajectory) -> Trajectory:
    """Drop per-turn prompt ids (in the trajectory layout they repeat the whole conversation every turn,
    so they grow quadratically) and the candidates' token ids of a choice (training data); keep the prompt's
    length in `info["prompt_tokens"]` for the token metrics."""
    turns = tuple(replace(t, prompt_ids=(), choice=None, info={**t.info, "prompt_tokens": len(t.prompt_ids)})
                  if t.prompt_ids else replace(t, choice=None) if t.choice is not None else t for t in traj.turns)
    return replace(traj, turns=turns)


# ---------------------------------------------------------------------------------------------- resume log
def load_records(path: Path) -> list[EvalRecord]:
    """Records of a resume log; a line cut short by a kill is dropped (and cut from the file)."""
    if not path.exists():
        return []
    records, good_lines, dropped = [], [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            records.append(EvalRecord.from_dict(json.loads(line)))
            good_lines.append(line)
        except (ValueError, KeyError, TypeError):
            dropped += 1
    if dropped:  # rewrite so appends start on a clean line
        path.write_text("".join(f"{line}\n" for line in good_lines), encoding="utf-8")
    return records


class RecordLog:
    """Appends records to the resume log, one flushed JSON line each; safe across rollout threads."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._file = path.open("a", encoding="utf-8")

    def append(self, record: EvalRecord) -> None:
        line = json.dumps(record.to_dict(), ensure_ascii=False, default=str)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        self._file.close()


def prepare_out_dir(config: EvalConfig) -> list[EvalRecord]:
    """Create OUT, check a resumed run is the same eval, and return the records already there."""
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config_path, log_path = out / CONFIG_FILE, out / TRAJECTORIES_FILE
    splits: dict[str, str] = {}
    if config.resume and config_path.exists():
        stored = json.loads(config_path.read_text(encoding="utf-8"))
        old = stored.get("identity", {})
        new = json.loads(json.dumps(config.identity()))  # normalise tuples to lists
        diff = [k for k in IDENTITY_FIELDS if old.get(k) != new.get(k)]
        if diff:
            raise ConfigError(f"{out} holds results of a different eval ({', '.join(diff)} differ); "
                              "pass another --out, or --no-resume to overwrite it")
        records = load_records(log_path)
        splits = stored.get("splits", {})
    else:
        records = []
        log_path.write_text("", encoding="utf-8")
    write_eval_config(config, splits)
    wanted = {(e.name, s, i) for e in config.entries for s in config.seeds for i in range(config.samples)}
    latest = {r.key: r for r in records if r.key in wanted}  # a retried episode's later line wins
    if config.retry_failed:  # e.g. the model server was down: those episodes say nothing about the policy
        latest = {k: r for k, r in latest.items() if r.trajectory.outcome != "error"}
    return list(latest.values())


def write_eval_config(config: EvalConfig, splits: dict[str, str]) -> None:
    """OUT/eval_config.json: what a resumed run must match, and the splits the envs resolved (kept, so a
    finished eval re-renders its reports without making any env)."""
    doc = {"identity": config.identity(), "episodes": config.episodes, "workers": config.workers, "splits": splits}
    (Path(config.out_dir) / CONFIG_FILE).write_text(json.dumps(doc, indent=2), encoding="utf-8")


def stored_splits(config: EvalConfig) -> dict[str, str]:
    path = Path(config.out_dir) / CONFIG_FILE
    return json.loads(path.read_text(encoding="utf-8")).get("splits", {}) if path.exists() else {}


def missing_work(config: EvalConfig, done: set[tuple[str, int, int]]
                 ) -> list[tuple[SuiteEntry, list[int], list[int]]]:
    """(entry, seeds, sample indices) batches still to run: whole groups first, then partial ones."""
    work = []
    for entry in config.entries:
        full, partial = [], []
        for seed in config.seeds:
            todo = [i for i in range(config.samples) if (entry.name, seed, i) not in done]
            if len(todo) == config.samples:
                full.append(seed)
            elif todo:
                partial.append((seed, todo))
        if full:
            work.append((entry, full, list(range(config.samples))))
        work.extend((entry, [seed], todo) for seed, todo in partial)
    return work


def ordered(records: Sequence[EvalRecord], config: EvalConfig) -> tuple[EvalRecord, ...]:
    """Records sorted as the config lists them: env, then seed, then sample."""
    env_rank = {e.name: i for i, e in enumerate(config.entries)}
    return tuple(sorted(records, key=lambda r: (env_rank[r.env], r.trajectory.seed, r.trajectory.sample_index)))


# ---------------------------------------------------------------------------------------------- running
def load_eval_policy(spec: str) -> tuple[Policy, ChatFormat]:
    """(policy, chat format) for a policy spec; non-model policies get the built-in simple chat format."""
    policy = load_policy(spec)
    chat = policy.chat_format() if hasattr(policy, "chat_format") else ChatFormat.simple()
    return policy, chat


class _Sink:
    """Where finished episodes go: the resume log first (durable), then memory and the progress bar."""

    def __init__(self, log: RecordLog, bar: Any):
        self.log, self.bar = log, bar
        self.records: list[EvalRecord] = []
        self._lock = threading.Lock()

    def add(self, record: EvalRecord) -> None:
        self.log.append(record)
        with self._lock:
            self.records.append(record)
            self.bar.update(1)


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, initial: int, enabled: bool) -> Any:
    """A tqdm bar on a terminal; nothing when disabled or tqdm is not installed (it is optional)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    if not enabled:
        return _NoBar()
    return tqdm(total=total, initial=initial, unit="ep", desc="eval", mininterval=0.5, dynamic_ncols=True)


def run_eval(config: EvalConfig, policy: Policy | None = None, chat: ChatFormat | None = None,
             progress: bool = True, write_reports: bool = True) -> EvalRun:
    """Run what OUT does not hold yet, then write results.json, report.md and report.html.

    `policy`/`chat` may be passed in (tests, the trainer's in-memory model); otherwise the spec is loaded
    (and only when something is left to run, so a finished eval re-renders its reports without a model).
    """
    started = time.time()
    records = prepare_out_dir(config)
    work = missing_work(config, {r.key for r in records})
    total = len(config.entries) * config.episodes * config.samples
    sink = None
    splits = stored_splits(config)
    if work:
        for entry in {id(e): e for e, _, _ in work}.values():
            splits[entry.name] = preflight(entry, config)
        write_eval_config(config, splits)
        if policy is None:
            policy, chat = load_eval_policy(config.policy)
        if chat is not None and config.tool_format != "auto":
            chat = chat.with_tool_format(config.tool_format)
        sink = _Sink(RecordLog(Path(config.out_dir) / TRAJECTORIES_FILE), _progress(total, len(records), progress))
        try:
            for entry, seeds, samples in work:
                _run_batch(config, entry, seeds, samples, policy, chat, sink)
        finally:
            sink.bar.close()
            sink.log.close()
    new = sink.records if sink else []
    run = EvalRun(config, ordered([*records, *new], config), started, time.time(), len(new), splits=splits)
    if write_reports:
        run = replace(run, paths=write_all(run))
    return run


def preflight(entry: SuiteEntry, config: EvalConfig) -> str:
    """Make and reset one env before any model runs, so a bad split or kwarg is one clear error, not N failed
    episodes. Returns the split the env drew the task from: reset's info["split"] where the env resolves
    an alias (household: test -> test_unseen), else `config.split` as given."""
    env = None
    try:
        env = make(entry.env_id, max_turns=config.max_turns, **entry.kwargs)
        _, info = env.reset(seed=config.seed, options={"split": config.split})
    except Exception as exc:  # the env's own message says what it accepts
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"{entry.name} cannot start with --split {config.split!r} and kwargs {entry.kwargs}: "
                          f"{message}") from exc
    finally:
        if env is not None:
            env.close()
    resolved = info.get("split") if isinstance(info, dict) else None
    return resolved if isinstance(resolved, str) and resolved else config.split


def _run_batch(config: EvalConfig, entry: SuiteEntry, seeds: list[int], samples: list[int],
               policy: Policy, chat: ChatFormat | None, sink: _Sink) -> None:
    """One rollout call: `seeds` × len(samples); sample i of the call is stored as samples[i]."""
    lock = threading.Lock()
    seen: set[tuple[int, int]] = set()

    def on_trajectory(traj: Trajectory) -> None:
        with lock:
            if (traj.seed, traj.sample_index) in seen:
                return
            seen.add((traj.seed, traj.sample_index))
        traj = replace(traj, sample_index=samples[traj.sample_index])
        sink.add(EvalRecord(entry.name, traj if config.keep_prompt_ids else compact(traj)))

    sampling = SamplingParams(temperature=config.sampling_temperature, max_tokens=config.max_tokens,
                              seed=config.seed)
    rcfg = RolloutConfig(max_turns=config.max_turns, **config.context_settings(entry.env_id), sampling=sampling,
                         executor="thread", env_workers=config.workers, async_mode=config.async_mode,
                         max_inflight_batches=config.workers if config.async_mode else 1)
    returned = rollout(entry.env_id, policy, chat, seeds, group_size=len(samples), config=rcfg,
                       env_kwargs=dict(entry.kwargs), reset_options={"split": config.split},
                       start_group_id=config.entries.index(entry) * config.episodes + (seeds[0] - config.seed),
                       on_trajectory=on_trajectory)
    for traj in returned or ():  # an engine that did not call back still loses nothing
        on_trajectory(traj)
