"""The generated search world and its multi-hop questions."""
from __future__ import annotations

import pytest

from agentgym.envs.search.questions import make_question, split_of
from agentgym.envs.search.world import generate_world, render, render_corpus
from agentgym.errors import ConfigError


@pytest.fixture(scope="module")
def world():
    return generate_world(0, "small")


def test_world_is_a_pure_function_of_seed_and_size(world):
    again = generate_world.__wrapped__(0, "small")  # bypass the cache: really regenerate
    assert render_corpus(again) == render_corpus(world)
    other = generate_world.__wrapped__(1, "small")
    assert render_corpus(other) != render_corpus(world)


def test_names_are_unique_and_documents_state_the_relations(world):
    names = [e.name.lower() for e in world.entities.values()]
    assert len(names) == len(set(names))
    for entity in list(world.entities.values())[::7]:
        text = render(world, entity)
        assert entity.name in text
        for target in entity.relations.values():
            assert world.entities[target].name in text


def test_capitals_lie_in_their_country(world):
    for country in world.by_type("country"):
        assert world.follow(country.id, "capital").relations["country"] == country.id


@pytest.mark.parametrize("hops", [1, 2, 3, 4])
def test_questions_have_the_requested_hops_and_answers_follow_from_the_support(world, hops):
    for seed in range(25):
        q = make_question(world, seed, hops=hops)
        assert q.hops == hops and len(q.support) == hops and len(set(q.support)) == hops
        support_text = " ".join(render(world, world.entities[d]) for d in q.support)
        assert q.answers[0] in support_text, q
        # the first hop is named in the question itself
        assert world.entities[q.support[0]].name in q.question


def test_comparison_questions_pick_the_earlier_entity(world):
    for seed in range(20):
        q = make_question(world, seed, hops=2, kind="comparison")
        a, b = (world.entities[d] for d in q.support)
        attribute = {"person": "birth_year", "work": "year", "org": "founded", "city": "founded"}[a.type]
        earlier = min((a, b), key=lambda e: int(e.attributes[attribute]))
        assert q.answers == (earlier.name,) and a.name in q.question and b.name in q.question
        q4 = make_question(world, seed, hops=4, kind="comparison")
        assert len(q4.support) == 4 and q4.kind == "comparison"


def test_splits_never_share_a_starting_entity(world):
    train = {make_question(world, s, hops=2, kind="bridge").support[0] for s in range(60)}
    test = {make_question(world, s, hops=2, kind="bridge", split="test").support[0] for s in range(60)}
    assert train and test and not train & test
    assert all(split_of(e) == "train" for e in train) and all(split_of(e) == "test" for e in test)


def test_same_seed_same_question_and_mixed_hops_cover_1_to_4(world):
    assert make_question(world, 7) == make_question(world, 7)
    assert {make_question(world, s).hops for s in range(60)} == {1, 2, 3, 4}
    assert {make_question(world, s).kind for s in range(60)} == {"bridge", "comparison"}


@pytest.mark.parametrize("kwargs, message", [({"hops": 5}, "hops must be"), ({"hops": 3, "kind": "comparison"}, "2 or 4"),
                                             ({"kind": "trivia"}, "unknown question kind"),
                                             ({"split": "dev"}, "unknown split")])
def test_bad_question_config_says_how_to_fix(world, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        make_question(world, 0, **kwargs)


def test_bad_world_size_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown world size"):
        generate_world(0, "huge")
    assert len(render_corpus(generate_world(3, 500))) == 500
