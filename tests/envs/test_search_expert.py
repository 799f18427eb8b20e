"""The fair search expert reads only the question and the passages it was shown, and still answers."""
from __future__ import annotations

import dataclasses

import pytest

import agentgym
from agentgym.envs.search.expert import Chain, SearchExpert, parse_facts, parse_phrase, parse_question
from expert_episodes import play


@pytest.mark.parametrize("env_id", ["agentgym/Search-v0", "agentgym/Search-1Hop-v0"])
def test_fair_expert_answers_every_train_question(env_id):
    """Stated rate: 100% of train questions of 1-4 hops (bridge and comparison); measured 200/200 on
    Search-v0 train and test seeds 0-199 and 100/100 on Search-1Hop-v0."""
    env = agentgym.make(env_id)
    results = [play(env, seed, {"split": "train"}, max_turns=12) for seed in range(40)]
    assert all(ok for ok, _ in results)
    searches = max(sum('"search"' in a for a in actions) for _, actions in results)
    assert searches == 1 if env_id.endswith("1Hop-v0") else searches >= 3  # one search a hop


def test_expert_never_reads_the_hidden_question_record():
    """Replacing the answers and supporting documents the env keeps (what the oracle reads) with garbage
    before every action changes nothing the expert does: it answers from the passages it retrieved."""
    env = agentgym.make("agentgym/Search-v0")
    for seed in range(10):
        ok, honest = play(env, seed, {"split": "train"}, max_turns=12)
        truth = env.unwrapped.question.answers[0]

        def scramble(base):
            base.question = dataclasses.replace(base.question, answers=("garbage",), support=("nope",))
        _, blind = play(env, seed, {"split": "train"}, max_turns=12, before_each_step=scramble)
        assert ok and blind == honest and blind[-1] == f"<answer>{truth}</answer>"


def test_a_missing_passage_is_searched_again_then_given_up():
    """When the page of a name never comes back, the expert retries once with 10 passages, then has no path
    (None): that demonstration fails and the SFT stage drops it."""
    e = SearchExpert()
    e.observe("Question: What is the employer of Stux Weibulaem?")
    calls = []
    render = lambda c: calls.append(c) or "call"  # noqa: E731
    assert e.act(render) == "call" and calls[-1] == [("search", {"query": "Stux Weibulaem"})]
    e.observe('<tool_response>\nNo documents matched "Stux Weibulaem".\n</tool_response>')
    assert e.act(render) == "call" and calls[-1] == [("search", {"query": "Stux Weibulaem", "k": 10})]
    e.observe('<tool_response>\nNo documents matched "Stux Weibulaem".\n</tool_response>')
    assert e.act(render) is None


def test_expert_reads_only_text():
    e = SearchExpert()
    e.observe("Question: In what year was the birthplace of the director of The Rahimus Tide founded?")
    assert e.act(lambda c: c[0][1]["query"]) == "The Rahimus Tide"
    e.observe('Results for "The Rahimus Tide":\n[1] The Rahimus Tide (doc w-4)\nThe Rahimus Tide is a film from '
              "1846 by the director Rybar Krunei. It is about a lost letter.")
    assert e.act(lambda c: c[0][1]["query"]) == "Rybar Krunei"
    e.observe('Results for "Rybar Krunei":\n[1] Rybar Krunei (doc p-1)\nRybar Krunei was a poet born in 1801 in '
              "the city of Pador. Rybar Krunei worked for the Bayozhux Bank. Colleagues remembered him.")
    assert e.act(lambda c: c[0][1]["query"]) == "Pador"
    e.observe('Results for "Pador":\n[1] Pador (doc c-1)\nPador is a city in Zothouia, founded in 750. It is known.')
    assert e.act(lambda c: "unused") == "<answer>750</answer>"
    assert e.act(lambda c: "unused") is None  # answered: nothing more to do


def test_parsers():
    assert parse_phrase("the country in which the birthplace of the author of The X Hours lies") == Chain(
        "The X Hours", ["creator", "birthplace", "country"])
    assert parse_phrase("the founder of University of Kraz") == Chain("University of Kraz", ["founder"])
    assert parse_question("Who was born earlier, Ab Cd or the founder of Ef Bank?") == (
        "earlier", [Chain("Ab Cd", []), Chain("Ef Bank", ["founder"])])
    assert parse_question("Who wrote Hamlet?") is None
    assert parse_facts("The Ef Bank is a bank founded in 1700 by Ab Cd. Its headquarters are in Pador. More.") == {
        "name": "Ef Bank", "year": "1700", "founder": "Ab Cd", "headquarters": "Pador"}
    assert parse_facts("Something else entirely.") == {}
    lost = SearchExpert()
    lost.observe("Question: Who wrote Hamlet?")
    assert lost.act(lambda c: "call") is None  # a question it cannot parse: no path, never a guess
