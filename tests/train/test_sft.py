"""SFT warm start: samples match the rollout's tokens, cloning a toy oracle takes greedy success from
~0 to ~1 with the tiny model, and the checkpoint is a policy and an RL start."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.chat import ChatFormat  # noqa: E402
from agentgym.errors import ConfigError  # noqa: E402
from agentgym.train.config import load_config  # noqa: E402
from agentgym.train.samples import build_samples  # noqa: E402
from agentgym.train.sft.data import (Episode, encode_episode, episode_of, expert_trajectories,  # noqa: E402
                                     trajectory_file_episodes, transcript_episodes)

TOY = ["rollout.max_new_tokens=3", "sft.episodes=16", "sft.epochs=8", "sft.lr=0.003", "sft.batch_size=8",
       "eval.seeds=16", "train.micro_batch_size=64", "logging.progress=false"]


def toy_config(tmp_path, *extra):
    return load_config("toy_learning", [f"train.run_dir={tmp_path}", *TOY, *extra])


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory):
    from agentgym.train import tiny

    tiny.register_tiny_envs()
    path = tiny.build_tiny(tmp_path_factory.mktemp("tiny"))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


@pytest.mark.parametrize("layout", ["trajectory", "step"])
@pytest.mark.parametrize("chat_kind", ["simple", "hf"])
def test_encoded_episode_equals_the_rollout_tokens(tmp_path, tiny_tokenizer, layout, chat_kind):
    chat = ChatFormat.simple() if chat_kind == "simple" else ChatFormat.from_tokenizer(tiny_tokenizer)
    cfg = toy_config(tmp_path, f"rollout.layout={layout}", "rollout.history_turns=1", "sft.episodes=4",
                     "rollout.max_new_tokens=16", "rollout.max_context_tokens=4096",
                     "rollout.env_kwargs={length: 3, key_bonus: 0.5}")
    trajs = expert_trajectories(cfg, chat)
    assert all(t.success for t in trajs) and max(t.num_turns for t in trajs) >= 3
    from_rollout = build_samples(trajs, layout)
    from_text = [s for t in trajs for s in encode_episode(chat, episode_of(t), layout, history_turns=1)]
    assert len(from_rollout) == len(from_text)
    for a, b in zip(from_rollout, from_text):
        assert a.ids.tolist() == b.ids.tolist()
        assert a.mask.tolist() == b.mask.tolist()
    # the responses end with the end-of-turn token, so the cloned model learns to stop
    last = from_text[-1]
    assert last.ids[last.mask][-1] == chat.end_of_turn_id


def test_sft_on_oracle_demonstrations_learns_the_toy_env(tmp_path, train_device):
    from agentgym.train.sft.run import SFTRun

    run = SFTRun(toy_config(tmp_path, "sft.expert=oracle", f"model.device={train_device}"))
    before = run.evaluate()["eval/success"]
    ckpt = run.run()
    rows = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if r["phase"] == "train"]
    after = [r for r in rows if r["phase"] == "eval"][0]["eval/success"]
    assert before <= 0.3
    assert after >= 0.9
    assert losses[-1] < 0.2 * losses[0]
    assert rows[0]["prompt_token_share"] < 1 and rows[0]["demo_success"] == 1.0
    assert (ckpt / "model" / "config.json").is_file() and (tmp_path / "sft" / "latest").read_text() == ckpt.name


def test_choice_sft_with_noisy_demonstrations_learns_to_pick_among_admissible_actions(tmp_path, train_device):
    """sft.objective=choice: cross-entropy of the expert's label among the admissible actions, on demos
    where a third of the turns played a random action (the label stays the expert's)."""
    from agentgym.train.sft.run import SFTRun
    from agentgym.train.sft.data import expert_choice_sequences

    cfg = toy_config(tmp_path, "sft.expert=oracle", "sft.objective=choice", "sft.expert_noise=0.3",
                     "sft.failed_demos=keep", "rollout.action_mode=admissible", "sft.lr=0.003",
                     f"model.device={train_device}")
    run = SFTRun(cfg)
    seqs, stats = expert_choice_sequences(cfg, run.chat)
    played = [t for s in seqs for t in s.turns]
    assert stats["candidates_per_turn"] > 1 and len(played) == stats["choice_turns"]
    before = run.evaluate()["eval/success"]
    run.run()
    rows = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["phase"] == "train"]
    after = [r for r in rows if r["phase"] == "eval"][0]["eval/success"]
    assert before <= 0.5 and after >= 0.9
    assert train[-1]["choice_accuracy"] > train[0]["choice_accuracy"]
    with pytest.raises(ConfigError, match="objective=choice"):
        toy_config(tmp_path, "sft.expert_noise=0.2")


