"""The rollout engine with scripted/oracle/random policies on the toy envs."""
from __future__ import annotations

import threading
import time
import zlib
from typing import Any

import pytest

import agentgym
from agentgym.chat import TRUNCATION_MARKER, ChatFormat
from agentgym.core import TextEnv, make_info
from agentgym.errors import ConfigError
from agentgym.policies.base import BasePolicy, Generation, SamplingParams
from agentgym.policies.scripted import OraclePolicy, RandomPolicy, ScriptedPolicy
from agentgym.registration import make
from agentgym.engine.rollout import RolloutConfig, rollout

KEYDOOR, CALC = "agentgym/Toy-KeyDoor-v0", "agentgym/Toy-Calculator-v0"
CHAT = ChatFormat.simple()


class Recording(BasePolicy):
    """Wraps a policy and records every batch it is asked for."""

    uses_tokens = False

    def __init__(self, inner: Any):
        self.inner, self.batches, self.lock = inner, [], threading.Lock()

    def generate(self, requests):
        with self.lock:
            self.batches.append(list(requests))
        return self.inner.generate(requests)


class SlowEnv(TextEnv):
    """Counts to 3; seed 0 steps slowly. Module-level so the process executor can build it."""

    def __init__(self, fail_on_seed: int | None = None):
        self.fail_on_seed, self.seed_, self.t = fail_on_seed, 0, 0

    def reset(self, *, seed=None, options=None):
        self.seed_, self.t = seed or 0, 0
        return f"start {self.seed_}", make_info(task_id=f"slow-{self.seed_}")

    def step(self, action):
        if self.seed_ == self.fail_on_seed:
            raise RuntimeError("boom in step")
        if self.seed_ == 0:
            time.sleep(0.2)
        self.t += 1
        done = self.t >= 3
        return f"t={self.t}", float(done), done, False, make_info(success=done)


def _oracle_text(ctx):
    return ctx.env.oracle_action()


# ------------------------------------------------------------------------------------------ structure

def test_groups_seeds_and_order():
    seeds = [3, 7, 11]
    trajs = rollout(KEYDOOR, OraclePolicy(), CHAT, seeds, group_size=2, start_group_id=10)
    assert [(t.group_id, t.sample_index, t.seed) for t in trajs] == [
        (10, 0, 3), (10, 1, 3), (11, 0, 7), (11, 1, 7), (12, 0, 11), (12, 1, 11)]
    for a, b in zip(trajs[::2], trajs[1::2]):  # one group = one task
        assert a.task_id == b.task_id and a.first_observation == b.first_observation
    assert all(t.success and t.end_reason == "terminated" and t.total_reward == 1.0 for t in trajs)
    assert all(t.env_id == KEYDOOR and t.system_prompt == make(KEYDOOR).instructions for t in trajs)


def test_token_accounting_trajectory_layout():
    trajs = rollout(KEYDOOR, RandomPolicy(seed=1), CHAT, [0, 1], group_size=2, config=RolloutConfig(max_turns=6))
    for traj in trajs:
        CHAT.verify_trajectory(traj)  # the last prompt == tokenization of the rendered conversation
        for prev, turn in zip(traj.turns, traj.turns[1:]):
            grown = prev.prompt_ids + prev.response_ids
            assert turn.prompt_ids[:len(grown)] == grown  # the response of turn t starts at len(prompt_t)
            assert turn.prompt_ids[len(grown):] == tuple(CHAT.turn_suffix(prev.response_ids, turn.observation))
        for turn in traj.turns:
            assert CHAT.decode(turn.response_ids) == turn.action
            assert len(turn.logprobs) == len(turn.response_ids)
            assert turn.valid or turn.action == "open door"  # admissible; a locked door needs the key
        assert traj.turns[0].prompt_ids == tuple(CHAT.initial_prompt(traj.system_prompt, traj.first_observation))


def test_turn_records_anchor_rewards_and_timings():
    env = make(KEYDOOR)
    obs0, info0 = env.reset(seed=5)
    [traj] = rollout(KEYDOOR, OraclePolicy(), CHAT, [5])
    first = traj.turns[0]
    assert first.observation == obs0 and first.anchor == info0["anchor"]  # the state acted from
    for prev, turn in zip(traj.turns, traj.turns[1:]):
        assert turn.observation in str(turn.anchor) or turn.anchor != prev.anchor
    last = traj.turns[-1]
    assert last.terminated and last.reward == 1.0 and last.reward_components == {"outcome": 1.0}
    assert all(t.generate_s >= 0 and t.env_s >= 0 and t.finish_reason == "stop" for t in traj.turns)
    assert traj.wall_s > 0 and traj.turns[-1].info["success"] is True


