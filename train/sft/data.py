"""Behaviour-cloning samples, built with the same chat format, layout and token code as RL rollouts.

Three sources, one result (`train.samples.Sample`s whose mask covers the assistant's tokens only):
- `expert_samples`: an expert plays the env through `agentgym.engine.rollout` itself (an `ExpertPolicy`
  answers each turn with the env's `expert_action()` or `oracle_action()` text, tokenized by the
  model's chat format and closed with the end-of-turn token), and `build_samples` turns the successful
  episodes into samples: the same code path as an RL batch.
- `trajectory_file_episodes`: the successful episodes of an eval's `trajectories.jsonl`.
- `transcript_episodes`: a JSONL of chats, one {"messages": [{"role", "content"}, ...]} per line.
The last two are re-encoded from their text with `encode_episode`, which mirrors the rollout engine
(`initial_prompt`, response ids, `turn_suffix`, the step layout's history window); a test checks that it
gives the same ids as a rollout.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from agentgym.action_templates import template_parts, written_into
from agentgym.errors import ConfigError
from agentgym.policies.base import Generation, GenerationRequest
from agentgym.policy import Choice
from agentgym.policies.scripted import ScriptedPolicy
from agentgym.train.batch import Sample
from agentgym.train.samples import build_samples
from agentgym.engine.rollout import window_message
from agentgym.trajectory import Trajectory


@dataclass(frozen=True)
class Episode:
    """A conversation to clone: observations[k] is what action k answered."""

    system: str
    observations: tuple[str, ...]
    actions: tuple[str, ...]
    tools: tuple[Any, ...] = ()
    task: str = ""  # step layout: restated once the first observation leaves the window ("" = never)


def expert_command(env: Any, which: str) -> str | None:
    """The fair expert's command where the env has one (and `which` is "fair"), else the oracle's."""
    base = getattr(env, "unwrapped", env)
    if which == "fair" and callable(getattr(base, "expert_action", None)):
        return base.expert_action()
    oracle = getattr(base, "oracle_action", None)
    if not callable(oracle):
        raise ConfigError(f"{type(base).__name__} has no oracle_action() or expert_action(): expert demonstrations "
                          "need one; clone an eval's trajectories (sft.source=trajectories) instead")
    return oracle()


class ExpertPolicy(ScriptedPolicy):
    """Answers with the expert's text, tokenized by `chat` and closed with its end-of-turn token, as a
    model's generation ends (so the cloned model learns to stop)."""

    def __init__(self, chat: Any, which: str = "fair", choices: bool = False, noise: float = 0.0,
                 seed: int = 0):
        super().__init__(lambda ctx: expert_command(ctx.env, which), chat)
        # sft.objective=choice: each generation carries a Choice (every admissible action's ids, the expert's
        # index as the label), as an AdmissiblePolicy's do, so the turn says what it chose among
        self.choices = choices
        # sft.expert_noise: play a random admissible action this often but keep the expert's as the label,
        # so the clone also sees (and learns to leave) the states its own mistakes lead to
        self.noise = float(noise)
        self._rng = random.Random(seed)

    def _one(self, request: GenerationRequest) -> Generation:
        gen = super()._one(request)
        end = self.chat.end_of_turn_id
        if gen.finish_reason != "stop" or end is None:
            return gen
        gen = Generation((*gen.token_ids, end), gen.text, (*gen.logprobs, 0.0), "stop")
        if not self.choices:
            return gen
        listed = [str(a) for a in (request.context.info or {}).get("admissible_actions") or ()]
        # an expert's text that fills a template (the shop's search[<query>]) is the written candidate, as the
        # admissible policy's own writing is (policies/admissible.py); other templates are not candidates
        filled = written_into(listed, gen.text)
        written = filled[1] if filled is not None else None
        actions = [a for i, a in enumerate(filled[0] if filled else listed)
                   if i == written or template_parts(a) is None]
        written = None if written is None else actions.index(gen.text)
        cands = tuple(tuple(self.chat.encode(a) + [end]) for a in actions)
        if tuple(gen.token_ids) not in cands:  # an expert move outside the list teaches no choice
            return gen
        label = cands.index(tuple(gen.token_ids))
        if len(cands) > 1 and self._rng.random() < self.noise:
            other = self._rng.choice([i for i in range(len(cands)) if i != label])
            return Generation(cands[other], actions[other], (0.0,) * len(cands[other]), "stop",
                              choice=Choice(cands, other, label, written=written))
        return replace(gen, choice=Choice(cands, label, written=written))


