"""The eval runner end to end: real envs, the real rollout engine, scripted/oracle/random policies."""
import copy
import json
import math

import pytest

from agentgym.errors import ConfigError
from agentgym.eval.reports import load_results, validate_results
from agentgym.eval.runner import TRAJECTORIES_FILE, EvalConfig, load_records, run_eval
from agentgym.eval.suites import resolve_envs
from agentgym.policies.scripted import OraclePolicy, RandomPolicy

KEYDOOR = "agentgym/Toy-KeyDoor-v0"


class CountingOracle(OraclePolicy):
    """The oracle, counting every request; raises KeyboardInterrupt (like Ctrl-C) after `stop_after`."""

    def __init__(self, stop_after: int | None = None):
        super().__init__()
        self.requests = 0
        self.stop_after = stop_after

    def generate(self, requests):
        if self.stop_after is not None and self.requests + len(requests) > self.stop_after:
            raise KeyboardInterrupt
        self.requests += len(requests)
        return super().generate(requests)


def config(tmp_path, name="out", **kw):
    _, entries = resolve_envs(suite_name="toy")
    base = dict(policy="oracle", entries=tuple(entries), out_dir=str(tmp_path / name), suite="toy", episodes=4,
                samples=2, seed=11, workers=2)
    return EvalConfig(**{**base, **kw})


def outcome(run):
    return {r.key: (r.trajectory.success, r.trajectory.num_turns, [t.action for t in r.trajectory.turns])
            for r in run.records}


