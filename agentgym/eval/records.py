"""The records of an evaluation: its config, one finished episode (`EvalRecord`) and a whole run.

Plain data shared by the runner (which makes them), the reports (which summarise them) and the writer.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from agentgym.errors import ConfigError
from agentgym.registration import SuiteEntry
from agentgym.horizon import CONTEXT_FIELDS, choose
from agentgym.engine.rollout import LAYOUTS, RolloutConfig
from agentgym.toolcall_formats import FORMATS
from agentgym.trajectory import Trajectory

ROLLOUT = RolloutConfig()  # eval's rollout defaults are the engine's, which training embeds: one set
CUSTOM_SUITE = "custom"  # the suite name of `--env ID ...` runs: reports name the envs instead
DEFAULT_SEED = 1_000_000  # held out: training draws its tasks from seeds counting up from 0 (as the trainer's eval)
# fields that must match for a resumed run to be the same eval (episodes may grow: new seeds are added)
IDENTITY_FIELDS = ("policy", "suite", "entries", "samples", "split", "seed", "max_turns", "temperature",
                    "max_tokens", "layout", "history_turns", "max_context_tokens", "max_observation_tokens",
                    "fold_at_tokens")


@dataclass(frozen=True)
class EvalConfig:
    """One evaluation: which policy, on which envs, how many tasks and samples, written where."""

    policy: str                              # a `load_policy` spec: hf:..., openai:URL, random, oracle, ...
    entries: tuple[SuiteEntry, ...]          # envs to run (see `suites.resolve_envs`)
    out_dir: str                             # results, reports and the resume log go here
    suite: str = CUSTOM_SUITE                # name shown in reports
    episodes: int = 10                       # tasks (seeds) per env
    samples: int = 1                         # rollouts per task; pass@k needs k <= samples
    split: str = "test"                      # passed to reset(options={"split": ...})
    seed: int = DEFAULT_SEED                 # task seeds are seed, seed+1, ..., seed+episodes-1
    max_turns: int | None = None             # None: each env's registered turn limit
    workers: int = 4                         # envs stepped concurrently
    temperature: float | None = None         # None: greedy (0) for one sample, 1.0 for several
    max_tokens: int = ROLLOUT.sampling.max_tokens  # per turn
    # The context settings: None = what the env's registration recommends (agentgym.horizon), else the engine's.
    layout: str | None = None                # as in training: "trajectory", "step" (a window) or "fold"
    history_turns: int | None = None         # step layout: past turns kept in each prompt
    max_context_tokens: int | None = None    # an episode that would not fit ends (context_full); 0 = no limit
    max_observation_tokens: int | None = None  # observations truncated to this; 0 = whole
    fold_at_tokens: int | None = None        # fold layout: fold once a prompt would pass this
    resume: bool = True                      # reuse OUT's finished episodes; False starts afresh
    keep_prompt_ids: bool = False            # store every turn's prompt token ids (large; for debugging)
    async_mode: bool = False                 # send each env's next request as soon as it is ready (servers)
    retry_failed: bool = True                # on resume, re-run episodes that ended in a policy/env error
    tool_format: str = "auto"                # how the model writes tool calls; auto: its chat template decides

    def __post_init__(self) -> None:
        checks = [(self.episodes >= 1, f"--episodes must be >= 1, got {self.episodes}"),
                  (self.samples >= 1, f"--samples must be >= 1, got {self.samples}"),
                  (self.workers >= 1, f"--workers must be >= 1, got {self.workers}"),
                  (self.max_turns is None or self.max_turns >= 1, f"--max-turns must be >= 1, got {self.max_turns}"),
                  (self.max_tokens >= 1, f"--max-tokens must be >= 1, got {self.max_tokens}"),
                  (self.temperature is None or self.temperature >= 0, "--temperature must be >= 0"),
                  (self.layout in (None, *LAYOUTS), f"--layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}"),
                  (self.history_turns is None or self.history_turns >= 0,
                   f"--history-turns must be >= 0, got {self.history_turns}"),
                  (self.max_context_tokens is None or self.max_context_tokens >= 0,
                   "--max-context-tokens must be >= 1 (or 0: no limit)"),
                  (self.max_observation_tokens is None or self.max_observation_tokens >= 0,
                   "--max-observation-tokens must be >= 1 (or 0: whole observations)"),
                  (self.fold_at_tokens is None or self.fold_at_tokens >= 1, "--fold-at-tokens must be >= 1"),
                  (bool(self.entries), "nothing to evaluate: the suite has no envs"),
                  (self.tool_format == "auto" or self.tool_format in FORMATS,
                   f"--tool-format must be auto or one of {', '.join(FORMATS)}, got {self.tool_format!r}")]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)

    @property
    def sampling_temperature(self) -> float:
        if self.temperature is not None:
            return self.temperature
        return 0.0 if self.samples == 1 else 1.0

    def given_context(self) -> dict[str, Any]:
        """The context settings the user set (name -> value; 0 token limits as None, i.e. no limit)."""
        given = {name: getattr(self, name) for name in CONTEXT_FIELDS if getattr(self, name) is not None}
        return {k: None if v == 0 and k.endswith("_tokens") else v for k, v in given.items()}

    def context_settings(self, env_id: str) -> dict[str, Any]:
        """The layout, history window and token budgets `env_id` runs with: yours, else its registration's."""
        return choose(env_id, self.given_context(), {name: getattr(ROLLOUT, name) for name in CONTEXT_FIELDS})

    @property
    def seeds(self) -> list[int]:
        return [self.seed + i for i in range(self.episodes)]

    def identity(self) -> dict[str, Any]:
        d = asdict(self)
        d["entries"] = [asdict(e) for e in self.entries]
        d["temperature"] = self.sampling_temperature
        return {k: d[k] for k in IDENTITY_FIELDS}


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
                "trajectory": self.trajectory.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalRecord:
        return cls(d["env"], Trajectory.from_dict(d["trajectory"]))


@dataclass(frozen=True)
class EvalRun:
    """What `run_eval` returns: the config, every record (stored order), and timings."""

    config: EvalConfig
    records: tuple[EvalRecord, ...]
    started: float
    finished: float
    ran_now: int                             # episodes computed by this call (the rest were resumed)
    paths: dict[str, str] = field(default_factory=dict)
    # env label -> the split its tasks came from, as the env resolved `config.split` (household: test ->
    # test_unseen); an env that does not say (reset info["split"]) is taken to use config.split as given
    splits: dict[str, str] = field(default_factory=dict)
