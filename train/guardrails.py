"""Run-health guardrails: checks on each iteration's metrics that catch a run learning nothing for a
reason a user cannot see — a rollout engine generating with stale weights, a batch with no learning signal.

Each guard is a pure function of the iteration's metrics and the config section, returning an `Alarm` or
None; the trainer logs every guard's figure as `guard/<name>` and, per `train.guardrails.<name>`, warns
(one line on stderr) or stops the run (GuardrailError, whose message names the cause and the fix).

  stale_weights  mean |log p_sampler - log p_trainer| over the batch's action tokens, both at the sampling
                 temperature, before the update. The engine and the trainer then hold the same weights,
                 so the gap is numerical noise (fp32 vLLM on CPU: ~2e-5; bf16 engines: ~1e-2); well
                 above it, the engine is not running the trained weights (no push, an adapter not applied).
                 Where the starting policy's log-probs are at hand (the KL reference, algorithm.regularisers.kl_coef
                 > 0) it also reads the sampler's distance from the START (logprob_diff_start) beside the learner's
                 (policy_drift): a sampler still at the start while the learner moved (a weight push or a LoRA
                 adapter that never lands) fires once policy_drift reaches min_policy_drift, below the gap limit
                 and whatever the engine's precision noise (`start_distances`, the `stuck_at_start` rule).
  no_signal      the share of action tokens with a zero advantage: 1.0 means every group's rewards were
                 equal and the update changes nothing (logged beside it: the share of groups with equal
                 returns, of turns with zero advantage, and the effective batch).
  unparsed_tool_calls  the share of tool-env turns whose text attempts a tool call (in some registered format,
                 `agentgym.toolcall_formats.looks_like_call`) that the env parsed to none; logged per format
                 as tool_calls_unparsed/<format>. High means the model writes one family's format and the env
                 reads another (e.g. Llama 3 JSON against Hermes tags): no call ever runs.
  not_one_task   GRPO and GiGPO compare a group's G rollouts as plays of one task, so their first prompts
                 must be identical; `drop_mixed_groups` drops a group whose members start differently (an env
                 whose reset ignores the seed) before any estimator sees it, and the guard reports how many.
  token_drift    the share of verified samples whose token ids differ from the chat template's tokenisation
                 of the decoded conversation (train.verify_tokens): the trainer would score other tokens
                 than the engine sampled.
  reward_sanity  rewards that contradict the env: a step reward outside its declared range
                 (TextEnv.reward_range or register(..., reward_range=)), success with a return <= 0, or a
                 failed episode earning the top reward (health.reward_sanity).
  collapse       the policy stops exploring before it solves the task: entropy or response length fell below
                 a share of their start (means over `collapse_window` iterations), or every group's members
                 produced the same actions; forgiven once recent success reaches `collapse_success_ceiling`.
  tool_errors    the share of tool calls that returned an error (wrong names or arguments, a broken tool).
  infra_failures the share of the batch's episodes that an infrastructure failure ended (outcome "error": an
                 env server died, a sandbox hung, a policy request failed). They leave their groups before any
                 estimator sees them (collectors/base.py, `usable`); past the share the run stops with the first
                 error's text, since what it trains on is no longer a sample of the tasks.
The figures come from health.py. Each guard's settings are fields of `GuardrailsSection` (train.guardrails);
adding one is its function, its entry in GUARDS (and BEFORE_UPDATE when its figures are known before the
update), its fields and its test.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Optional, Sequence

from agentgym.errors import AgentGymError, ConfigError


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


@dataclass(frozen=True)
class GuardrailsSection:
    """Run-health checks on every iteration (train/guardrails.py): "stop" ends the run with the cause and the
    fix, "warn" prints it, "off" skips the check. Their figures are logged every iteration (logprob_diff,
    zero_advantage_share) and a guard that fired adds guard/<name> = 1."""

    stale_weights: Literal["stop", "warn", "off"] = "stop"
    """The rollout engine's log-probs of the sampled tokens against the trainer's, before the update."""
    max_logprob_gap: float = 0.05
    """stale_weights fires above this mean |log-prob gap| per action token (nats); fp32 engines stay ~1e-4."""
    min_policy_drift: float = 0.01
    """stale_weights also fires once the learner's mean |log p - log p_start| per action token reaches this (nats)
    while the sampler's stays below max_start_share of it: the engine still samples from the starting weights.
    Read only where the starting policy's log-probs exist (the KL reference: algorithm.regularisers.kl_coef > 0)."""
    max_start_share: float = 0.1
    """A sampler whose distance from the start is below this share of the learner's counts as stuck at the start."""
    no_signal: Literal["stop", "warn", "off"] = "warn"
    """Every action token's advantage is zero: the update cannot change the policy."""
    max_zero_advantage_share: float = 1.0
    """no_signal fires when at least this share of action tokens has a zero advantage."""
    not_one_task: Literal["stop", "warn", "off"] = "warn"
    """A group whose rollouts start from different first prompts or first anchors (dropped before training
    either way)."""
    token_drift: Literal["stop", "warn", "off"] = "stop"
    """Verified samples (train.verify_tokens) whose token ids differ from the chat template's tokenisation."""
    max_token_drift: float = 0.0
    """token_drift fires above this share of verified samples (0: any mismatch)."""
    reward_sanity: Literal["stop", "warn", "off"] = "warn"
    """Step rewards outside the env's declared reward_range, success with a return <= 0, or a failed episode
    earning the top reward (read before group rewards and shaping)."""
    reward_range: tuple[float, float] | None = None
    """[lo, hi] of one step's env reward for reward_sanity; null: the env's own declaration (TextEnv.reward_range
    or agentgym.register(..., reward_range=)), if any."""
    collapse: Literal["stop", "warn", "off"] = "warn"
    """Entropy or response length falling far below their start, or every group playing identical actions,
    while the task is not yet solved."""
    collapse_window: int = 3
    """Iterations averaged at the start and at the end of the entropy and response-length trends."""
    min_entropy_ratio: float = 0.1
    """collapse fires when the recent mean entropy falls below this share of the first iterations'."""
    min_response_length_ratio: float = 0.25
    """collapse fires when the recent mean response length falls below this share of the first iterations'."""
    max_identical_group_share: float = 1.0
    """collapse fires when at least this share of groups played the same action texts in every member."""
    collapse_success_ceiling: float = 0.9
    """No collapse alarm once the recent iterations' success reaches this (a solved task may be played surely)."""
    unparsed_tool_calls: Literal["stop", "warn", "off"] = "stop"
    """Turns that attempt a tool call the env never parses: the model's format and the env's differ."""
    max_unparsed_tool_call_share: float = 0.5
    """unparsed_tool_calls fires above this share of tool-env turns."""
    tool_errors: Literal["stop", "warn", "off"] = "warn"
    """The share of tool calls that returned an error."""
    max_tool_error_share: float = 0.8
    """tool_errors fires above this share of tool calls."""
    infra_failures: Literal["stop", "warn", "off"] = "stop"
    """Episodes ended by an infrastructure failure (outcome "error"), not by the agent; always left out of training."""
    max_infra_failure_share: float = 0.5
    """infra_failures fires above this share of an iteration's episodes (its first round)."""

    def __post_init__(self) -> None:
        _require(self.max_logprob_gap > 0, "train.guardrails.max_logprob_gap must be > 0")
        _require(self.min_policy_drift > 0, f"train.guardrails.min_policy_drift must be > 0 (nats per action token), "
                                            f"got {self.min_policy_drift}")
        _require(0 < self.max_start_share < 1, f"train.guardrails.max_start_share must be in (0, 1), got "
                                               f"{self.max_start_share}")
        _require(0 < self.max_zero_advantage_share <= 1, "train.guardrails.max_zero_advantage_share must be in (0, 1]")
        shares = ("max_token_drift", "min_entropy_ratio", "min_response_length_ratio", "max_identical_group_share",
                  "collapse_success_ceiling", "max_tool_error_share")
        for name in shares:
            _require(0 <= getattr(self, name) <= 1, f"train.guardrails.{name} must be in [0, 1], got {getattr(self, name)}")
        _require(self.collapse_window >= 1, f"train.guardrails.collapse_window must be >= 1, got {self.collapse_window}")
        _require(self.reward_range is None or self.reward_range[0] <= self.reward_range[1],
               f"train.guardrails.reward_range must be [lo, hi] with lo <= hi, got {self.reward_range}")
        _require(0 <= self.max_unparsed_tool_call_share < 1,
               "train.guardrails.max_unparsed_tool_call_share must be in [0, 1)")
        _require(0 <= self.max_infra_failure_share < 1,
                 f"train.guardrails.max_infra_failure_share must be in [0, 1) (the share of an iteration's episodes "
                 f"that may fail for infrastructure reasons), got {self.max_infra_failure_share}; "
                 "train.guardrails.infra_failures=warn never stops")


