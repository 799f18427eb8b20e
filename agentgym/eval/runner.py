"""Evaluation over envs × episodes × samples, resumable.

Every finished trajectory is appended (and flushed) to `OUT/trajectories.jsonl` the moment the rollout
engine hands it over, keyed by (env label, seed, sample). A later run with the same OUT reads that file
and runs only what is missing, so an interrupted eval loses at most the episodes that were in flight.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from agentgym.errors import ConfigError
from agentgym.registration import SuiteEntry
from agentgym.trajectory import Trajectory, Turn

_TRAJ_FIELDS = tuple(f for f in Trajectory.__dataclass_fields__ if f != "turns")
_TURN_FIELDS = tuple(f for f in Turn.__dataclass_fields__ if f != "anchor")
TRAJECTORIES_FILE = "trajectories.jsonl"
CONFIG_FILE = "eval_config.json"
DEFAULT_SEED = 1_000_000  # held out: training draws its tasks from seeds counting up from 0 (as the trainer's eval)
# fields that must match for a resumed run to be the same eval (episodes may grow: new seeds are added)
_IDENTITY_FIELDS = ("policy", "suite", "entries", "samples", "split", "seed", "max_turns", "temperature",
                    "max_tokens", "layout", "history_turns", "max_context_tokens", "max_observation_tokens")


@dataclass(frozen=True)
class EvalConfig:
    """One evaluation: which policy, on which envs, how many tasks and samples, written where."""

    policy: str                              # a `load_policy` spec: hf:..., openai:URL, random, oracle, ...
    entries: tuple[SuiteEntry, ...]          # envs to run (see `suites.resolve_envs`)
    out_dir: str                             # results, reports and the resume log go here
    suite: str = "custom"                    # name shown in reports
    episodes: int = 10                       # tasks (seeds) per env
    samples: int = 1                         # rollouts per task; pass@k needs k <= samples
    split: str = "test"                      # passed to reset(options={"split": ...})
    seed: int = DEFAULT_SEED                 # task seeds are seed, seed+1, ..., seed+episodes-1
    max_turns: int | None = None             # None: each env's registered turn limit
    workers: int = 4                         # envs stepped concurrently
    temperature: float | None = None         # None: greedy (0) for one sample, 1.0 for several
    max_tokens: int = 256                    # per turn
    layout: str = "trajectory"               # as in training: "trajectory" (whole chat) or "step" (window)
    history_turns: int = 2                   # step layout: past turns kept in each prompt
    max_context_tokens: int | None = 8192    # an episode whose next prompt would not fit ends (context_full)
    max_observation_tokens: int | None = None  # observations truncated to this many tokens
    resume: bool = True                      # reuse OUT's finished episodes; False starts afresh
    keep_prompt_ids: bool = False            # store every turn's prompt token ids (large; for debugging)
    async_mode: bool = False                 # send each env's next request as soon as it is ready (servers)
    retry_failed: bool = True                # on resume, re-run episodes that ended in a policy/env error

    def __post_init__(self) -> None:
        checks = [(self.episodes >= 1, f"--episodes must be >= 1, got {self.episodes}"),
                  (self.samples >= 1, f"--samples must be >= 1, got {self.samples}"),
                  (self.workers >= 1, f"--workers must be >= 1, got {self.workers}"),
                  (self.max_turns is None or self.max_turns >= 1, f"--max-turns must be >= 1, got {self.max_turns}"),
                  (self.max_tokens >= 1, f"--max-tokens must be >= 1, got {self.max_tokens}"),
                  (self.temperature is None or self.temperature >= 0, "--temperature must be >= 0"),
                  (self.layout in ("trajectory", "step"), f"--layout must be trajectory or step, got {self.layout!r}"),
                  (self.history_turns >= 0, f"--history-turns must be >= 0, got {self.history_turns}"),
                  (self.max_context_tokens is None or self.max_context_tokens >= 1, "--max-context-tokens must be >= 1"),
                  (self.max_observation_tokens is None or self.max_observation_tokens >= 1,
                   "--max-observation-tokens must be >= 1"),
                  (bool(self.entries), "nothing to evaluate: the suite has no envs")]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)

    @property
    def sampling_temperature(self) -> float:
        if self.temperature is not None:
            return self.temperature
        return 0.0 if self.samples == 1 else 1.0

    @property
    def seeds(self) -> list[int]:
        return [self.seed + i for i in range(self.episodes)]

    def identity(self) -> dict[str, Any]:
        d = asdict(self)
        d["entries"] = [asdict(e) for e in self.entries]
        d["temperature"] = self.sampling_temperature
        return {k: d[k] for k in _IDENTITY_FIELDS}


@dataclass(frozen=True)
class EvalRecord:
    """One finished episode as stored: which env entry (label), and the trajectory."""

    env: str
    trajectory: Trajectory

    @property
    def key(self) -> tuple[str, int, int]:
        return self.env, self.trajectory.seed, self.trajectory.sample_index

    def to_dict(self) -> dict[str, Any]:
        return {"env": self.env, "seed": self.trajectory.seed, "sample": self.trajectory.sample_index,
                "trajectory": trajectory_dict(self.trajectory)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalRecord:
        return cls(d["env"], Trajectory.from_dict(d["trajectory"]))


def _jsonable(value: Any) -> Any:
    return value if value is None or isinstance(value, (str, int, float, bool)) else repr(value)


def trajectory_dict(traj: Trajectory) -> dict[str, Any]:
    """`Trajectory.to_dict` without `dataclasses.asdict`'s deep copies (10x faster on long token lists)."""
    d = {name: getattr(traj, name) for name in _TRAJ_FIELDS}
    d["turns"] = [{**{name: getattr(t, name) for name in _TURN_FIELDS}, "anchor": _jsonable(t.anchor)}
                  for t in traj.turns]
    return d