def rollout_config(config: Any, max_turns: int | None, chat: Any) -> Any:
    """The RL rollout's layout, history window and token limits (greedy: the expert ignores sampling)."""
    return config.rollout.engine_config(temperature=0.0, stop=chat.stop_strings, max_turns=max_turns,
                                        executor="serial")


def expert_trajectories(config: Any, chat: Any, expert: ExpertPolicy | None = None) -> list[Trajectory]:
    """Play `sft.episodes` expert episodes of rollout.env on `sft.split`; all of them, successful or not."""
    from agentgym.engine.rollout import rollout

    s = config.sft
    seeds = list(range(s.seed_start, s.seed_start + s.episodes))
    max_turns = s.max_turns or config.rollout.max_turns
    return rollout(config.rollout.env, expert or ExpertPolicy(chat, s.expert), chat, seeds, 1,
                   rollout_config(config, max_turns, chat), env_kwargs=dict(config.rollout.env_kwargs) or None,
                   reset_options={"split": s.split})


def uncut(trajectory: Trajectory) -> bool:
    """Every action of the episode fit in rollout.max_new_tokens (a cut one is not a demonstration)."""
    return bool(trajectory.turns) and all(k.finish_reason != "length" for k in trajectory.turns)


def successful(trajectories: Sequence[Trajectory]) -> list[Trajectory]:
    """Solved, uncut episodes."""
    return [t for t in trajectories if t.success and uncut(t)]


def expert_samples(config: Any, chat: Any) -> tuple[list[Sample], dict[str, float]]:
    trajs = expert_trajectories(config, chat)
    good = successful(trajs)
    stats = {"demo_episodes": float(len(trajs)), "demo_success": len(good) / max(len(trajs), 1),
             "demo_skipped": float(len(trajs) - len(good)),
             "demo_turns": float(np.mean([t.num_turns for t in good])) if good else 0.0}
    return build_samples(good, config.rollout.layout), stats


def expert_choice_sequences(config: Any, chat: Any) -> tuple[list[Any], dict[str, float]]:
    """sft.objective=choice: the demonstrations as `ChoiceSequence`s, each turn with the admissible actions the
    expert chose among and its label (the turn's Choice, which RL's choice update reads as well)."""
    from agentgym.train.updaters.choice_ppo import choice_sequences

    s = config.sft
    expert = ExpertPolicy(chat, s.expert, choices=True, noise=s.expert_noise, seed=s.seed_start)
    trajs = expert_trajectories(config, chat, expert)
    good = successful(trajs)
    # sft.failed_demos=keep: the expert's label is right in every state it saw, so failed (e.g. noisy) episodes
    # teach too; skip (the default): an episode the expert could not finish is no demonstration
    kept = good if s.failed_demos == "skip" else [t for t in trajs if uncut(t)]
    seqs = choice_sequences(kept, config.rollout.layout, use_labels=True)
    turns = sum(len(s.turns) for s in seqs)
    stats = {"demo_episodes": float(len(trajs)), "demo_success": len(good) / max(len(trajs), 1),
             "demo_skipped": float(len(trajs) - len(kept)),
             "demo_turns": float(np.mean([t.num_turns for t in good])) if good else 0.0,
             "choice_turns": float(turns),
             "candidates_per_turn": sum(len(t.candidates) for s in seqs for t in s.turns) / max(turns, 1)}
    if not seqs and trajs and not good and s.failed_demos == "skip":
        raise ConfigError(f"sft: no expert episode succeeded, so none was cloned ({stats}); give the expert more "
                          "turns (sft.max_turns) or check the env's expert_action, or sft.failed_demos=keep")
    if not seqs:
        raise ConfigError(f"sft.objective=choice: no demonstration turn chose among admissible actions ({stats}); "
                          f"does {config.rollout.env} list info['admissible_actions']? Else use sft.objective=tokens")
    return seqs, stats


# ---------------------------------------------------------------------------------------------- text sources
def episode_of(trajectory: Trajectory) -> Episode:
    return Episode(trajectory.system_prompt, tuple(t.observation for t in trajectory.turns),
                   tuple(t.action for t in trajectory.turns), task=trajectory.task)