def test_tool_env_with_tools_in_system_prompt():
    env = make(CALC)
    trajs = rollout(CALC, OraclePolicy(), CHAT, [0, 1], group_size=2)
    assert all(t.success and t.num_turns == 1 for t in trajs)
    text = CHAT.decode(trajs[0].turns[0].prompt_ids)
    assert '"name": "calculate"' in text and "<tool_call>" in text
    CHAT.verify_trajectory(trajs[0], tools=env.tools)


def test_tool_results_and_final_observation_are_recorded():
    calls = iter(['<tool_call>{"name": "calculate", "arguments": {"expression": "6 * 7"}}</tool_call>',
                  '<tool_call>{"name": "nope", "arguments": {}}</tool_call>', "<answer>0</answer>"])
    [traj] = rollout(CALC, ScriptedPolicy(lambda ctx: next(calls)), CHAT, [0])
    first, second, last = traj.turns
    assert first.info["tool_results"] == [{"name": "calculate", "ok": True, "arguments": {"expression": "6 * 7"},
                                           "output": "42"}]
    assert second.info["tool_results"][0]["ok"] is False and "unknown tool" in second.info["tool_results"][0]["output"]
    assert "tool_results" not in last.info                      # an <answer> tag calls no tool
    assert traj.final_observation == "Answer received." and not traj.success
    assert type(traj).from_dict(traj.to_dict()).final_observation == "Answer received."


def test_max_turns_override_and_registered_limit():
    never = ScriptedPolicy(lambda ctx: "left")
    trajs = rollout(KEYDOOR, never, CHAT, [0], group_size=2, config=RolloutConfig(max_turns=3))
    assert all(t.num_turns == 3 and t.end_reason == "max_turns" and not t.success for t in trajs)
    [traj] = rollout(KEYDOOR, never, CHAT, [0])
    assert traj.num_turns == 10 and traj.end_reason == "max_turns"  # the registered limit


def test_one_batch_per_turn_and_distinct_sampling_seeds():
    policy = Recording(RandomPolicy(seed=0))
    config = RolloutConfig(max_turns=2, sampling=SamplingParams(seed=123, max_tokens=16))
    rollout(KEYDOOR, policy, CHAT, [0, 1], group_size=4, config=config)
    assert [len(b) for b in policy.batches] == [8, 8]  # every active env, one generate call per turn
    seeds = [r.sampling.seed for b in policy.batches for r in b]
    assert len(set(seeds)) == 16 and all(r.sampling.max_tokens == 16 for b in policy.batches for r in b)


def test_on_trajectory_gets_each_trajectory_once():
    seen = []
    trajs = rollout(KEYDOOR, OraclePolicy(), CHAT, [0, 1, 2], group_size=2, on_trajectory=seen.append)
    assert sorted((t.group_id, t.sample_index) for t in seen) == [(t.group_id, t.sample_index) for t in trajs]


# ------------------------------------------------------------------------------------------ endings & failures

def test_failing_request_fails_only_its_episode():
    bad_task = make(KEYDOOR).reset(seed=2)[1]["task_id"]

    def script(ctx):
        if ctx.info.get("task_id") == bad_task:
            raise ValueError("no idea")
        return ctx.env.oracle_action()

    trajs = rollout(KEYDOOR, ScriptedPolicy(script), CHAT, list(range(6)))
    failed = [t for t in trajs if t.end_reason == "failed"]
    assert [t.task_id == bad_task for t in trajs] == [t.end_reason == "failed" for t in trajs]
    assert failed and len(failed) < len(trajs)
    assert all("no idea" in t.error for t in failed)
    assert all(t.success for t in trajs if t.end_reason != "failed")


class RaisingPolicy(BasePolicy):
    """Raises for the whole batch when any request is for seed 1's task; errors out seed 2's."""

    def __init__(self):
        self.inner = OraclePolicy()

    def generate(self, requests):
        if any("poison" in r.context.observation for r in requests):
            raise ConnectionError("server died")
        return [Generation((), "", (), "error", "bad request") if "error" in r.context.observation
                else self.inner.generate([r])[0] for r in requests]


class TaggedKeyDoor(TextEnv):
    def __init__(self):
        self.env = make(KEYDOOR)

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed)
        return obs + {1: " poison", 2: " error"}.get(seed, ""), info

    def step(self, action):
        return self.env.step(action)

    def oracle_action(self):
        return self.env.oracle_action()


