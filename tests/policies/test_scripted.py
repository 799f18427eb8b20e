"""Scripted, random and oracle policies: text from the env, token ids from a ChatFormat."""
from __future__ import annotations

import pytest

from agentgym.chat import ChatFormat
from agentgym.core import TextEnv
from agentgym.policies.base import EnvContext, GenerationRequest, SamplingParams
from agentgym.policies.scripted import OraclePolicy, RandomPolicy, ScriptedPolicy
from agentgym.registration import make

CHAT = ChatFormat.simple()


def _request(env=None, obs="", info=None, max_tokens=64):
    return GenerationRequest((1, 2, 3), SamplingParams(max_tokens=max_tokens), EnvContext(env, obs, info or {}))


def test_scripted_text_is_encoded_with_its_chat_format():
    policy = ScriptedPolicy(lambda ctx: f"echo {ctx.observation}")
    [gen] = policy.generate([_request(obs="héllo")])
    assert gen.text == "echo héllo" and list(gen.token_ids) == CHAT.encode("echo héllo")
    assert gen.logprobs == (0.0,) * len(gen.token_ids) and gen.finish_reason == "stop" and gen.error is None
    assert policy.chat_format() is policy.chat and not policy.uses_tokens


def test_scripted_with_a_custom_chat_format():
    class Doubled(type(CHAT)):
        def encode(self, text):
            return super().encode(text) * 2

    [gen] = ScriptedPolicy(lambda ctx: "ab", chat=Doubled()).generate([_request()])
    assert list(gen.token_ids) == [97, 98, 97, 98]


def test_max_tokens_cuts_the_response():
    [gen] = ScriptedPolicy(lambda ctx: "abcdefgh").generate([_request(max_tokens=3)])
    assert gen.finish_reason == "length" and gen.text == "abc" and len(gen.token_ids) == 3


def test_a_raising_script_fails_only_its_request():
    def script(ctx):
        if ctx.observation == "bad":
            raise KeyError("missing")
        return "ok"

    gens = ScriptedPolicy(script).generate([_request(obs="good"), _request(obs="bad"), _request(obs="good")])
    assert [g.finish_reason for g in gens] == ["stop", "error", "stop"]
    assert "KeyError" in gens[1].error and gens[1].token_ids == ()


def test_request_without_context_is_an_error_generation():
    [gen] = ScriptedPolicy(lambda ctx: "x").generate([GenerationRequest((1,))])
    assert gen.finish_reason == "error" and "context" in gen.error


def test_scripted_needs_a_callable():
    with pytest.raises(TypeError, match="callable"):
        ScriptedPolicy("left")


def test_random_picks_admissible_actions_reproducibly():
    info = {"admissible_actions": ["left", "right", "take key"]}
    picks = [g.text for g in RandomPolicy(seed=3).generate([_request(info=info)] * 30)]
    again = [g.text for g in RandomPolicy(seed=3).generate([_request(info=info)] * 30)]
    assert picks == again and set(picks) == set(info["admissible_actions"])


def test_random_without_admissible_actions_says_something_short():
    gens = RandomPolicy(seed=0).generate([_request()] * 20)
    assert all(1 <= len(g.text) <= 12 and g.finish_reason == "stop" for g in gens)
    assert len({g.text for g in gens}) > 10


def test_oracle_asks_the_env():
    env = make("agentgym/Toy-KeyDoor-v0")
    obs, info = env.reset(seed=0)
    [gen] = OraclePolicy().generate([_request(env, obs, info)])
    assert gen.text == env.oracle_action() and gen.finish_reason == "stop"


def test_oracle_without_an_oracle_fails_the_request():
    class NoOracle(TextEnv):
        pass

    gens = OraclePolicy().generate([_request(NoOracle()), _request(object())])
    assert all(g.finish_reason == "error" for g in gens)
    assert "no action" in gens[0].error and "oracle_action" in gens[1].error


async def _agenerate(policy, requests):
    return await policy.agenerate(requests)


def test_agenerate_matches_generate():
    import asyncio

    policy = ScriptedPolicy(lambda ctx: ctx.observation.upper())
    reqs = [_request(obs="a"), _request(obs="b")]
    assert asyncio.run(_agenerate(policy, reqs)) == policy.generate(reqs)