def test_choice_sft_skips_failed_demonstrations_unless_told_to_keep_them(tmp_path):
    """An expert cut by its turn limit (sft.max_turns=1; the key-door needs 2) demonstrates nothing by default:
    every episode is skipped, counted, and the stage says why; sft.failed_demos=keep trains on their labels."""
    from agentgym.train.sft.data import expert_choice_sequences
    from agentgym.train.sft.run import SFTRun

    base = ["sft.expert=oracle", "sft.objective=choice", "rollout.action_mode=admissible", "sft.max_turns=1",
            "sft.episodes=4"]
    cfg = toy_config(tmp_path, *base)
    run = SFTRun(cfg)
    with pytest.raises(ConfigError, match=r"no expert episode succeeded.*'demo_skipped': 4\.0.*failed_demos=keep"):
        expert_choice_sequences(cfg, run.chat)
    seqs, stats = expert_choice_sequences(toy_config(tmp_path, *base, "sft.failed_demos=keep"), run.chat)
    assert stats["demo_success"] == 0.0 and stats["demo_skipped"] == 0.0 and stats["choice_turns"] == 4  # 1 each
    _, stats = expert_choice_sequences(toy_config(tmp_path, *base[:-2], "sft.episodes=4"), run.chat)
    assert stats["demo_success"] == 1.0 and stats["demo_skipped"] == 0.0 and stats["choice_turns"] == 8
    with pytest.raises(ConfigError, match="failed_demos=keep needs sft.objective=choice"):
        toy_config(tmp_path, "sft.failed_demos=keep")


def test_sft_checkpoint_is_a_policy_and_an_rl_start(tmp_path):
    import torch

    from agentgym.policies import load_policy
    from agentgym.engine.rollout import RolloutConfig, rollout
    from agentgym.policies.base import SamplingParams
    from agentgym.train.sft.run import with_sft_start
    from agentgym.train.trainer import Trainer

    # RL from a solved policy at a tenth of the from-scratch lr: its batches carry almost no advantage, and Adam's
    # first steps move every weight by ~lr whatever the gradient's size, so at the preset's 3e-3 (or 1e-3) one
    # iteration random-walks the tiny model off the solution (greedy eval 1.0 -> 0.0; 1.0 stays 1.0 at 3e-4)
    cfg = toy_config(tmp_path, "sft.enabled=true", "train.iterations=1", "eval.every=1", "sft.evaluate=false",
                     "optim.lr=3e-4")
    rl = with_sft_start(cfg)
    assert rl.model.policy.startswith("checkpoint:") and not rl.sft.enabled
    ckpt = rl.model.policy.split(":", 1)[1]
    # a checkpoint: policy, evaluated greedily, solves the held-out tasks
    policy = load_policy(f"checkpoint:{ckpt}", device="cpu")
    config = RolloutConfig(max_turns=8, layout="step", history_turns=0,
                           sampling=SamplingParams(temperature=0.0, max_tokens=3))
    trajs = rollout("agentgym/Toy-KeyDoor-OneWord-v0", policy, None, list(range(10**6, 10**6 + 8)), 1, config,
                    env_kwargs={"length": 2, "key_bonus": 0.5, "key_at_start": True}, reset_options={"split": "test"})
    assert np.mean([t.success for t in trajs]) >= 0.9
    # RL starts from exactly those weights, and one iteration runs
    trainer = Trainer(rl)
    try:
        own = trainer.model.state_dict()
        for name, tensor in policy.model.state_dict().items():
            assert torch.equal(own[name], tensor), name
        trainer.run()
    finally:
        trainer.close()
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["eval/success"] >= 0.5
    # a second `train` with the stage on reuses the SFT checkpoint instead of redoing it
    assert with_sft_start(cfg).model.policy == rl.model.policy


def test_trajectories_and_transcripts_sources(tmp_path, tiny_tokenizer):
    from agentgym.train.sft.run import SFTRun

    chat = ChatFormat.from_tokenizer(tiny_tokenizer)
    cfg = toy_config(tmp_path, "sft.episodes=3")
    trajs = expert_trajectories(cfg, chat)
    failed = trajs[0].__class__(**{**trajs[0].__dict__, "success": False})
    lines = [json.dumps({"env": "x", "seed": t.seed, "sample": 0, "trajectory": t.to_dict()}) for t in trajs]
    lines += [json.dumps({"trajectory": failed.to_dict()}), '{"trajectory": {"turns": [', "", "garbage"]
    (tmp_path / "ev").mkdir()
    (tmp_path / "ev" / "trajectories.jsonl").write_text("\n".join(lines))
    episodes, stats = trajectory_file_episodes(tmp_path / "ev")
    assert len(episodes) == 3 and stats["bad_lines"] == 2 and stats["demo_success"] == 0.75
    assert episodes[0].actions == tuple(t.action for t in trajs[0].turns)

    chats = [{"messages": [{"role": "system", "content": "Go right."}, {"role": "user", "content": "room 0"},
                           {"role": "assistant", "content": "right"}, {"role": "user", "content": "room 1"},
                           {"role": "assistant", "content": "open door"}]},
             {"messages": [{"role": "assistant", "content": "no user first"}]}, "not json"]
    path = tmp_path / "chats.jsonl"
    path.write_text("\n".join(c if isinstance(c, str) else json.dumps(c) for c in chats))
    episodes, stats = transcript_episodes(path)
    assert episodes == [Episode("Go right.", ("room 0", "room 1"), ("right", "open door"))]
    assert stats["bad_lines"] == 2
    samples = encode_episode(chat, episodes[0], "trajectory")
    assert chat.decode(samples[0].ids[samples[0].mask].tolist()).split() == ["right", "<|im_end|>", "open", "door",
                                                                            "<|im_end|>"]
    # the same through a config and a short training run
    run = SFTRun(toy_config(tmp_path / "t", "sft.source=transcripts", f"sft.path={path}", "sft.epochs=1",
                            "sft.evaluate=false"))
    assert (run.run() / "model").is_dir()


