"""An outside agent harness for the gateway's worked example: written only against the official `openai`
client and the standard library (no agentgym import), as a user's own agent would be.

It plays its own key-door game (a corridor of rooms; take the key where you start, walk to the door, open
it) in its own loop: the game state goes to the model as a user message, the model's reply is the command,
the reply is appended to the conversation as the assistant message, and so on for at most `max_turns`
turns. It reports each reward on the call that earned it (POST /v1/sessions/ID/reward with call -1: taking
the key 0.5, opening the door 1.0), closes its session (POST /v1/sessions/ID/close, saying whether the door
opened) and, run as a program, prints its total.

    python tests/gateway/harness_keydoor.py --base-url http://127.0.0.1:8030/v1 --api-key SESSION --task '{"seed": 3}'

The words are those of the tiny test model's vocabulary (train/tiny.py), so a random tiny model already
says a command now and then.
"""
from __future__ import annotations

import argparse
import json
import random
import urllib.request
from typing import Any

from openai import OpenAI

SYSTEM = "take the key , then open the door : left , right , take or open ."
KEY_BONUS, DOOR_REWARD = 0.5, 1.0


class Game:
    """A corridor of `length` rooms; the key lies where the agent starts, the door is in another room."""

    def __init__(self, seed: int, length: int = 2):
        rng = random.Random(seed)
        self.length, self.pos = length, rng.randrange(length)
        self.door = rng.choice([r for r in range(length) if r != self.pos])
        self.key_here, self.holding, self.done = True, False, False

    def describe(self) -> str:
        parts = [f"room {self.pos} ."]
        parts.append("key here ." if self.key_here and not self.holding else ("hold key ." if self.holding else "empty ."))
        parts.append("door here ." if self.pos == self.door else f"door {'left' if self.door < self.pos else 'right'} .")
        return " ".join(parts)

    def step(self, reply: str) -> float:
        words = reply.lower().split()
        word = words[0] if words else ""
        if word == "take" and self.key_here and not self.holding:
            self.holding = True
            return KEY_BONUS
        if word == "open" and self.pos == self.door and self.holding:
            self.done = True
            return DOOR_REWARD
        if word in ("left", "right"):
            self.pos = min(self.length - 1, max(0, self.pos + (1 if word == "right" else -1)))
        return 0.0


def play(base_url: str, api_key: str, task: dict[str, Any], max_turns: int = 6, temperature: float = 1.0,
         report: bool = True, seed: int | None = None) -> dict[str, Any]:
    """One episode through the endpoint; returns the reward, success and what each call returned (its text
    and, where the server gives them, its token ids). With `seed`, turn t's call asks for seed
    `seed * 1000 + t` (OpenAI's `seed`): its sample then depends on the seed and the model alone, not on which
    other sessions' calls share its batch."""
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=2, timeout=120)
    game = Game(int(task.get("seed", 0)), int(task.get("length", 2)))
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": game.describe()}]
    reward, returned = 0.0, []
    for turn in range(int(task.get("max_turns", max_turns))):
        answer = client.chat.completions.create(model="agentgym", messages=messages, max_tokens=int(task.get("max_tokens", 1)),
                                                temperature=temperature, seed=None if seed is None else seed * 1000 + turn)
        choice = answer.choices[0]
        reply = choice.message.content or ""
        returned.append({"text": reply, "token_ids": (choice.model_extra or {}).get("token_ids")})
        gained = game.step(reply)
        if gained and report:  # the reward of the call that earned it (-1: the session's last call)
            _post(f"{base_url}/sessions/{api_key}/reward", {"reward": gained, "call": -1})
        reward += gained
        messages.append({"role": "assistant", "content": reply})
        if game.done:
            break
        messages.append({"role": "user", "content": game.describe()})
    if report:  # the calls hold the rewards; the session adds none and says whether the door opened
        _post(f"{base_url}/sessions/{api_key}/close", {"reward": 0.0, "success": game.done})
    return {"reward": reward, "success": game.done, "calls": returned}


def run(h: Any) -> float:
    """The harness as a config names it (gateway.harness=harness_keydoor:run): one seeded episode of the task
    the run is handed (`h`: its base_url, api_key, task, seed and sample), returning its reward."""
    return play(h.base_url, h.api_key, h.task, seed=h.seed * 100 + h.sample)["reward"]


def tasks(seed: int) -> dict[str, Any]:
    """gateway.tasks=harness_keydoor:tasks: the task a seed names."""
    return {"seed": seed, "max_turns": 8}


def _post(url: str, body: dict[str, Any]) -> None:
    """The gateway's session endpoints are not part of the OpenAI API: plain HTTP."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=30).read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--task", default="{}", help="JSON: seed, length, max_tokens, max_turns")
    args = parser.parse_args()
    out = play(args.base_url, args.api_key, json.loads(args.task))
    print(json.dumps({"reward": out["reward"], "success": out["success"]}))


if __name__ == "__main__":
    main()