class GuardrailError(AgentGymError):
    """A guardrail stopped the run; the message says what is wrong and how to fix it."""


@dataclass(frozen=True)
class Alarm:
    guard: str
    value: float
    message: str


def stale_weights(metrics: dict[str, Any], section: Any) -> Optional[Alarm]:
    gap = float(metrics.get("logprob_diff", 0.0))
    if gap <= section.max_logprob_gap:
        return None
    return Alarm("stale_weights", gap, (
        f"the rollout engine's log-probs differ from the trainer's by {gap:.3g} nats per token on the same tokens "
        f"(limit {section.max_logprob_gap}): it is not generating with the trained weights. Check that weights "
        "(or the LoRA adapter) reach the engine after each update; for a bf16 engine raise "
        "train.guardrails.max_logprob_gap"))


def stuck_at_start(metrics: dict[str, Any], section: Any) -> Optional[Alarm]:
    """The sampler's log-probs still equal the starting policy's while the learner's moved away from it."""
    start, drift = metrics.get("logprob_diff_start"), metrics.get("policy_drift")
    if start is None or drift is None or drift < section.min_policy_drift or start >= section.max_start_share * drift:
        return None
    return Alarm("stale_weights", float(drift), (
        f"the rollout engine still samples from the STARTING weights: its log-probs are {start:.3g} nats per token from "
        f"the starting policy's while the trainer's moved {drift:.3g} away (limit: below {section.max_start_share:g} of "
        f"the trainer's once it moved {section.min_policy_drift:g}). The trained weights (or the LoRA adapter) never "
        "reach the engine: check the weight push (train.push_weights, the engine's update_weights/update_adapter)"))