def compact(traj: Trajectory) -> Trajectory:
    """Drop per-turn prompt ids (in the trajectory layout they repeat the whole conversation every turn,
    so they grow quadratically); keep their count in `info["prompt_tokens"]` for the token metrics."""
    turns = tuple(replace(t, prompt_ids=(), info={**t.info, "prompt_tokens": len(t.prompt_ids)})
                  if t.prompt_ids else t for t in traj.turns)
    return replace(traj, turns=turns)


@dataclass(frozen=True)
class EvalRun:
    """What `run_eval` returns: the config, every record (stored order), and timings."""

    config: EvalConfig
    records: tuple[EvalRecord, ...]
    started: float
    finished: float
    ran_now: int                             # episodes computed by this call (the rest were resumed)
    paths: dict[str, str] = field(default_factory=dict)


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
    if config.resume and config_path.exists():
        old = json.loads(config_path.read_text(encoding="utf-8")).get("identity", {})
        new = json.loads(json.dumps(config.identity()))  # normalise tuples to lists
        diff = [k for k in _IDENTITY_FIELDS if old.get(k) != new.get(k)]
        if diff:
            raise ConfigError(f"{out} holds results of a different eval ({', '.join(diff)} differ); "
                              "pass another --out, or --no-resume to overwrite it")
        records = load_records(log_path)
    else:
        records = []
        log_path.write_text("", encoding="utf-8")
    config_path.write_text(json.dumps({"identity": config.identity(), "episodes": config.episodes,
                                       "workers": config.workers}, indent=2), encoding="utf-8")
    wanted = {(e.name, s, i) for e in config.entries for s in config.seeds for i in range(config.samples)}
    latest = {r.key: r for r in records if r.key in wanted}  # a retried episode's later line wins
    if config.retry_failed:  # e.g. the model server was down: those episodes say nothing about the policy
        latest = {k: r for k, r in latest.items() if r.trajectory.error is None}
    return list(latest.values())


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
def load_eval_policy(spec: str) -> tuple[Any, Any]:
    """(policy, chat format) for a policy spec; non-model policies get the built-in simple chat format."""
    from agentgym.chat import ChatFormat
    from agentgym.policies import load_policy

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


def run_eval(config: EvalConfig, policy: Any = None, chat: Any = None, progress: bool = True,
             write_reports: bool = True) -> EvalRun:
    """Run what OUT does not hold yet, then write results.json, report.md and report.html.

    `policy`/`chat` may be passed in (tests, the trainer's in-memory model); otherwise the spec is loaded
    (and only when something is left to run, so a finished eval re-renders its reports without a model).
    """
    started = time.time()
    records = prepare_out_dir(config)
    work = missing_work(config, {r.key for r in records})
    total = len(config.entries) * config.episodes * config.samples
    sink = None
    if work:
        for entry in {id(e): e for e, _, _ in work}.values():
            preflight(entry, config)
        if policy is None:
            policy, chat = load_eval_policy(config.policy)
        sink = _Sink(RecordLog(Path(config.out_dir) / TRAJECTORIES_FILE), _progress(total, len(records), progress))
        try:
            for entry, seeds, samples in work:
                _run_batch(config, entry, seeds, samples, policy, chat, sink)
        finally:
            sink.bar.close()
            sink.log.close()
    new = sink.records if sink else []
    run = EvalRun(config, ordered([*records, *new], config), started, time.time(), len(new))
    if write_reports:
        from agentgym.eval.reports import write_all

        run = replace(run, paths=write_all(run))
    return run


def preflight(entry: SuiteEntry, config: EvalConfig) -> None:
    """Make and reset one env before any model runs, so a bad split or kwarg is one clear error, not N failed
    episodes."""
    from agentgym.registration import make

    env = None
    try:
        env = make(entry.env_id, max_turns=config.max_turns, **entry.kwargs)
        env.reset(seed=config.seed, options={"split": config.split})
    except Exception as exc:  # the env's own message says what it accepts
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"{entry.name} cannot start with --split {config.split!r} and kwargs {entry.kwargs}: "
                          f"{message}") from exc
    finally:
        if env is not None:
            env.close()


def _run_batch(config: EvalConfig, entry: SuiteEntry, seeds: list[int], samples: list[int], policy: Any,
               chat: Any, sink: _Sink) -> None:
    """One rollout call: `seeds` × len(samples); sample i of the call is stored as samples[i]."""
    from agentgym.policies import SamplingParams
    from agentgym.rollout import RolloutConfig, rollout

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
    rcfg = RolloutConfig(max_turns=config.max_turns, layout=config.layout, history_turns=config.history_turns,
                         max_context_tokens=config.max_context_tokens,
                         max_observation_tokens=config.max_observation_tokens, sampling=sampling,
                         executor="thread", env_workers=config.workers, async_mode=config.async_mode,
                         max_inflight_batches=config.workers if config.async_mode else 1)
    returned = rollout(entry.env_id, policy, chat, seeds, group_size=len(samples), config=rcfg,
                       env_kwargs=dict(entry.kwargs), reset_options={"split": config.split},
                       start_group_id=config.entries.index(entry) * config.episodes + (seeds[0] - config.seed),
                       on_trajectory=on_trajectory)
    for traj in returned or ():  # an engine that did not call back still loses nothing
        on_trajectory(traj)
