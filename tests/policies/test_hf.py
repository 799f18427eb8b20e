"""HFPolicy with the real SmolLM2-135M-Instruct: batching, logprobs, seeds, stops, limits, weights."""
from __future__ import annotations

import pytest

from agentgym.errors import PolicyError
from agentgym.policies.base import GenerationRequest, SamplingParams

pytestmark = [pytest.mark.model]


def _req(prompt, **sampling):
    return GenerationRequest(tuple(prompt), SamplingParams(**sampling))


def test_loaded_dense_fp32_on_cpu(smol):
    import torch

    assert next(smol.model.parameters()).dtype == torch.float32
    assert getattr(smol.model, "hf_quantizer", None) is None  # dequantized GGUF: trainable, saveable
    assert smol.tokenizer.eos_token_id in smol.eos_token_ids


def test_batched_equals_one_by_one_greedy(smol, smol_prompts):
    """Left padding, position ids and the KV cache leave every row's greedy output unchanged."""
    requests = [_req(p, temperature=0, max_tokens=8) for p in smol_prompts]
    batched = smol.generate(requests)
    single = [smol.generate([r])[0] for r in requests]
    for b, s in zip(batched, single):
        assert b.token_ids == s.token_ids and b.text == s.text and b.finish_reason == s.finish_reason
        assert max(abs(x - y) for x, y in zip(b.logprobs, s.logprobs)) < 1e-3
    assert len({len(p) for p in smol_prompts}) == 3  # the prompts really were padded


def test_token_budget_splits_batches_without_changing_outputs(smol, smol_prompts, monkeypatch):
    """A token budget cuts one generate call into several batches; greedy rows come out as in one batch."""
    requests = [_req(p, temperature=0, max_tokens=6) for p in smol_prompts] * 2
    whole = smol.generate(requests)
    batches = []
    decode = smol._decode_loop
    monkeypatch.setattr(smol, "_decode_loop", lambda rows: (batches.append(rows), decode(rows))[1])
    budget = 2 * (max(len(p) for p in smol_prompts) + 6)  # two of the longest rows fit, three do not
    monkeypatch.setattr(smol, "max_batch_tokens", budget)
    split = smol.generate(requests)
    assert len(batches) >= 3 and sum(len(rows) for rows in batches) == len(requests)
    assert all(len(rows) * max(len(r.prompt) + r.max_new for r in rows) <= budget for rows in batches)
    for a, b in zip(whole, split):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason


def test_a_token_budget_below_one_is_refused(smol):
    from agentgym.policies.hf import HFPolicy

    with pytest.raises(PolicyError, match="max_batch_tokens must be at least 1"):
        HFPolicy(smol.model, smol.tokenizer, max_batch_tokens=0)


def _teacher_forced(smol, prompt, response, temperature):
    import torch

    ids = torch.tensor([list(prompt) + list(response)])
    with torch.no_grad():
        logits = smol.model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    return logprobs.gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1).tolist()


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_logprobs_match_teacher_forced_recomputation(smol, smol_prompts, temperature):
    """What PPO's ratio relies on: log_softmax(logits / T) of the sampled token, recomputed in one pass."""
    gen = smol.generate([_req(smol_prompts[2], temperature=temperature, top_p=0.9, max_tokens=10, seed=5)])[0]
    expected = _teacher_forced(smol, smol_prompts[2], gen.token_ids, temperature or 1.0)
    assert len(gen.logprobs) == len(gen.token_ids) == len(expected)
    assert max(abs(a - b) for a, b in zip(gen.logprobs, expected)) < 2e-3
    assert all(lp <= 1e-6 for lp in gen.logprobs)