@pytest.mark.parametrize("async_mode", [False, True])
def test_policy_exception_and_error_generation_are_isolated(async_mode):
    config = RolloutConfig(max_turns=10, async_mode=async_mode)
    trajs = rollout(TaggedKeyDoor, RaisingPolicy(), CHAT, [0, 1, 2, 3], config=config)
    assert [t.end_reason for t in trajs] == ["terminated", "failed", "failed", "terminated"]
    assert "server died" in trajs[1].error and "bad request" in trajs[2].error
    assert trajs[0].success and trajs[3].success


@pytest.mark.parametrize("executor", ["thread", "serial", "process"])
def test_env_exception_fails_only_its_episode(executor):
    config = RolloutConfig(max_turns=5, executor=executor, env_workers=2)
    trajs = rollout(SlowEnv, ScriptedPolicy(lambda ctx: "go"), CHAT, [1, 2, 3],
                    config=config, env_kwargs={"fail_on_seed": 2})
    assert [t.end_reason for t in trajs] == ["terminated", "failed", "terminated"]
    assert "boom in step" in trajs[1].error


def test_hanging_env_times_out_instead_of_hanging():
    class Hang(SlowEnv):
        def step(self, action):
            if self.seed_ == 1:
                time.sleep(2.0)
            return super().step(action)

    t0 = time.perf_counter()
    trajs = rollout(Hang, ScriptedPolicy(lambda ctx: "go"), CHAT, [1, 2],
                    config=RolloutConfig(max_turns=5, env_timeout_s=0.3))
    assert time.perf_counter() - t0 < 1.5  # well before the hung step would have returned
    assert trajs[0].end_reason == "failed" and "longer than 0.3s" in trajs[0].error
    assert trajs[1].end_reason == "terminated"


def test_context_full_ends_the_episode():
    max_tokens, limit = 16, 400
    config = RolloutConfig(max_context_tokens=limit, sampling=SamplingParams(max_tokens=max_tokens))
    [traj] = rollout(KEYDOOR, ScriptedPolicy(lambda ctx: "left"), CHAT, [0], config=config)
    assert traj.end_reason == "context_full" and 0 < traj.num_turns < 10
    assert all(len(t.prompt_ids) + max_tokens <= limit for t in traj.turns)
    next_prompt = traj.turns[-1].prompt_ids + traj.turns[-1].response_ids
    assert len(next_prompt) + max_tokens > limit - 120  # it stopped because the next turn would not fit


def test_the_policys_own_context_caps_the_configured_one():
    policy = OraclePolicy()
    policy.max_context = 300
    config = RolloutConfig(max_context_tokens=8192, sampling=SamplingParams(max_tokens=16))
    [traj] = rollout(KEYDOOR, policy, CHAT, [0], config=config)
    assert traj.end_reason == "context_full" and all(len(t.prompt_ids) + 16 <= 300 for t in traj.turns)


def test_prompt_too_long_for_even_one_turn():
    [traj] = rollout(KEYDOOR, OraclePolicy(), CHAT, [0], config=RolloutConfig(max_context_tokens=50))
    assert traj.end_reason == "context_full" and traj.num_turns == 0


def test_scripted_response_is_cut_at_max_tokens():
    config = RolloutConfig(max_turns=1, sampling=SamplingParams(max_tokens=4))
    [traj] = rollout(KEYDOOR, ScriptedPolicy(lambda ctx: "open door please"), CHAT, [0], config=config)
    turn = traj.turns[0]
    assert turn.finish_reason == "length" and turn.action == "open" and len(turn.response_ids) == 4
    assert not turn.valid


def test_observations_truncated_by_tokens_with_marker():
    config = RolloutConfig(max_observation_tokens=12)
    [traj] = rollout(KEYDOOR, OraclePolicy(), CHAT, [0], config=config)
    assert traj.first_observation.endswith("tokens]") and TRUNCATION_MARKER.format("")[:-8] in traj.first_observation
    assert all(len(CHAT.encode(t.observation.split("…[")[0])) <= 12 for t in traj.turns)
    assert traj.success  # the oracle reads the env, not the truncated text


# ------------------------------------------------------------------------------------------ layouts & modes

