"""Rollouts with the real SmolLM2-135M-Instruct model (embedded GGUF) on CPU: valid trajectories,
token accounting checked against the model's own chat template. Few envs, few tokens."""
from __future__ import annotations

import math

import pytest

from agentgym.policies.base import SamplingParams
from agentgym.registration import list_envs, make
from agentgym.engine.rollout import RolloutConfig, rollout

pytestmark = [pytest.mark.model, pytest.mark.slow]


@pytest.fixture(scope="module")
def smol():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    # one intra-op thread: on a shared 2-core machine OpenMP threads that wait on each other are 10x slower
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        from agentgym.policies import load_policy
    except ImportError:  # the loader lands with the policies part; the HF policy may exist before it
        hf = pytest.importorskip("agentgym.policies.hf", reason="the hf policy is not available")
        yield hf.HFPolicy.from_pretrained("smollm2-135m-instruct")
    else:
        yield load_policy("hf:smollm2-135m-instruct")
    torch.set_num_threads(threads)


def _check(trajs, chat, tools=None, max_tokens=None):
    for traj in trajs:
        assert traj.end_reason in ("terminated", "truncated", "max_turns", "context_full"), traj.error
        assert traj.num_turns >= 1
        chat.verify_trajectory(traj, tools=tools)  # last prompt == the template's rendering, generated ids spliced
        for prev, turn in zip(traj.turns, traj.turns[1:]):
            assert turn.prompt_ids[:len(prev.prompt_ids) + len(prev.response_ids)] == \
                prev.prompt_ids + prev.response_ids
        for turn in traj.turns:
            assert 0 < len(turn.response_ids) <= max_tokens and len(turn.logprobs) == len(turn.response_ids)
            assert all(math.isfinite(lp) and lp <= 1e-4 for lp in turn.logprobs)
            assert turn.finish_reason in ("stop", "length")


def test_smollm2_on_keydoor(smol):
    chat = smol.chat_format()
    config = RolloutConfig(max_turns=2, sampling=SamplingParams(temperature=1.0, max_tokens=8, seed=0))
    trajs = rollout("agentgym/Toy-KeyDoor-v0", smol, chat, [0, 1], group_size=2, config=config)
    assert [(t.group_id, t.sample_index) for t in trajs] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    _check(trajs, chat, max_tokens=8)


def test_smollm2_on_calculator_async(smol):
    chat = smol.chat_format()
    env = make("agentgym/Toy-Calculator-v0")
    config = RolloutConfig(max_turns=2, async_mode=True, sampling=SamplingParams(max_tokens=12, seed=1))
    trajs = rollout("agentgym/Toy-Calculator-v0", smol, chat, [0, 1], config=config)
    _check(trajs, chat, tools=env.tools, max_tokens=12)
    assert '"name": "calculate"' in chat.decode(trajs[0].turns[0].prompt_ids)


def test_smollm2_on_household(smol):
    if "agentgym/Household-v0" not in list_envs():
        pytest.skip("agentgym/Household-v0 is not registered")
    chat = smol.chat_format()
    config = RolloutConfig(max_turns=2, max_observation_tokens=256, sampling=SamplingParams(max_tokens=10, seed=2))
    trajs = rollout("agentgym/Household-v0", smol, chat, [0], config=config)
    _check(trajs, chat, tools=make("agentgym/Household-v0").tools, max_tokens=10)