def test_seed_is_deterministic_whatever_the_batch(smol, smol_prompts):
    request = _req(smol_prompts[2], temperature=1.0, max_tokens=5, seed=123)
    alone = smol.generate([request])[0]
    in_batch = smol.generate([_req(smol_prompts[0], temperature=1.0, max_tokens=5, seed=1), request])[1]
    assert alone.token_ids == in_batch.token_ids
    others = {smol.generate([_req(smol_prompts[2], temperature=1.0, max_tokens=5, seed=s)])[0].token_ids
              for s in (1, 2, 3)}
    assert len(others | {alone.token_ids}) > 1  # different seeds do sample differently


def test_max_tokens_gives_length(smol, smol_prompts):
    gen = smol.generate([_req(smol_prompts[2], temperature=0, max_tokens=3)])[0]
    assert len(gen.token_ids) == 3 and gen.finish_reason == "length"


def test_eos_stops_and_is_kept_in_ids_not_text(smol, smol_prompts):
    gen = smol.generate([_req(smol_prompts[0], temperature=0, max_tokens=40)])[0]
    assert gen.finish_reason == "stop" and gen.token_ids[-1] in smol.eos_token_ids
    assert smol.tokenizer.eos_token not in gen.text and gen.text.strip()


def test_stop_string_ends_at_the_completing_token(smol, smol_prompts):
    free = smol.generate([_req(smol_prompts[0], temperature=0, max_tokens=40)])[0]
    stop = free.text[free.text.index("!") - 2:free.text.index("!") + 1] if "!" in free.text else free.text[3:6]
    gen = smol.generate([_req(smol_prompts[0], temperature=0, max_tokens=40, stop=(stop,))])[0]
    assert gen.finish_reason == "stop" and stop in gen.text
    before = smol.tokenizer.decode(list(gen.token_ids[:-1]))
    assert stop not in before  # the last token is the one that completed the stop string
    assert gen.token_ids == free.token_ids[:len(gen.token_ids)]


def test_bad_requests_fail_alone(smol, smol_prompts):
    vocab = smol.model.get_input_embeddings().num_embeddings
    gens = smol.generate([_req((), max_tokens=2), _req((vocab + 5,), max_tokens=2),
                          _req(smol_prompts[0], temperature=0, max_tokens=2)])
    assert [g.finish_reason for g in gens[:2]] == ["error", "error"]
    assert "empty prompt" in gens[0].error and "vocabulary" in gens[1].error
    assert gens[2].finish_reason == "length" and len(gens[2].token_ids) == 2


def test_update_weights(smol, smol_prompts):
    import torch

    smol.update_weights(smol.model)  # shared module: nothing to do
    name = "model.norm.weight"
    original = smol.model.state_dict()[name].clone()
    try:
        smol.update_weights({name: original * 0.5})
        assert torch.equal(smol.model.state_dict()[name], original * 0.5)
    finally:
        smol.update_weights({name: original})
    assert torch.equal(smol.model.state_dict()[name], original)
    with pytest.raises(PolicyError, match="merge LoRA"):
        smol.update_weights({"base_model.model.lora_A.weight": original})


def test_generate_restores_training_mode(smol, smol_prompts):
    smol.model.train()
    try:
        smol.generate([_req(smol_prompts[0], temperature=0, max_tokens=1)])
        assert smol.model.training
    finally:
        smol.model.eval()


def test_chat_format_is_the_models_template(smol):
    chat_module = pytest.importorskip("agentgym.chat")
    chat = smol.chat_format()
    assert isinstance(chat, chat_module.ChatFormat)
    assert set(chat.eos_token_ids) & set(smol.eos_token_ids)


def test_backend_failure_fails_the_chunk_not_the_caller(smol, smol_prompts, monkeypatch):
    def out_of_memory(rows):
        raise RuntimeError("CUDA out of memory (simulated)")

    monkeypatch.setattr(smol, "_decode_loop", out_of_memory)
    gens = smol.generate([_req(smol_prompts[0], max_tokens=2), _req((), max_tokens=2)])
    assert gens[0].finish_reason == "error" and "out of memory" in gens[0].error
    assert gens[1].finish_reason == "error" and "empty prompt" in gens[1].error
