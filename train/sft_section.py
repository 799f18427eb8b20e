"""The `sft:` section of a training config: behaviour cloning before RL (or alone, `agentgym sft`).

    sft:
      enabled: true            # `agentgym train` runs this stage first, then RL from its checkpoint
      source: expert           # expert | trajectories | transcripts
      expert: fair             # fair (env.expert_action, sees what the agent sees) | oracle (env.oracle_action)
      episodes: 64             # expert demonstrations (successful ones are kept)
      epochs: 3

Samples use the rollout section's layout, history window and observation limit, so SFT trains on the
very token sequences an RL rollout would produce; the model section picks LoRA or full weights.

The section stands here, not in its stage's folder (train/sft/), because that stage runs a whole TrainConfig
and builds the model through setup.py: sft/ imports the config, so the config must import nothing of sft/.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentgym.errors import ConfigError

SOURCES = ("expert", "trajectories", "transcripts")


@dataclass(frozen=True)
class SFTSection:
    enabled: bool = False
    """Run SFT before RL in `agentgym train` (`agentgym sft` runs it regardless)."""
    source: Literal["expert", "trajectories", "transcripts"] = "expert"
    """expert: demonstrations played in rollout.env; trajectories: the successful episodes of an eval's
    trajectories.jsonl (`path`); transcripts: a JSONL of {"messages": [...]} chats (`path`)."""
    expert: Literal["fair", "oracle"] = "fair"
    """fair: env.expert_action() where the env has one (acts only on what the agent sees), else the
    oracle; oracle: env.oracle_action() (may see the hidden state)."""
    objective: Literal["tokens", "choice"] = "tokens"
    """tokens: NLL of the action tokens; choice: cross-entropy of the expert's action among the env's
    admissible actions, scored as `admissible:` policies and rollout.action_mode=admissible act
    (log-likelihood of each, renormalised): every turn also pushes the other actions down. Needs
    source=expert and an env listing info["admissible_actions"]."""
    expert_noise: float = 0.0
    """objective=choice: the share of demonstration turns that play a random admissible action while the
    expert's action stays the label (DART-style noise: the clone learns to recover from its mistakes)."""
    failed_demos: Literal["skip", "keep"] = "skip"
    """objective=choice: what to do with an expert episode that did not succeed. skip: leave it out, counted
    (`demo_skipped`); keep: train on its labels too (the expert's move is right in every state it saw, e.g.
    a fair search cut by the turn limit, or expert_noise's random turns). objective=tokens always skips."""
    path: str = ""
    """trajectories.jsonl (or an eval dir holding it) or a transcripts JSONL."""
    episodes: int = 64
    """Expert episodes to play (seeds seed_start, seed_start+1, ...; failed ones are dropped)."""
    seed_start: int = 2_000_000
    """First demonstration seed (far from RL training seeds and eval seeds)."""
    split: str = "train"
    max_turns: int | None = None
    """Turn limit of expert episodes (None: rollout.max_turns, else the env's)."""
    epochs: int = 3
    lr: float = 1e-4
    batch_size: int = 8
    """Samples per optimizer step (accumulated over micro-batches of train.micro_batch_size)."""
    train_layers: int = 0
    """Full-weight SFT of only the top N decoder layers (and the final norm), for this stage even when
    model.lora is on (RL then trains adapters on the SFT model); 0 = every weight, or LoRA when
    model.lora.enabled. The top 8 of SmolLM2-135M's 30 layers train 2.1x faster than all on a CPU."""
    warmup_steps: int = 0
    run_dir: str = ""
    """Where the SFT checkpoint goes ("": TRAIN_RUN_DIR/sft)."""
    evaluate: bool = True
    """After training, greedy success on the eval section's held-out seeds (eval.seeds, eval.split)."""
    save_every: int = 0
    """Also save a checkpoint every N optimizer steps, all kept, in the SFT run dir's `steps/` (steps/ckpt-N,
    steps/ckpt-2N, ...: the curve of a warm start; the run dir's `latest` names only the finished one);
    0: at the end only."""

    def __post_init__(self) -> None:
        if self.objective not in ("tokens", "choice"):
            raise ConfigError(f"sft.objective must be tokens or choice, got {self.objective!r}")
        if self.objective == "choice" and self.source != "expert":
            raise ConfigError("sft.objective=choice needs sft.source=expert (saved trajectories do not keep the "
                              "admissible actions); use sft.objective=tokens")
        if not 0.0 <= self.expert_noise < 1.0:
            raise ConfigError(f"sft.expert_noise must be in [0, 1), got {self.expert_noise}")
        if self.failed_demos not in ("skip", "keep"):
            raise ConfigError(f"sft.failed_demos must be skip or keep, got {self.failed_demos!r}")
        if self.failed_demos == "keep" and self.objective != "choice":
            raise ConfigError("sft.failed_demos=keep needs sft.objective=choice (a failed episode's actions are not "
                              "token targets): leave failed_demos out")
        if self.expert_noise and self.objective != "choice":
            raise ConfigError("sft.expert_noise needs sft.objective=choice (noisy turns are not token targets)")
        if self.source != "expert" and not self.path:
            raise ConfigError(f"sft.source={self.source} needs sft.path (a trajectories.jsonl or an eval dir, or a "
                              "transcripts JSONL)")
        for name in ("episodes", "epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"sft.{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0 or self.train_layers < 0 or self.warmup_steps < 0 or self.save_every < 0:
            raise ConfigError("sft.lr must be > 0 and sft.train_layers, sft.warmup_steps, sft.save_every >= 0")
        if self.max_turns is not None and self.max_turns < 1:
            raise ConfigError("sft.max_turns must be >= 1 or null")
