"""The tool-call guards on real toy runs: a policy that writes Llama 3 calls while the env reads Hermes stops
the run with the cause and the fix; told the right format (rollout.tool_format=llama3) the same run raises
none, and the figures (tool_calls_unparsed, tool_format/..., tool_errors) are logged every iteration."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from agentgym.train.config import GuardrailsSection, load_config
from agentgym.train.guardrails import GuardrailError, check, tool_errors, unparsed_tool_calls
from agentgym.train.metrics import read_metrics
from agentgym.train.trainer import train

pytest.importorskip("transformers")
SMALL = ["rollout.groups=2", "rollout.group_size=2", "eval.every=0", "train.mini_batches=1", "train.micro_batch_size=16",
         "rollout.env=test/Calc-v0", "rollout.max_turns=2", "rollout.max_context_tokens=2048"]
LLAMA_CALL = '<|python_tag|>{"name": "calculate", "parameters": {"expression": "6 * 7"}}'


@pytest.fixture
def llama_writing_policy(monkeypatch, scratch_ids):
    """The tiny model generates (its ids and log-probs are what is trained), but the text the env receives is a
    Llama 3 call: a model of that family, as far as the env can tell."""
    import agentgym
    from agentgym.envs.toy.calculator import CalculatorEnv
    from agentgym.policies.hf import HFPolicy
    from agentgym.train import setup

    class LlamaWriter(HFPolicy):
        def generate(self, requests):
            return [replace(g, text=LLAMA_CALL) for g in super().generate(requests)]

    agentgym.register("test/Calc-v0", entry_point=lambda **kwargs: CalculatorEnv(), max_turns=2)
    scratch_ids.append("test/Calc-v0")
    monkeypatch.setattr(setup, "make_policy", lambda cfg, model, tok: LlamaWriter(model, tok))


def test_calls_the_env_never_parses_stop_the_run(tmp_path: Path, llama_writing_policy):
    with pytest.raises(GuardrailError) as stopped:
        train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=2", *SMALL]))
    message = str(stopped.value)
    print(message)
    assert message.startswith("iteration 0: 100% of turns attempt a tool call that never parses") and "\n" not in message
    assert "the policy's tool-call format is llama3 but the env parses hermes" in message
    assert "rollout.tool_format=llama3" in message and "train.guardrails.unparsed_tool_calls=warn" in message
    (metrics,) = read_metrics(tmp_path)
    assert metrics["tool_calls_unparsed"] == 1.0 and metrics["tool_calls_unparsed/llama3"] == 1.0
    assert metrics["tool_format/hermes"] == 1.0 and metrics["guard/unparsed_tool_calls"] == 1.0


def test_the_right_format_raises_no_tool_guard(tmp_path: Path, llama_writing_policy, capsys):
    run = train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=2", *SMALL,
                                             "rollout.tool_format=llama3",
                                             # a fixed call: equal rewards, identical groups
                                             "train.guardrails.no_signal=off", "train.guardrails.collapse=off"]))
    metrics = read_metrics(run)
    assert len(metrics) == 2 and not any(k.startswith("guard/") for m in metrics for k in m)
    assert all(m["tool_calls_unparsed"] == 0.0 and m["tool_format/llama3"] == 1.0 for m in metrics)
    assert all(m["tool_error_share"] == 0.0 and m["tool_call_rate"] == 1.0 for m in metrics)
    assert "warning" not in capsys.readouterr().err


def test_a_bad_tool_format_is_a_config_error():
    from agentgym.errors import ConfigError

    with pytest.raises(ConfigError, match="rollout.tool_format must be auto or one of"):
        load_config("toy_learning", ["rollout.tool_format=llama"])


def test_tool_guards_by_hand():
    section = GuardrailsSection()
    assert unparsed_tool_calls({"tool_calls_unparsed": 0.5}, section) is None  # at the limit: not above it
    alarm = unparsed_tool_calls({"tool_calls_unparsed": 0.75, "tool_calls_unparsed/mistral": 0.5,
                                 "tool_calls_unparsed/llama3": 0.25, "tool_format/hermes": 1.0}, section)
    assert alarm.value == 0.75 and "format is mistral but the env parses hermes" in alarm.message
    assert tool_errors({"tool_error_share": 0.8}, section) is None  # at the limit: not above it
    assert "100% of tool calls returned an error" in tool_errors({"tool_error_share": 1.0}, section).message
    fired = check({"tool_calls_unparsed": 1.0, "tool_error_share": 1.0}, section)
    assert [(a.guard, action) for a, action in fired] == [("unparsed_tool_calls", "stop"), ("tool_errors", "warn")]
    assert check({}, section) == []  # an env without tools logs no tool figures and fires nothing


def test_unparsed_calls_stop_the_run_before_the_update_trains_on_them(tmp_path: Path, llama_writing_policy):
    """Issue 51, defect 4: the unparsed-tool-calls guard (default stop) runs before the update, so a batch in
    which no call parsed never moves the weights."""
    import torch

    from agentgym.train.trainer import Trainer

    trainer = Trainer(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=2", *SMALL]))
    try:
        before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        with pytest.raises(GuardrailError, match="never parses"):
            trainer.step()
        after = trainer.model.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before), "the update trained on the bad batch"
        assert not trainer.optimizer.state and trainer.iteration == 0
        (metrics,) = read_metrics(tmp_path)
        assert "policy_loss" not in metrics and metrics["guard/unparsed_tool_calls"] == 1.0
    finally:
        trainer.close()