def test_interrupted_eval_resumes_without_recomputing(tmp_path):
    full_policy = CountingOracle()
    full = run_eval(config(tmp_path, "full"), policy=full_policy, progress=False)
    total = len(full.records)
    assert total == 3 * 4 * 2 and full.ran_now == total

    cfg = config(tmp_path, "interrupted")
    with pytest.raises(KeyboardInterrupt):
        run_eval(cfg, policy=CountingOracle(stop_after=full_policy.requests // 2), progress=False)
    log = tmp_path / "interrupted" / TRAJECTORIES_FILE
    first_lines = log.read_text().splitlines()
    done_first = load_records(log)
    assert 0 < len(done_first) < total

    # a kill mid-write leaves half a line; it must not poison the resume
    with log.open("a") as f:
        f.write('{"env": "agentgym/Toy-KeyDoor-v0", "seed": 11, "sam')
    resumed_policy = CountingOracle()
    resumed = run_eval(cfg, policy=resumed_policy, progress=False)
    new_keys = {r.key for r in resumed.records} - {r.key for r in done_first}

    assert resumed.ran_now == len(new_keys) == total - len(done_first)
    # exactly one policy request per turn of the episodes still missing: nothing finished was re-run
    assert resumed_policy.requests == sum(r.trajectory.num_turns for r in resumed.records if r.key in new_keys)
    lines = log.read_text().splitlines()
    assert lines[: len(first_lines)] == first_lines and len(lines) == total  # nothing lost, nothing doubled
    assert outcome(resumed) == outcome(full)

    # running again finds nothing to do and needs no policy at all
    again = run_eval(cfg, policy=None, progress=False)
    assert again.ran_now == 0 and outcome(again) == outcome(full)


def test_more_episodes_extend_a_finished_eval(tmp_path):
    policy = CountingOracle()
    run_eval(config(tmp_path, episodes=2, samples=1), policy=policy, progress=False)
    before = policy.requests
    grown = run_eval(config(tmp_path, episodes=3, samples=1), policy=policy, progress=False)
    assert grown.ran_now == 3 and len(grown.records) == 9
    assert policy.requests - before == sum(r.trajectory.num_turns for r in grown.records if r.trajectory.seed == 13)


def test_a_split_the_env_rejects_fails_before_any_episode(tmp_path, scratch_ids):
    import agentgym
    from agentgym.envs.toy.keydoor import KeyDoorEnv

    class Picky(KeyDoorEnv):
        def reset(self, *, seed=None, options=None):
            if (options or {}).get("split") not in (None, "train", "test_seen"):
                raise ValueError(f"unknown split {options['split']!r}; choose from train, test_seen")
            return super().reset(seed=seed, options=options)

    agentgym.register("test/Picky-v0", Picky, max_turns=10)
    scratch_ids.append("test/Picky-v0")
    policy = CountingOracle()
    cfg = config(tmp_path, entries=resolve_envs(env_ids=["test/Picky-v0"])[1], episodes=2, samples=1)
    with pytest.raises(ConfigError, match="test/Picky-v0 cannot start with --split 'test'.*choose from train"):
        run_eval(cfg, policy=policy, progress=False)
    assert policy.requests == 0
    ok = run_eval(config(tmp_path, "ok", entries=cfg.entries, episodes=2, samples=1, split="test_seen"),
                  policy=policy, progress=False)
    assert ok.ran_now == 2 and all(r.trajectory.success for r in ok.records)


def test_failed_episodes_are_reported_not_hidden(tmp_path):
    from agentgym.eval.reports import render_markdown

    def flaky(context):
        raise RuntimeError("model server went away")

    from agentgym.policies.scripted import ScriptedPolicy

    run = run_eval(config(tmp_path, episodes=2, samples=1), policy=ScriptedPolicy(flaky), progress=False)
    results = load_results(run.paths["results"])
    assert results["summary"]["metrics"]["errors"] == 6 and results["summary"]["metrics"]["success_rate"] == 0.0
    assert "**6 episode(s) failed**" in render_markdown(results) and "model server went away" in render_markdown(results)
    assert "6 episode(s) failed" in open(run.paths["html"]).read()

    # the server is back: resuming re-runs exactly the failed episodes (set retry_failed=False to keep them)
    kept = run_eval(config(tmp_path, episodes=2, samples=1, retry_failed=False), policy=CountingOracle(),
                    progress=False)
    assert kept.ran_now == 0
    policy = CountingOracle()
    retried = run_eval(config(tmp_path, episodes=2, samples=1), policy=policy, progress=False)
    assert retried.ran_now == 6 and len(retried.records) == 6 and all(r.trajectory.success for r in retried.records)
    assert policy.requests == sum(r.trajectory.num_turns for r in retried.records)
    assert load_results(retried.paths["results"])["summary"]["metrics"]["errors"] == 0


def test_prompt_ids_are_dropped_by_default_without_changing_token_metrics(tmp_path):
    full = run_eval(config(tmp_path, "full", episodes=2, keep_prompt_ids=True), policy=OraclePolicy(), progress=False)
    lean = run_eval(config(tmp_path, "lean", episodes=2), policy=OraclePolicy(), progress=False)
    metrics = [load_results(r.paths["results"])["envs"] for r in (full, lean)]
    assert [e["metrics"]["mean_total_tokens"] for e in metrics[0]] == [e["metrics"]["mean_total_tokens"] for e in metrics[1]]
    assert metrics[0][0]["metrics"]["mean_total_tokens"] > 0
    lean_turn = lean.records[0].trajectory.turns[-1]
    full_turn = full.records[0].trajectory.turns[-1]
    assert lean_turn.prompt_ids == () and lean_turn.info["prompt_tokens"] == len(full_turn.prompt_ids) > 0
    assert lean_turn.response_ids == full_turn.response_ids


def test_resuming_a_different_eval_is_refused(tmp_path):
    run_eval(config(tmp_path, episodes=1, samples=1), policy=CountingOracle(), progress=False)
    with pytest.raises(ConfigError, match="different eval.*--no-resume"):
        run_eval(config(tmp_path, episodes=1, samples=1, split="train"), policy=CountingOracle(), progress=False)
    fresh = run_eval(config(tmp_path, episodes=1, samples=1, split="train", resume=False), policy=CountingOracle(),
                     progress=False)
    assert fresh.ran_now == 3


@pytest.mark.parametrize("async_mode", [False, True])
def test_oracle_solves_the_toy_suite_and_results_validate(tmp_path, async_mode):
    run = run_eval(config(tmp_path, episodes=5, samples=2, async_mode=async_mode), policy=OraclePolicy(),
                   progress=False)
    results = load_results(run.paths["results"])
    validate_results(results)
    for env in results["envs"]:
        assert env["metrics"]["success_rate"] == 1.0, env["name"]
        assert env["metrics"]["pass_at_k"] == {"1": 1.0, "2": 1.0}
        assert env["metrics"]["invalid_action_rate"] == 0.0
    assert results["summary"]["metrics"]["episodes"] == 30
    assert len(results["trajectories"]) == 30
    assert {t["trajectory"]["seed"] for t in results["trajectories"]} == set(range(11, 16))


def random_success_probability(env, turns_left, memo):
    """Exact chance that uniformly random admissible actions solve `env` within `turns_left` turns."""
    key = (env.render(), turns_left)
    if key not in memo:
        actions = env.unwrapped._admissible()
        total = 0.0
        for action in actions:
            child = copy.deepcopy(env.unwrapped)
            _, _, terminated, _, info = child.step(action)
            if info["success"]:
                total += 1.0
            elif not terminated and turns_left > 1:
                total += random_success_probability(child, turns_left - 1, memo)
        memo[key] = total / len(actions)
    return memo[key]


def test_random_gets_its_known_low_rate_on_keydoor_long(tmp_path):
    import agentgym

    env_id, episodes = "agentgym/Toy-KeyDoor-Long-v0", 60
    cfg = config(tmp_path, entries=resolve_envs(env_ids=[env_id])[1], episodes=episodes, samples=1, seed=0,
                 workers=4)
    rate = load_results(run_eval(cfg, policy=RandomPolicy(seed=0), progress=False).paths["results"])["envs"][0][
        "metrics"]["success_rate"]
    env, expected, memo = agentgym.make(env_id), [], {}  # render() shows the whole state, so one memo serves all
    for seed in range(episodes):
        env.reset(seed=seed, options={"split": "test"})
        expected.append(random_success_probability(env.unwrapped, agentgym.spec(env_id).max_episode_steps, memo))
    p = sum(expected) / episodes
    sd = math.sqrt(sum(q * (1 - q) for q in expected)) / episodes
    assert p < 0.5  # the known rate is low...
    assert abs(rate - p) <= 3.5 * sd, (rate, p, sd)  # ...and random's measured rate matches it


@pytest.fixture
def household_suite():
    import agentgym

    if "household" not in agentgym.list_suites():
        pytest.skip("the household suite is not registered yet")
    return resolve_envs(suite_name="household")


def test_oracle_and_random_on_the_household_suite(tmp_path, household_suite):
    name, entries = household_suite
    common = dict(entries=tuple(entries), suite=name, episodes=4, samples=1, split="test_unseen")
    oracle = run_eval(config(tmp_path, "oracle", policy="oracle", **common), progress=False)
    random_run = run_eval(config(tmp_path, "random", policy="random", **common), progress=False)
    oracle_results, random_results = load_results(oracle.paths["results"]), load_results(random_run.paths["results"])
    validate_results(oracle_results)
    assert all(e["metrics"]["success_rate"] == 1.0 for e in oracle_results["envs"])
    assert oracle_results["summary"]["metrics"]["errors"] == 0 and oracle_results["summary"]["metrics"]["mean_turns"] > 2
    assert random_results["summary"]["metrics"]["success_rate"] < 0.15  # household's known bound
    json.dumps(random_results)  # plain JSON throughout


def test_progress_bar_counts_resumed_and_new_episodes(tmp_path, capsys):
    pytest.importorskip("tqdm")
    run_eval(config(tmp_path, episodes=1, samples=1), policy=OraclePolicy(), progress=True)
    err = capsys.readouterr().err
    assert "eval: 100%" in err and "3/3" in err
    run_eval(config(tmp_path, episodes=2, samples=1), policy=OraclePolicy(), progress=True)
    err = capsys.readouterr().err
    assert "3/6" in err and "6/6" in err  # starts at the 3 resumed episodes