@pytest.mark.parametrize("k", [0, 1, 2])
def test_step_layout_history_window(k):
    config = RolloutConfig(layout="step", history_turns=k)
    [traj] = rollout("agentgym/Toy-KeyDoor-Long-v0", OraclePolicy(), CHAT, [4], config=config)
    assert traj.success and traj.num_turns > k + 1
    turns = traj.turns
    for t, turn in enumerate(turns):
        start = max(0, t - k)  # the task (the first observation) is restated once it has left the window
        first = turns[start].observation if start == 0 else \
            f"{traj.first_observation}\n\n[{start} earlier turn(s) not shown]\n\n{turns[start].observation}"
        expected = CHAT.initial_prompt(traj.system_prompt, first)
        for j in range(start, t):  # rebuilt from recorded pieces: responses are never re-tokenized
            expected = CHAT.continue_prompt(expected, turns[j].response_ids, turns[j + 1].observation)
        assert turn.prompt_ids == tuple(expected)
    full = rollout("agentgym/Toy-KeyDoor-Long-v0", OraclePolicy(), CHAT, [4])[0]
    assert len(turns[-1].prompt_ids) < len(full.turns[-1].prompt_ids)
    assert [t.action for t in turns] == [t.action for t in full.turns]


def test_async_mode_matches_sync_for_a_deterministic_policy():
    sync = rollout(KEYDOOR, OraclePolicy(), CHAT, [0, 1, 2], group_size=2)
    asyn = rollout(KEYDOOR, OraclePolicy(), CHAT, [0, 1, 2], group_size=2, config=RolloutConfig(async_mode=True))
    assert [t.to_dict()["turns"][-1]["prompt_ids"] for t in sync] == [t.to_dict()["turns"][-1]["prompt_ids"]
                                                                      for t in asyn]
    assert [(t.group_id, t.sample_index, t.end_reason) for t in sync] == [
        (t.group_id, t.sample_index, t.end_reason) for t in asyn]


class CountedKeyDoor:
    """A KeyDoor factory that counts the envs it builds and the most alive at once."""

    def __init__(self):
        self.built = self.alive = self.most_alive = 0
        self.lock = threading.Lock()

    def __call__(self):
        env = make(KEYDOOR)
        counter, close = self, env.close

        def counted_close():
            with counter.lock:
                counter.alive -= 1
            close()
        env.close = counted_close
        with self.lock:
            self.built += 1
            self.alive += 1
            self.most_alive = max(self.most_alive, self.alive)
        return env


@pytest.mark.parametrize("async_mode", [False, True])
@pytest.mark.parametrize("max_envs, wave_envs", [(4, 4), (5, 4), (1, 1), (99, 10)])
def test_max_envs_plays_whole_groups_in_waves_on_fewer_envs(max_envs, wave_envs, async_mode):
    # a ScienceWorld env is a JVM: a 64-task eval held 64 of them at once; waves reuse a few envs
    seeds = [0, 1, 2, 3, 4]
    counted = CountedKeyDoor()
    config = RolloutConfig(max_envs=max_envs, async_mode=async_mode, max_turns=8)
    moves = ("left", "right", "take key", "open door")
    policy = ScriptedPolicy(lambda ctx: moves[zlib.crc32(ctx.observation.encode()) % 4])  # a function of the state
    waved = rollout(counted, policy, CHAT, seeds, group_size=2, config=config)
    whole = rollout(CountedKeyDoor(), policy, CHAT, seeds, group_size=2, config=RolloutConfig(max_turns=8))
    assert counted.built == counted.most_alive == wave_envs and counted.alive == 0
    timings = ("wall_s", "generate_s", "env_s")

    def strip(t):
        d = {k: v for k, v in t.to_dict().items() if k not in timings}
        return {**d, "turns": [{k: v for k, v in turn.items() if k not in timings} for turn in d["turns"]]}
    assert len(waved) == 10 and [strip(t) for t in waved] == [strip(t) for t in whole]
    assert len({(t.final_observation, len(t.turns)) for t in waved}) > 1  # plays that differ


def test_max_envs_is_refused_where_a_mode_builds_its_own_pools():
    from agentgym.train.config import load_config

    with pytest.raises(ConfigError, match="rollout.max_envs"):
        load_config("quickstart_cpu", ["rollout.max_envs=4", "rollout.lookahead=2"])


def test_async_mode_does_not_wait_for_slow_envs():
    finished: list[tuple[int, float]] = []
    t0 = time.perf_counter()
    policy = Recording(ScriptedPolicy(lambda ctx: "go"))
    rollout(SlowEnv, policy, CHAT, [0, 1, 2, 3], config=RolloutConfig(max_turns=5, async_mode=True),
            on_trajectory=lambda t: finished.append((t.seed, time.perf_counter() - t0)))
    order = [seed for seed, _ in finished]
    slow_end = dict(finished)[0]
    assert order[-1] == 0 and slow_end >= 0.6  # the slow env (3 x 0.2 s) ends last ...
    assert max(s for seed, s in finished if seed != 0) < slow_end - 0.3  # ... the fast ones never waited for it
    assert max(len(b) for b in policy.batches) > 1  # ready requests were batched together


