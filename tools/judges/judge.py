"""LLM judges as rubric items: one episode at a time (`LLMJudge`), or a whole group at once (`GroupJudge`).

    judge = LLMJudge("openai:http://127.0.0.1:8000", parse="binary")
    rubric = Rubric([RubricItem("correct", exact_answer), RubricItem("judge", judge, 0.5)])

The prompt is a template over the episode: {question} {answer} {reference} {transcript} {instructions}.
The verdict is parsed from the reply (`score`: "Score: 7" out of `scale`; `binary`: yes/no, correct/
incorrect, pass/fail; or a regular expression with one number group) into [0, 1]. A judge that cannot
answer or whose reply cannot be parsed raises `JudgeError`; the rubric records it and scores nothing.

`GroupJudge` puts the G trajectories of one task into one prompt and asks for a score per trajectory,
as ART's RULER does: relative judgements are easier to make consistently than absolute ones, and
GRPO-style advantages only need the order within the group.
"""
from __future__ import annotations

import json
import re
import string
from typing import Any, Sequence

from agentgym.errors import ConfigError
from agentgym.rubric import Episode
from agentgym.tools.judges.client import ClientSettings, JudgeClient, JudgeError, parse_backend

DEFAULT_SYSTEM = "You are a strict, fair grader of an AI agent's work. Follow the output format exactly."
DEFAULT_PROMPT = """Grade the agent's final answer to the task.

Task:
{question}

Reference answer (may be empty):
{reference}

Agent's final answer:
{answer}

How the agent worked:
{transcript}

Give a score from 0 (wrong or missing) to 10 (fully correct). End your reply with a line "Score: N"."""
BINARY_PROMPT = """Task:
{question}

Reference answer:
{reference}

Agent's final answer:
{answer}

Is the agent's answer correct? Reply with one word: yes or no."""
GROUP_PROMPT = """Several agents attempted the same task. Compare their trajectories and score each one from 0 to 10:
higher for correct final answers reached efficiently, lower for wrong answers, errors and wasted turns.

Task:
{question}

{trajectories}

Reply with only a JSON object: {{"scores": [one number per trajectory, in order]}}"""
FIELDS = ("question", "answer", "reference", "transcript", "instructions")
_YES = {"yes", "correct", "pass", "true", "right"}
_NO = {"no", "incorrect", "fail", "false", "wrong"}


def _check_template(template: str, allowed: Sequence[str]) -> None:
    try:
        names = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise ConfigError(f"judge prompt is not a valid template: {exc}") from exc
    unknown = sorted({n for n in names if n not in allowed})
    if unknown:
        raise ConfigError(f"judge prompt uses unknown field(s) {unknown}; available: {', '.join(allowed)} "
                          "(write a literal brace as {{ or }})")


def parse_verdict(text: str, mode: str = "score", scale: float = 10.0) -> float:
    """The verdict in the reply as a number in [0, 1]; raises JudgeError when there is none."""
    if mode == "score":
        found = re.findall(r"score\s*[:=]?\s*\**\s*(-?\d+(?:\.\d+)?)\s*(?:/\s*(\d+(?:\.\d+)?))?", text, re.I)
        if found:
            value, out_of = found[-1]
            return _clip(float(value) / (float(out_of) if out_of else scale))
        bare = text.strip().rstrip(".")
        if re.fullmatch(r"-?\d+(?:\.\d+)?", bare):
            return _clip(float(bare) / scale)
        raise JudgeError(f"no 'Score: N' in the judge's reply: {text.strip()[:200]!r}")
    if mode == "binary":
        after = re.split(r"verdict\s*:", text, flags=re.I)[-1]
        words = [w for w in re.findall(r"[a-z]+", after.lower()) if w in _YES or w in _NO]
        if not words:
            raise JudgeError(f"no yes/no verdict in the judge's reply: {text.strip()[:200]!r}")
        return 1.0 if words[0] in _YES else 0.0
    match = re.search(mode, text, re.I | re.S)
    if not match or not match.groups():
        raise JudgeError(f"the judge's reply does not match {mode!r}: {text.strip()[:200]!r}")
    try:
        return _clip(float(match.group(1)) / scale)
    except ValueError:
        raise JudgeError(f"the verdict {match.group(1)!r} is not a number") from None


def parse_group_verdict(text: str, n: int, scale: float = 10.0) -> list[float]:
    """n scores in [0, 1] from a reply holding {"scores": [...]} (or lines 'Trajectory i: x')."""
    for candidate in re.findall(r"\{[^{}]*\}", text, re.S):
        try:
            scores = json.loads(candidate).get("scores")
        except (ValueError, AttributeError):
            continue
        if isinstance(scores, list) and len(scores) == n and all(isinstance(s, (int, float)) for s in scores):
            return [_clip(float(s) / scale) for s in scores]
    lines = dict(re.findall(r"trajectory\s*(\d+)\s*[:=\-]\s*(-?\d+(?:\.\d+)?)", text, re.I))
    if all(str(i) in lines for i in range(1, n + 1)):
        return [_clip(float(lines[str(i)]) / scale) for i in range(1, n + 1)]
    raise JudgeError(f"no {n} scores in the judge's reply: {text.strip()[:200]!r}")


