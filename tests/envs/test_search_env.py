"""SearchEnv: oracle vs no-search policies, bad tool calls, budgets, rewards and real-corpus loading."""
from __future__ import annotations

import json
import random

import pytest

import agentgym
from agentgym.envs.search.env import SearchEnv, count_tokens
from agentgym.envs.search.metrics import exact_match, f1_score, normalize_answer
from agentgym.envs.search.world import generate_world
from agentgym.errors import ConfigError


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def play(env, seed, policy):
    obs, info = env.reset(seed=seed)
    total, steps, done = 0.0, [], False
    while not done:
        action = policy(env, obs)
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        steps.append(info)
        done = terminated or truncated
    return total, steps


def oracle(env, obs):
    return env.oracle_action()


@pytest.mark.parametrize("hops", [1, 2, 3, 4])
def test_oracle_searches_hop_by_hop_and_scores_em_1(hops):
    env = agentgym.make(f"agentgym/Search-{hops}Hop-v0")
    for seed in range(12):
        total, steps = play(env, seed, oracle)
        q = env.unwrapped.question
        assert total == 1.0 and steps[-1]["success"] and steps[-1]["em"] == 1.0, q
        assert set(q.support) <= env.unwrapped.seen  # it really retrieved every supporting document
        searches = sum(1 for s in steps if s["retrieved"])
        assert 1 <= searches <= hops


def test_oracle_on_the_test_split_and_the_mixed_env():
    env = agentgym.make("agentgym/Search-v0", split="test")
    for seed in range(10):
        total, _ = play(env, seed, oracle)
        assert total == 1.0
        assert env.unwrapped.question.id.startswith("w0-test")


def test_answering_without_searching_scores_near_zero():
    world = generate_world(0, "small")
    names = [e.name for e in world.entities.values()]
    rng = random.Random(0)

    def guesser(env, obs):  # a plausible answer (a name or a year) with no search
        return f"<answer>{rng.choice(names) if rng.random() < 0.6 else rng.randint(1700, 2000)}</answer>"

    env = agentgym.make("agentgym/Search-v0")
    scores = [play(env, seed, guesser)[0] for seed in range(60)]
    assert sum(scores) / len(scores) < 0.05


def test_bad_tool_calls_get_helpful_observations():
    env = SearchEnv(hops=2)
    env.reset(seed=0)
    cases = {
        "malformed JSON": ('<tool_call>{"name": "search", "arguments": {"query": </tool_call>', "malformed JSON"),
        "unknown tool": (call("google", query="x"), "Available tools: search, answer"),
        "misspelt tool": (call("serach", query="x"), "Did you mean 'search'"),
        "k too big": (call("search", query="Kigel", k=50), "k must be between 1 and 10"),
        "k wrong type": (call("search", query="Kigel", k="three"), "must be of type integer"),
        "empty query": (call("search", query="   "), "the query is empty"),
        "missing query": (call("search"), "missing required argument(s): query"),
        "no call": ("I think the answer is probably Paris.", "No tool call found"),
        "garbage": ("\x00\ud800" * 300_000, "No tool call found"),
    }
    for why, (action, expected) in cases.items():
        obs, reward, terminated, truncated, info = env.step(action)
        assert expected in obs, why
        assert info["valid_action"] is False and not terminated and reward == 0.0, why


def test_observation_is_cut_to_the_token_budget_and_anchor_is_the_retrieved_ids():
    env = SearchEnv(hops=1, obs_token_budget=24)
    env.reset(seed=0)
    obs, _, _, _, info = env.step(call("search", query="city founded known for", k=4))
    assert len(info["retrieved"]) == 4 and info["anchor"] == tuple(info["retrieved"])
    passages = obs.split("\n[")[1:]
    assert all(count_tokens(p.split("\n", 1)[1].replace("</tool_response>", "")) <= 8 + 1 for p in passages)
    assert "..." in obs
    obs, _, _, _, info = env.step(call("search", query="zzzzqqq"))
    assert "No documents matched" in obs and info["retrieved"] == [] and info["valid_action"]
    obs, *_ = env.step(call("search", query="qqqq " * 30_000))
    assert "No documents matched" in obs and count_tokens(obs) < 60


def test_support_bonus_pays_once_per_new_supporting_document():
    env = SearchEnv(hops=2, kind="bridge", support_bonus=0.25)
    _, info = env.reset(seed=1)
    q = env.question
    first = generate_world(0, "small").entities[q.support[0]].name
    _, reward, _, _, info = env.step(call("search", query=first))
    assert info["reward_components"]["support"] == pytest.approx(0.25 * len(set(q.support) & set(info["retrieved"])))
    assert reward == pytest.approx(sum(info["reward_components"].values()))
    _, reward, _, _, info = env.step(call("search", query=first))
    assert "support" not in info["reward_components"] and reward == 0.0


