"""Action templates (agentgym/action_templates.py): an admissible list holding "search[<query>]" is acted on by
writing the slot (free generation after the prompt and the template's prefix) and choosing among the written
action and the listed ones; the written action is `Choice.written`, token-exact like any candidate."""
from __future__ import annotations

import pytest

from agentgym.action_templates import fills, first_template, template_parts, without_templates, written_into

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.policies.admissible import AdmissiblePolicy  # noqa: E402
from agentgym.policies.base import EnvContext, GenerationRequest, SamplingParams  # noqa: E402


def test_template_maths():
    assert template_parts("search[<query>]") == ("search[", "]")
    assert template_parts("click[Buy Now]") is None
    assert fills("search[<query>]", "search[red shoes]")
    assert not fills("search[<query>]", "search[]")            # an empty slot is not written
    assert not fills("search[<query>]", "click[red shoes]")
    assert not fills("click[next >]", "click[next >]")          # a plain action is no template
    listed = ["click[back]", "search[<query>]", "click[item]"]
    assert first_template(listed) == 1 and first_template(["click[back]"]) is None
    assert written_into(listed, "search[red shoes]") == (["click[back]", "search[red shoes]", "click[item]"], 1)
    assert written_into(listed, "click[item]") is None          # listed as it is: nothing written
    assert without_templates(listed) == ["click[back]", "click[item]"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentgym.train import tiny

    path = tiny.build_tiny(tmp_path_factory.mktemp("tiny"))
    return AutoModelForCausalLM.from_pretrained(str(path)).eval(), AutoTokenizer.from_pretrained(str(path))


def _request(policy, actions, temperature, seed=None):
    prompt = tuple(policy.chat_format().initial_prompt("Buy a key.", "room 0 . key here ."))
    return GenerationRequest(prompt, SamplingParams(temperature=temperature, max_tokens=6, seed=seed),
                             EnvContext(None, "room 0", {"admissible_actions": actions}))


def test_the_policy_writes_the_slot_then_chooses_among_written_and_listed(tiny):
    model, tok = tiny
    policy = AdmissiblePolicy(model, tok)
    chat = policy.chat_format()
    listed = ["search[<query>]", "click[left]", "click[take key]"]
    request = _request(policy, listed, 0.0)
    gen = policy.generate([request])[0]
    choice = gen.choice
    assert choice is not None and choice.written == 0 and len(choice.candidates) == 3
    # greedy: the slot is the free policy's greedy text after the prompt and "search[", cut at "]"
    ask = GenerationRequest((*request.prompt_ids, *chat.encode("search[")),
                            SamplingParams(temperature=0.0, max_tokens=6, stop=("]",)))
    text = policy.free.generate([ask])[0].text.split("]", 1)[0].strip()
    written = f"search[{text}]"
    assert choice.candidates[0] == tuple(policy.candidate_ids([written])[0])
    assert [tuple(c) for c in policy.candidate_ids([written, "click[left]", "click[take key]"])] == \
        list(choice.candidates)
    assert list(gen.token_ids) == list(choice.candidates[choice.pick])      # token-in-token-out
    assert gen.text in (written, "click[left]", "click[take key]")
    # sampled: every play sends a written search or a listed click, never the template itself
    for seed in range(6):
        g = policy.generate([_request(policy, listed, 1.0, seed)])[0]
        assert g.text != "search[<query>]" and g.choice.written == 0
        assert g.text.startswith("search[") and g.text.endswith("]") or g.text in listed[1:]


def test_a_page_listing_only_the_template_gets_a_written_action(tiny):
    model, tok = tiny
    policy = AdmissiblePolicy(model, tok)
    gen = policy.generate([_request(policy, ["search[<query>]"], 1.0, 3)])[0]
    assert gen.choice.written == 0 and gen.choice.pick == 0 and len(gen.choice.candidates) == 1
    assert gen.text.startswith("search[") and gen.text.endswith("]") and "<query>" not in gen.text
    # a list without templates is chosen from as before (nothing written)
    plain = policy.generate([_request(policy, ["click[left]", "click[right]"], 1.0, 3)])[0]
    assert plain.choice.written is None and plain.text in ("click[left]", "click[right]")