def _clip(value: float) -> float:
    return min(1.0, max(0.0, value))


class _Asking:
    """What both judges share: a backend behind the shared, cached, bounded client."""

    def __init__(self, model: Any, model_name: str | None, temperature: float, max_tokens: int, timeout_s: float,
                 retries: int, max_concurrency: int, cache: bool, cache_path: str | None, system: str):
        self.client = JudgeClient.shared(parse_backend(model, model_name),
                                         ClientSettings(max_concurrency, timeout_s, retries, 0.5, cache_path))
        self.temperature, self.max_tokens, self.cache, self.system = temperature, max_tokens, cache, system

    def _ask(self, user: str) -> str:
        messages = ([{"role": "system", "content": self.system}] if self.system else []) + \
                   [{"role": "user", "content": user}]
        return self.client.ask(messages, self.temperature, self.max_tokens, self.cache)


class LLMJudge(_Asking):
    """A rubric reward function scored by a judge model (see the module docstring)."""

    def __init__(self, model: Any = "openai:http://127.0.0.1:8000", prompt: str | None = None,
                 parse: str = "score", scale: float = 10.0, system: str = DEFAULT_SYSTEM,
                 model_name: str | None = None, temperature: float = 0.0, max_tokens: int = 256,
                 timeout_s: float = 60.0, retries: int = 2, max_concurrency: int = 4, cache: bool = True,
                 cache_path: str | None = None, transcript_chars: int = 6000):
        super().__init__(model, model_name, temperature, max_tokens, timeout_s, retries, max_concurrency, cache,
                         cache_path, system)
        self.prompt = prompt or (BINARY_PROMPT if parse == "binary" else DEFAULT_PROMPT)
        _check_template(self.prompt, FIELDS)
        if parse not in ("score", "binary"):
            try:
                if re.compile(parse).groups < 1:
                    raise ConfigError(f"judge parse regex {parse!r} needs one group that captures the number")
            except re.error as exc:
                raise ConfigError(f"judge parse is 'score', 'binary' or a regex; {parse!r} is neither ({exc})") from exc
        if not scale > 0:
            raise ConfigError(f"judge scale must be > 0, got {scale}")
        self.parse, self.scale, self.transcript_chars = parse, scale, transcript_chars

    def render(self, episode: Episode) -> str:
        return self.prompt.format(question=episode.task, answer=episode.answer or "(no final answer)",
                                  reference=episode.reference or "", instructions=episode.instructions,
                                  transcript=episode.transcript(self.transcript_chars))

    def __call__(self, episode: Episode) -> float:
        return parse_verdict(self._ask(self.render(episode)), self.parse, self.scale)


class GroupJudge(_Asking):
    """Scores the G episodes of one task in one judge call, relative to each other (RULER-style)."""

    def __init__(self, model: Any = "openai:http://127.0.0.1:8000", prompt: str = GROUP_PROMPT,
                 scale: float = 10.0, system: str = DEFAULT_SYSTEM, model_name: str | None = None,
                 temperature: float = 0.0, max_tokens: int = 512, timeout_s: float = 120.0, retries: int = 2,
                 max_concurrency: int = 4, cache: bool = True, cache_path: str | None = None,
                 transcript_chars: int = 3000):
        super().__init__(model, model_name, temperature, max_tokens, timeout_s, retries, max_concurrency, cache,
                         cache_path, system)
        _check_template(prompt, ("question", "trajectories"))
        self.prompt, self.scale, self.transcript_chars = prompt, scale, transcript_chars

    def render(self, episodes: Sequence[Episode]) -> str:
        blocks = []
        for i, ep in enumerate(episodes, 1):
            body = "\n\n".join(f"AGENT:\n{s.action}\n\nENVIRONMENT:\n{s.observation}" for s in ep.steps)
            if len(body) > self.transcript_chars:
                body = body[: self.transcript_chars // 2] + "\n[...]\n" + body[-self.transcript_chars // 2:]
            blocks.append(f"### Trajectory {i}\n{body}\n\nFinal answer: {ep.answer or '(none)'}")
        return self.prompt.format(question=episodes[0].task if episodes else "", trajectories="\n\n".join(blocks))

    def score_group(self, episodes: Sequence[Episode]) -> list[float]:
        """One score in [0, 1] per episode, in order; raises JudgeError when the judge gives no usable answer."""
        if not episodes:
            return []
        return parse_group_verdict(self._ask(self.render(episodes)), len(episodes), self.scale)