def test_f1_reward_gives_partial_credit_and_answer_tag_works():
    env = SearchEnv(hops=1, reward="f1")
    for seed in range(40):
        env.reset(seed=seed)
        if " " in env.question.answers[0]:
            break
    answer = env.question.answers[0].split()[-1]
    _, reward, terminated, _, info = env.step(f"<answer>{answer}</answer>")
    assert terminated and 0 < reward < 1 and info["reward_components"] == {"f1": reward}
    assert info["em"] == 0.0 and not info["success"]


def test_metrics_normalise_like_squad():
    assert normalize_answer("The  Kigel Orchestra!") == "kigel orchestra"
    assert exact_match("the kigel orchestra", ["Kigel Orchestra"]) == 1.0
    assert f1_score("Kigel", ["Kigel Orchestra"]) == pytest.approx(2 / 3)
    assert f1_score("", ["x"]) == 0.0 and exact_match("1664.", ["1664"]) == 1.0


def test_bad_env_config_is_one_line_error():
    with pytest.raises(ConfigError, match="reward must be"):
        SearchEnv(reward="bleu")
    with pytest.raises(ConfigError, match="qa_path"):
        SearchEnv(corpus_path="docs.jsonl")
    with pytest.raises(ConfigError, match="top_k"):
        SearchEnv(top_k=0)
    with pytest.raises(ConfigError, match="retriever must be one of bm25, dense"):
        SearchEnv(retriever="splade")
    with pytest.raises(ConfigError, match="hops 1-4"):
        agentgym.make("agentgym/Search-v0", hops=7)


def test_real_corpus_and_qa_jsonl_layouts(tmp_path):
    docs = tmp_path / "wiki.jsonl"
    docs.write_text("\n".join(json.dumps(d) for d in [
        {"id": "0", "contents": '"Paris"\nParis is the capital and largest city of France.'},
        {"id": "1", "contents": '"Berlin"\nBerlin is the capital of Germany.'},
        {"id": "2", "title": "Lyon", "text": "Lyon is a city in France on the Rhone."},
    ]) + "\n")
    qa = tmp_path / "nq.jsonl"
    qa.write_text("\n".join(json.dumps(q) for q in [
        {"id": "a", "question": "What is the capital of France?", "golden_answers": ["Paris"]},
        {"question": "Capital of Germany?", "answer": "Berlin"},
        {"question": "Which river flows through Lyon?", "answers": ["Rhone", "Rhône"]},
    ]) + "\n")
    env = SearchEnv(corpus_path=str(docs), qa_path=str(qa))
    assert [play(env, seed, oracle)[0] for seed in range(3)] == [1.0, 1.0, 1.0]
    env.reset(seed=0)
    obs, *_ = env.step(call("search", query="capital of France", k=1))
    assert "[1] Paris (doc 0)" in obs
    env.reset(seed=2)
    assert env.question.answers == ("Rhone", "Rhône")


def test_bad_qa_file_names_the_line(tmp_path):
    qa = tmp_path / "bad.jsonl"
    qa.write_text('{"question": "q?", "golden_answers": ["a"]}\n{"question": "no answer"}\n')
    env = SearchEnv(corpus_path=str(qa), qa_path=str(qa))
    with pytest.raises(ConfigError, match="line 2: no golden answers"):
        env.reset(seed=0)


def test_registered_ids_suite_and_contract():
    assert [e.env_id for e in agentgym.suite("search")] == [f"agentgym/Search-{h}Hop-v0" for h in (1, 2, 3, 4)]
    for env_id in ("agentgym/Search-v0", "agentgym/Search-4Hop-v0"):
        report = agentgym.check_env(env_id)
        assert "oracle" in report.checks and "any string" in report.checks


def test_oracle_policy_through_the_rollout_engine_scores_em_1():
    from agentgym.policies.scripted import OraclePolicy
    from agentgym.engine.rollout import rollout

    trajectories = rollout("agentgym/Search-v0", OraclePolicy(), None, seeds=list(range(8)), group_size=2)
    assert len(trajectories) == 16 and all(t.success for t in trajectories)
    assert all(t.total_reward == 1.0 for t in trajectories)
    assert {t.num_turns for t in trajectories} >= {2, 3}  # hop counts differ across seeds