def trajectory_file_episodes(path: str | Path) -> tuple[list[Episode], dict[str, float]]:
    """Successful episodes of an eval's trajectories.jsonl (rejection-sampling fine-tuning)."""
    p = Path(path)
    p = p / "trajectories.jsonl" if p.is_dir() else p
    if not p.is_file():
        raise ConfigError(f"sft.path={str(path)!r}: no trajectories.jsonl there; pass an eval's --out dir or the file")
    trajs, bad = [], 0
    for line in p.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            trajs.append(Trajectory.from_dict(d.get("trajectory", d)))
        except (ValueError, TypeError, KeyError, AttributeError):
            bad += 1  # a line cut by a killed eval, or not a trajectory
    good = successful(trajs)
    return [episode_of(t) for t in good], {"demo_episodes": float(len(trajs)),
                                          "demo_success": len(good) / max(len(trajs), 1),
                                          "bad_lines": float(bad)}


def transcript_episodes(path: str | Path) -> tuple[list[Episode], dict[str, float]]:
    """Chats as {"messages": [...]} (or a bare list) per line: an optional system message, then user and
    assistant turns; every assistant message is a target. Lines that are not such chats are counted."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"sft.path={str(path)!r} is not a file; pass a JSONL of {{\"messages\": [...]}} chats")
    episodes, bad = [], 0
    for line in p.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            episodes.append(_chat_episode(d.get("messages") if isinstance(d, dict) else d))
        except (ValueError, TypeError, KeyError, AttributeError):
            bad += 1
    return episodes, {"demo_episodes": float(len(episodes)), "bad_lines": float(bad)}


def _chat_episode(messages: list[dict[str, Any]]) -> Episode:
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    rest = messages[1:] if system or (messages and messages[0]["role"] == "system") else messages
    obs, acts = [], []
    for m in rest:
        role, content = m["role"], str(m["content"])
        if role == "user":
            if len(obs) > len(acts):  # two user turns in a row read as one
                obs[-1] += "\n" + content
            else:
                obs.append(content)
        elif role == "assistant" and len(obs) == len(acts) + 1:
            acts.append(content)
        else:
            raise ValueError(f"unexpected {role} message")
    if not acts:
        raise ValueError("no assistant message")
    return Episode(system, tuple(obs[:len(acts)]), tuple(acts))


def encode_episode(chat: Any, episode: Episode, layout: str, history_turns: int = 2,
                   max_observation_tokens: int | None = None) -> list[Sample]:
    """Samples of one episode, token for token as the rollout engine would build them."""
    obs = [chat.truncate_observation(o, max_observation_tokens) for o in episode.observations]
    end = chat.end_of_turn_id
    responses = [chat.encode(a) + ([end] if end is not None else []) for a in episode.actions]
    suffixes = [chat.turn_suffix(r, o) for r, o in zip(responses, obs[1:])]
    tools = list(episode.tools) or None
    if layout == "trajectory":
        ids, row = list(chat.initial_prompt(episode.system, obs[0], tools)), []
        row = [-1] * len(ids)
        for k, resp in enumerate(responses):
            ids += resp
            row += [k] * len(resp)
            if k < len(suffixes):
                ids += suffixes[k]
                row += [-1] * len(suffixes[k])
        return [_sample(ids, row)]
    if layout != "step":
        raise ValueError(f"layout must be 'trajectory' or 'step', got {layout!r}")
    samples = []
    for k, resp in enumerate(responses):
        start = max(0, k - history_turns)
        ids = list(chat.initial_prompt(episode.system, window_message(episode.task, obs[start], start), tools))
        for j in range(start, k):
            ids += responses[j] + suffixes[j]
        samples.append(_sample(ids + resp, [-1] * len(ids) + [k] * len(resp)))
    return samples


def _sample(ids: list[int], row: list[int]) -> Sample:
    return Sample(np.asarray(ids, dtype=np.int64), np.asarray(row, dtype=np.int64), np.zeros(len(ids)))


def build_sft_samples(config: Any, chat: Any, tools: Sequence[Any] = ()) -> tuple[list[Sample], dict[str, float]]:
    """The samples `config.sft` asks for, and statistics about the source."""
    s, r = config.sft, config.rollout
    if s.source == "expert":
        samples, stats = expert_samples(config, chat)
    else:
        load = trajectory_file_episodes if s.source == "trajectories" else transcript_episodes
        episodes, stats = load(s.path)
        tools = tuple(tools) if s.source == "trajectories" else ()
        samples = [x for ep in episodes
                   for x in encode_episode(chat, Episode(ep.system, ep.observations, ep.actions, tools,
                                                         task=ep.observations[0] if r.keep_task else ""),
                                           r.layout, r.history_turns, r.max_observation_tokens)]
    if not samples:
        raise ConfigError(f"sft: the {s.source} source gave no successful episode to clone ({stats}); "
                          "play more episodes (sft.episodes), raise sft.max_turns, or check sft.path")
    return samples, stats
