"""Fixtures shared by the trainer tests: the device a run trains on, the choice-update pieces, and what the
async collector handed the trainer."""
from __future__ import annotations

import pytest


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def train_device(request):
    """The trained model's device (`model.device`): every test that takes it runs on the CPU, and again on
    CUDA where a GPU is (marked gpu, skipped without one)."""
    if request.param == "cuda":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU")
    return request.param


@pytest.fixture()
def tiny_choice(tmp_path):
    """(model, tokenizer, seq): a 4-layer tiny Llama whose top 2 layers train (trunk: embeddings + layers 0-1),
    and one two-turn choice sequence of the toy."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentgym.policies.admissible import AdmissiblePolicy
    from agentgym.train import tiny
    from agentgym.train.setup import freeze_below_top_layers
    from agentgym.train.updaters.choice_ppo import ChoiceSequence, ChoiceTurn

    path = tiny.build_tiny(tmp_path / "tiny", layers=4, hidden=64)
    model = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    freeze_below_top_layers(model, 2)
    tok = AutoTokenizer.from_pretrained(str(path))
    policy = AdmissiblePolicy(model, tok)
    chat = policy.chat_format()
    cands = tuple(map(tuple, policy.candidate_ids(["left", "take key", "open door", "right", "take door"])))
    p1 = chat.initial_prompt("Take the key.", "room 0 . key here .")
    p2 = chat.continue_prompt(p1, list(cands[1]), "room 0 . hold key .")
    seq = ChoiceSequence(tuple(p2), (ChoiceTurn(0, len(p1), cands, 1), ChoiceTurn(1, len(p2), cands[:4], 2)))
    return model, tok, seq


@pytest.fixture()
def choice_components():
    """A factory: `choice_components(cfg, model, reference=None, **parts)` -> the trainer's Components for a
    choice update of `model` on CPU, with `cfg`'s optimizer, `reference` as the KL reference (None: no
    reference) and `parts` (tokenizer, policy, chat) where the update reads them."""
    import contextlib

    import torch

    from agentgym.train.setup import Components, make_optimizer

    def build(cfg, model, reference=None, **parts):
        optimizer, scheduler = make_optimizer(cfg, model, None)
        fields = dict(model=model, tokenizer=None, policy=None, chat=None, critic=None,
                      ref=lambda: contextlib.nullcontext(reference), optimizer=optimizer, scheduler=scheduler,
                      device=torch.device("cpu"), env_id="", tools=[], pad_id=0)
        return Components(**{**fields, **parts})

    return build


@pytest.fixture()
def async_collected(monkeypatch):
    """Every Collected the async collector hands the trainer (its `first`: the plays before drops; its `batch`:
    what trains), in order, appended as the run goes."""
    from agentgym.train.collectors.async_collector import AsyncCollector

    collected: list = []
    original = AsyncCollector.collect

    def recording(self, iteration):
        out = original(self, iteration)
        collected.append(out)
        return out

    monkeypatch.setattr(AsyncCollector, "collect", recording)
    return collected