def start_distances(samples: Sequence[Any], old_logprobs: Sequence[Any], start_logprobs: Sequence[Any] | None,
                    moved: Sequence[Any] | None = None) -> dict[str, float]:
    """stuck_at_start's figures over the action tokens (only the `moved` positions when given: async turns of
    weights published after an update): the sampler's mean |log p - log p_start| (logprob_diff_start) and the
    trainer's (policy_drift), before the update. {} without the starting policy's log-probs or tokens."""
    import numpy as np

    if start_logprobs is None:
        return {}
    sampler, trainer = [], []
    for i, s in enumerate(samples):
        m = s.mask[1:] if moved is None else s.mask[1:] & moved[i]
        start = np.asarray(start_logprobs[i])[m]
        sampler.append(np.abs(s.rollout_logprobs[1:][m] - start))
        trainer.append(np.abs(np.asarray(old_logprobs[i])[m] - start))
    a, b = (np.concatenate(x) if x else np.zeros(0) for x in (sampler, trainer))
    ok = np.isfinite(a) & np.isfinite(b)  # a sampler may not report some log-probs (NaN)
    if not ok.any():
        return {}
    return {"logprob_diff_start": float(a[ok].mean()), "policy_drift": float(b[ok].mean())}


def moved_tokens(batch: Sequence[Any], samples: Sequence[Any], async_run: bool) -> list[Any] | None:
    """Async: per sample, the action positions sampled by weights published after an update (version >= 1), the
    only ones that must be away from the start; None (every position) in a synchronous run."""
    import numpy as np

    if not async_run:
        return None
    versions = np.array([t.policy_version for tr in batch for t in tr.turns], dtype=np.int64)  # [turn rows]
    return [versions[np.maximum(s.row[1:], 0)] >= 1 for s in samples]


def rollout_lag(metrics: dict[str, Any], section: Any) -> Optional[Alarm]:
    """Async: the weights the rollout workers generate with are more versions behind the trainer's than
    asynchrony explains (train/async_rl.py, AsyncRollouts.version_lag); known before the update."""
    lag, allowed = metrics.get("async/rollout_version_lag"), metrics.get("async/allowed_version_lag")
    if lag is None or allowed is None or lag <= allowed:
        return None
    return Alarm("stale_weights", float(lag), (
        f"the async rollout workers generate with weights {lag:.0f} versions behind the trainer's (train.max_staleness"
        f" allows {allowed:.0f}): the trained weights never reach them. Check that weights reach the rollout side "
        "after each update (train.push_weights, the engine's weight update)"))


