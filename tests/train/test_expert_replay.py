"""Expert replay in the choice update (algorithm.regularisers.expert_coef): the demonstrations' term is the
SFT cross-entropy scaled by the coefficient, it pulls the expert's choices up where the advantages say
nothing, a run through the trainer replays the warm start's demonstrations and reports them, and the modes
that cannot replay them refuse the option."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.errors import ConfigError  # noqa: E402
from agentgym.train.config import load_config  # noqa: E402
from agentgym.train.expert_replay import ExpertReplay  # noqa: E402
from agentgym.train.updaters.choice_ppo import choice_update, sequence_choice_logprobs  # noqa: E402

CPU = torch.device("cpu")


def _expert_logprob(model, seq):
    with torch.no_grad():
        return sum(float(lp[t.chosen]) for lp, t in zip(sequence_choice_logprobs(model, seq, CPU), seq.turns))


def _grads(model):
    return [p.grad.clone() for p in model.parameters() if p.requires_grad]


def test_the_replayed_term_is_the_sft_cross_entropy_times_the_coefficient(tiny_choice):
    model, _, seq = tiny_choice
    model = copy.deepcopy(model).train()
    once = ExpertReplay([seq], coef=1.0, per_update=2).draw(0, model, CPU)  # one demonstration: per_update caps at 1
    assert len(once.seqs) == 1 and once.trunks[0] is not None  # the frozen trunk ran once and is kept
    ce, turns, best = once.backward(model, CPU)
    unit = _grads(model)
    model.zero_grad(set_to_none=True)
    ce3, _, _ = ExpertReplay([seq], coef=3.0, per_update=1).draw(0, model, CPU).backward(model, CPU)
    assert ce == pytest.approx(-_expert_logprob(model, seq) / 2, rel=1e-5) and turns == 2 and 0 <= best <= 2
    assert ce3 == pytest.approx(ce)  # the cross-entropy is reported unscaled ...
    for g1, g3 in zip(unit, _grads(model)):  # ... and its gradient is scaled
        torch.testing.assert_close(g3, 3 * g1, rtol=1e-4, atol=1e-6)  # fp32 rounding: 2.7e-7 seen


def test_with_no_advantage_the_replay_alone_pulls_the_experts_choices_up(tiny_choice, choice_components):
    model, _, seq = tiny_choice
    cfg = load_config("toy_learning", ["rollout.action_mode=admissible", "optim.lr=1e-3", "train.mini_batches=1",
                                       "algorithm.regularisers.entropy_coef=0"])
    replayed, plain = copy.deepcopy(model).train(), copy.deepcopy(model).train()
    before = _expert_logprob(model, seq)
    stats = choice_update(choice_components(cfg, replayed), [seq], np.zeros(2), cfg, shuffle_seed=0,
                          expert=ExpertReplay([seq], coef=1.0, per_update=1))
    choice_update(choice_components(cfg, plain), [seq], np.zeros(2), cfg, shuffle_seed=0)
    assert _expert_logprob(replayed, seq) > before + 1e-3
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), model.parameters()))  # nothing else moved it
    m = stats.as_metrics()
    assert m["expert/cross_entropy"] > 0 and 0 <= m["expert/agreement"] <= 1 and m["time/update_expert"] > 0


def test_a_run_replays_the_warm_starts_demonstrations_and_reports_them(tmp_path):
    from agentgym.train.trainer import Trainer

    cfg = load_config("toy_learning", [f"train.run_dir={tmp_path}", "rollout.action_mode=admissible",
                                       "rollout.max_new_tokens=3", "train.iterations=2", "rollout.groups=2",
                                       "rollout.group_size=2", "eval.every=0", "logging.progress=false",
                                       "model.train_layers=1", "train.mini_batches=1", "sft.expert=oracle",
                                       "sft.episodes=4", "algorithm.regularisers.expert_coef=1.0",
                                       "algorithm.regularisers.expert_episodes=2"])
    trainer = Trainer(cfg)
    try:
        replay = trainer.learner.expert
        assert len(replay.episodes) == 4 and all(t.candidates for s in replay.seqs for t in s.turns)
        drawn = replay.draw(0, trainer.model, trainer.device).seqs  # the toy's step layout: a sequence per turn
        assert len({s.turns[0].episode for s in drawn}) == 2 and len(drawn) > 2
        trainer.run()
    finally:
        trainer.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(r["expert/cross_entropy"] > 0 and r["time/update_expert"] > 0 for r in rows)


@pytest.mark.parametrize("overrides, fix", [
    (["rollout.action_mode=generate"], "train with rollout.action_mode=admissible"),
    (["rollout.action_mode=admissible", "rollout.lookahead=2", "rollout.group_size=1"],
     "rollout.lookahead's update does not replay demonstrations"),
    (["algorithm.regularisers.expert_episodes=0"], "expert_episodes >= 1"),
])
def test_expert_replay_is_refused_where_it_cannot_run(overrides, fix):
    with pytest.raises(ConfigError, match=fix):
        load_config("toy_learning", ["algorithm.regularisers.expert_coef=1.0", *overrides])