def test_save_every_keeps_the_warm_starts_curve(tmp_path):
    """sft.save_every=N: a checkpoint every N steps in steps/, none dropped (checkpoint.keep is for the run dir);
    the run dir holds the finished one alone, which `latest` names, and the earlier ones hold their step's
    weights."""
    import torch

    from agentgym.train.sft.run import SFTRun

    run = SFTRun(toy_config(tmp_path, "sft.episodes=8", "sft.batch_size=4", "sft.epochs=3", "sft.save_every=2",
                            "sft.evaluate=false", "checkpoint.keep=1"))
    last = run.run()
    sft_dir, steps = last.parent, int(last.name.split("-")[1])
    saved = sorted(int(p.name.split("-")[1]) for p in (sft_dir / "steps").glob("ckpt-*"))
    assert steps >= 6 and saved == list(range(2, steps, 2))
    assert [p.name for p in sft_dir.glob("ckpt-*")] == [last.name]
    assert (sft_dir / "latest").read_text().strip() == last.name

    def weights(ckpt):
        from transformers import AutoModelForCausalLM

        return [p.detach() for p in AutoModelForCausalLM.from_pretrained(str(ckpt / "model")).parameters()]

    assert any(not torch.equal(a, b) for a, b in zip(weights(sft_dir / "steps" / "ckpt-4"), weights(last)))
    with pytest.raises(ConfigError, match="save_every"):
        toy_config(tmp_path, "sft.save_every=-1")


def test_bad_sft_config_says_how_to_fix_it(tmp_path):
    with pytest.raises(ConfigError, match="sft.path"):
        toy_config(tmp_path, "sft.source=trajectories")
    with pytest.raises(ConfigError, match="did you mean|Did you mean"):
        toy_config(tmp_path, "sft.epoch=2")
    from agentgym.train.sft.run import SFTRun

    with pytest.raises(ConfigError, match="trajectories.jsonl"):
        SFTRun(toy_config(tmp_path, "sft.source=trajectories", f"sft.path={tmp_path}/nothing")).run()


def test_sft_cli_one_line_error(capsys):
    from agentgym.cli import main

    assert main(["sft", "toy_learning", "sft.source=bogus"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sft.source" in err[0]
    # the RL stage's optimizer is refused where only the sft stage runs, never silently ignored
    assert main(["sft", "toy_learning", "optim.optimizer=sgd", "optim.lr=0.1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "optim.optimizer=sgd is the RL stage's" in err[0]


def test_quickstart_preset_warm_starts_a_searching_agent():
    cfg = load_config("quickstart_cpu")
    assert cfg.sft.enabled and cfg.sft.source == "expert" and cfg.sft.expert == "fair"
    assert cfg.rollout.layout == "trajectory" and cfg.rollout.max_turns >= 20  # the fair expert needs ~12-24
    from agentgym.envs.household.env import HouseholdEnv

    env = HouseholdEnv()
    obs, _ = env.reset(seed=cfg.sft.seed_start)
    assert "Admissible actions" not in obs  # no per-turn action list: it would triple the prompt


def test_the_sft_evaluation_uses_the_configured_prefix_cache(tmp_path, monkeypatch):
    from agentgym.policies import hf
    from agentgym.train.sft.run import SFTRun

    real, made = hf.HFPolicy, []
    monkeypatch.setattr(hf, "HFPolicy", lambda *a, **kw: made.append(real(*a, **kw)) or made[-1])
    for mode in ("generate", "admissible"):  # the admissible policy's own free policy holds its cache
        made.clear()
        SFTRun(toy_config(tmp_path, "sft.expert=oracle", "model.prefix_cache_mb=0",
                          f"rollout.action_mode={mode}")).evaluate()
        assert made and all(p.prefix_store is None for p in made), mode  # 0: no cache, as the setting says
    made.clear()
    SFTRun(toy_config(tmp_path, "sft.expert=oracle")).evaluate()
    assert made and all(p.prefix_store is not None for p in made)  # unset: the policy's own default