@pytest.mark.parametrize("async_mode", [False, True])
def test_process_executor_matches_threads(async_mode):
    config = RolloutConfig(executor="process", env_workers=2, async_mode=async_mode)
    remote = rollout(KEYDOOR, OraclePolicy(), CHAT, [0, 1, 2], group_size=2, config=config)
    local = rollout(KEYDOOR, OraclePolicy(), CHAT, [0, 1, 2], group_size=2)
    assert all(t.success for t in remote)  # OraclePolicy reached the envs in the workers through a proxy
    assert [t.turns[-1].prompt_ids for t in remote] == [t.turns[-1].prompt_ids for t in local]


def test_a_pool_can_be_reused_across_rollouts():
    from agentgym.engine.vector import make_pool

    with make_pool(KEYDOOR, 4, "process", workers=2) as pool:
        first = rollout(pool, OraclePolicy(), CHAT, [0, 1], group_size=2)
        second = rollout(pool, OraclePolicy(), CHAT, [0, 1], group_size=2)
        assert all(w.process.is_alive() for w in pool.workers)  # left open for the next call
        with pytest.raises(ConfigError, match="holds 4 envs"):
            rollout(pool, OraclePolicy(), CHAT, [0, 1, 2], group_size=2)
    assert [t.turns[-1].prompt_ids for t in first] == [t.turns[-1].prompt_ids for t in second]
    assert all(t.success for t in first)


def test_process_executor_needs_a_picklable_factory():
    with pytest.raises(ConfigError, match="picklable"):
        rollout(lambda: make(KEYDOOR), OraclePolicy(), CHAT, [0], config=RolloutConfig(executor="process"))


# ------------------------------------------------------------------------------------------ config

@pytest.mark.parametrize("kwargs, match", [
    ({"layout": "tree"}, "layout"), ({"executor": "gpu"}, "executor"), ({"max_turns": 0}, "max_turns"),
    ({"history_turns": -1}, "history_turns"), ({"max_context_tokens": 0}, "max_context_tokens"),
    ({"sampling": {"temperature": 1}}, "SamplingParams"), ({"max_envs": -1}, "max_envs")])
def test_bad_config_is_a_one_line_config_error(kwargs, match):
    with pytest.raises(ConfigError, match=match) as info:
        RolloutConfig(**kwargs)
    assert "\n" not in str(info.value)


def test_bad_env_and_group_size():
    with pytest.raises(agentgym.errors.RegistrationError, match="Did you mean"):
        rollout("agentgym/Toy-KeyDor-v0", OraclePolicy(), CHAT, [0])
    with pytest.raises(ConfigError, match="group_size"):
        rollout(KEYDOOR, OraclePolicy(), CHAT, [0], group_size=0)
    assert rollout(KEYDOOR, OraclePolicy(), CHAT, []) == []


def test_env_without_turn_limit_needs_max_turns():
    with pytest.raises(ConfigError, match="max_turns"):
        rollout(SlowEnv, ScriptedPolicy(lambda ctx: "go"), CHAT, [1])


def test_malformed_policy_output_fails_episodes_not_the_rollout():
    class Short(BasePolicy):
        calls = 0

        def generate(self, requests):
            self.calls += 1
            if self.calls > 1:
                return OraclePolicy().generate(requests)
            return [None] + OraclePolicy().generate(requests[1:])

    class Few(BasePolicy):
        def generate(self, requests):
            return []

    trajs = rollout(KEYDOOR, Short(), CHAT, [0, 1])
    assert trajs[0].end_reason == "failed" and "not a Generation" in trajs[0].error and trajs[1].success
    trajs = rollout(KEYDOOR, Few(), CHAT, [0, 1])
    assert all(t.end_reason == "failed" and "0 generations for 2 requests" in t.error for t in trajs)


def test_default_chat_is_the_policys():
    trajs = rollout(KEYDOOR, OraclePolicy(), None, [0])
    assert trajs[0].success and CHAT.decode(trajs[0].turns[0].prompt_ids).startswith("<|im_start|>system")


def test_async_rollout_called_from_inside_an_event_loop():
    import asyncio

    async def main():  # e.g. a notebook cell: the engine runs its own loop on a helper thread
        return rollout(KEYDOOR, OraclePolicy(), CHAT, [0], config=RolloutConfig(async_mode=True))

    [traj] = asyncio.run(main())
    assert traj.success