def no_signal(metrics: dict[str, Any], section: Any) -> Optional[Alarm]:
    share = metrics.get("zero_advantage_share")
    if share is None or share < section.max_zero_advantage_share:
        return None
    return Alarm("no_signal", float(share), (
        f"{100 * share:.0f}% of action tokens have a zero advantage (limit {100 * section.max_zero_advantage_share:.0f}%)"
        f" ({100 * metrics.get('zero_variance_group_share', 1.0):.0f}% of groups with equal returns, effective batch "
        f"{metrics.get('effective_samples', 0):.0f} samples)"
        + (": every episode succeeded, so there is nothing left to learn at this difficulty. Train on harder tasks "
           "(env_kwargs, a turn cap) or stop here" if metrics.get("success") == 1.0 else
           ": every group's rewards were equal, so the update learns nothing. Make tasks easier or groups larger "
           "(rollout.group_size), or turn on algorithm.dynamic_sampling")))


def not_one_task(metrics: dict[str, Any], section: Any) -> Optional[Alarm]:
    dropped = float(metrics.get("groups_not_one_task", 0.0))
    if dropped <= 0:
        return None
    return Alarm("not_one_task", dropped, (
        f"{dropped:.0f} group(s) were dropped because their rollouts did not start from the same first prompt: "
        "the env's reset does not fix the task by its seed, so the group's rewards are not comparable. Make "
        "reset(seed=...) deterministic (agentgym check ENV_ID tests it)"))


def token_drift(metrics: dict[str, Any], section: Any) -> Optional[Alarm]:
    rate = float(metrics.get("token_drift_rate", 0.0))
    if rate <= section.max_token_drift:
        return None
    return Alarm("token_drift", rate, (
        f"{100 * rate:.0f}% of verified samples' token ids differ from the chat template's tokenisation of the "
        f"decoded text (limit {100 * section.max_token_drift:.0f}%): the trainer would score other tokens than the "
        "engine sampled. Give the engine the trainer's tokenizer and chat template (model.policy); a template that "
        "rewrites earlier turns (thinking stripped) needs rollout.layout=step"))


def reward_sanity(metrics: dict[str, Any], section: Any) -> Optional[Alarm]:
    faults = [(key, what) for key, what in (
        ("reward_out_of_range_share", "step rewards outside the env's declared reward_range"),
        ("success_without_reward_share", "successful episodes with a return <= 0"),
        ("reward_without_success_share", "failed episodes that earned the env's top reward"))
        if metrics.get(key, 0.0) > 0]
    if not faults:
        return None
    worst = max(float(metrics[key]) for key, _ in faults)
    said = "; ".join(f"{100 * metrics[key]:.0f}% {what}" for key, what in faults)
    return Alarm("reward_sanity", worst, (
        f"the env's rewards contradict it: {said}. Fix the env's reward or success flag, or its declared "
        "reward_range (TextEnv.reward_range, agentgym.register(..., reward_range=(lo, hi)))"))


def collapse(metrics: dict[str, Any], section: Any) -> Optional[Alarm]:
    if metrics.get("recent_success", 0.0) >= section.collapse_success_ceiling:
        return None  # a solved task may be played with certainty
    symptoms = []
    entropy, length = metrics.get("entropy_trend"), metrics.get("response_length_trend")
    if entropy is not None and entropy < section.min_entropy_ratio:
        symptoms.append((entropy, f"entropy fell to {100 * entropy:.0f}% of its start"))
    if length is not None and length < section.min_response_length_ratio:
        symptoms.append((length, f"responses shrank to {100 * length:.0f}% of their start length"))
    same = float(metrics.get("identical_group_share", 0.0))
    if same > 0 and same >= section.max_identical_group_share:
        symptoms.append((same, f"{100 * same:.0f}% of groups played the same actions in every member"))
    if not symptoms:
        return None
    return Alarm("collapse", symptoms[0][0], (
        f"the policy collapsed before solving the task ({'; '.join(s for _, s in symptoms)}; recent success "
        f"{100 * metrics.get('recent_success', 0.0):.0f}%). Sample with rollout.temperature > 0 and distinct "
        "per-request seeds, add algorithm.regularisers.entropy_coef, or lower optim.lr"))


def tool_errors(metrics: dict[str, Any], section: Any) -> Optional[Alarm]:
    share = metrics.get("tool_error_share")
    if share is None or share <= section.max_tool_error_share:
        return None
    return Alarm("tool_errors", float(share), (
        f"{100 * share:.0f}% of tool calls returned an error (limit {100 * section.max_tool_error_share:.0f}%): "
        "the model calls tools with wrong names or arguments, or a tool is broken. Read the errors in "
        "rollouts.jsonl; check that the prompt shows the tools' schemas (agentgym info ENV --policy SPEC)"))


def infra_failures(metrics: dict[str, Any], section: Any) -> Optional[Alarm]:
    share = metrics.get("infra/failed_share")
    if share is None or share <= section.max_infra_failure_share:
        return None
    return Alarm("infra_failures", float(share), (
        f"{100 * share:.0f}% of the iteration's episodes ({metrics.get('infra/failed_episodes', 0):.0f}) failed for "
        f"infrastructure reasons, not the agent's (limit {100 * section.max_infra_failure_share:.0f}%): they were left "
        "out of their groups, and what is left is no fair sample of the tasks. Fix what failed (the env server, the "
        "sandbox, the policy engine) and resume with checkpoint.resume=auto"))


def _largest(metrics: dict[str, Any], prefix: str) -> str | None:
    """The `<name>` of the largest `prefix<name>` figure, None when there is none."""
    named = {k[len(prefix):]: float(v) for k, v in metrics.items() if k.startswith(prefix) and v}
    return max(named, key=lambda k: named[k]) if named else None


def unparsed_tool_calls(metrics: dict[str, Any], section: Any) -> Optional[Alarm]:
    share = metrics.get("tool_calls_unparsed")
    if share is None or share <= section.max_unparsed_tool_call_share:
        return None
    written = _largest(metrics, "tool_calls_unparsed/") or "an unknown"
    read = _largest(metrics, "tool_format/") or "another"
    return Alarm("unparsed_tool_calls", float(share), (
        f"{100 * share:.0f}% of turns attempt a tool call that never parses (limit "
        f"{100 * section.max_unparsed_tool_call_share:.0f}%): the policy's tool-call format is {written} but the env "
        f"parses {read}, so no tool ever runs. Set rollout.tool_format={written} (or auto, to take it from the "
        "tokenizer's chat template)"))



def drop_mixed_groups(trajectories: Sequence[Any]) -> tuple[list[Any], int]:
    """The trajectories of groups whose members all start from the same first prompt (token ids) and the
    same first anchor (GiGPO's first state), and how many groups were dropped. A group of one is kept."""
    firsts: dict[int, set[Any]] = {}
    for t in trajectories:
        first = (tuple(t.turns[0].prompt_ids), repr(t.turns[0].anchor)) if t.turns else ()
        firsts.setdefault(t.group_id, set()).add(first)
    mixed = {g for g, starts in firsts.items() if len(starts) > 1}
    return [t for t in trajectories if t.group_id not in mixed], len(mixed)


GUARDS: dict[str, Callable[[dict[str, Any], Any], Optional[Alarm]]] = {
    "infra_failures": infra_failures,  # first: a broken env or engine explains the other guards' figures
    "stuck_at_start": stuck_at_start,  # before stale_weights: the same fault, with its cause named
    "stale_weights": stale_weights,
    "rollout_lag": rollout_lag,
    "no_signal": no_signal,
    "not_one_task": not_one_task,
    "token_drift": token_drift,
    "reward_sanity": reward_sanity,
    "collapse": collapse,
    "unparsed_tool_calls": unparsed_tool_calls,
    "tool_errors": tool_errors,
}


SETTING = {"rollout_lag": "stale_weights", "stuck_at_start": "stale_weights"}
"""A guard read under another guard's train.guardrails setting (the same fault, seen another way)."""

BEFORE_UPDATE = ("infra_failures", "rollout_lag", "not_one_task", "token_drift", "reward_sanity", "unparsed_tool_calls", "tool_errors")
"""The guards whose figures are known once the batch is collected: checked before the update trains on it."""
AFTER_UPDATE = tuple(name for name in GUARDS if name not in BEFORE_UPDATE)
"""The guards that read the update's own figures (the trainer's log-probs, the advantages, the trends)."""


def check(metrics: dict[str, Any], section: Any, names: Sequence[str] | None = None) -> list[tuple[Alarm, str]]:
    """(alarm, action) for every guard (of `names`, default all) that fires and is not "off"; action is
    "warn" or "stop"."""
    fired = []
    for name, guard in GUARDS.items():
        if names is not None and name not in names:
            continue
        action = getattr(section, SETTING.get(name, name), "off")  # a hand-built section without this guard's field leaves it off
        if action == "off":
            continue
        alarm = guard(metrics, section)
        if alarm is not None:
            fired.append((alarm, action))
    return fired
