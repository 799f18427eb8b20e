"""Expert replay during RL: PPO-ptx's idea on the admissible-choice update.

RL's batch visits a few dozen states an iteration, and every step moves the shared weights, so greedy
choices in states the batch never saw drift too (the tasks SFT solved and RL newly fails). With
`algorithm.regularisers.expert_coef` > 0 each choice-update step also takes expert_coef x the turn-mean
cross-entropy of the expert's action on `expert_episodes` demonstrations drawn from the ones the warm start
learnt from (the `sft:` section: its env, split, seeds and expert), holding the expert's choices where RL has
no reason to move them. The demonstrations are played once; each one's frozen-trunk output is computed the
first time it is drawn and kept (the trunk never trains).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Sequence

from agentgym.train.updaters.choice_ppo import ChoiceSequence, sequence_trunk


@dataclass(frozen=True)
class ExpertDraw:
    """One update's demonstrations, their trunk outputs and the loss weight."""

    seqs: list[ChoiceSequence]
    trunks: list[Any]
    coef: float

    def backward(self, model: Any, device: Any) -> tuple[float, int, int]:
        """Backward of coef x the turn-mean cross-entropy of the expert's choices; (the cross-entropy, turns,
        turns whose best-scored action is the expert's)."""
        from agentgym.train.sft.run import choice_step

        return choice_step(model, self.seqs, range(len(self.seqs)), device, self.trunks, scale=self.coef)


class ExpertReplay:
    """Demonstrations (`ChoiceSequence`s labelled with the expert's choices), `per_update` episodes of them per
    update (an episode is one sequence in the trajectory layout, one per turn in the step layout)."""

    def __init__(self, seqs: Sequence[ChoiceSequence], coef: float, per_update: int):
        self.seqs, self.coef = list(seqs), coef
        by_episode: dict[int, list[int]] = {}
        for i, seq in enumerate(self.seqs):
            by_episode.setdefault(seq.turns[0].episode, []).append(i)
        self.episodes = list(by_episode.values())
        self.per_update = min(per_update, len(self.episodes))
        self._trunks: dict[int, Any] = {}

    @classmethod
    def from_config(cls, config: Any, chat: Any) -> ExpertReplay:
        """The sft: section's demonstrations, played now (the ones the warm start learnt from)."""
        from agentgym.train.sft.data import expert_choice_sequences

        seqs, _ = expert_choice_sequences(config, chat)
        r = config.algorithm.regularisers
        return cls(seqs, r.expert_coef, r.expert_episodes)

    def draw(self, seed: int, model: Any, device: Any) -> ExpertDraw:
        """An update's demonstrations (drawn without replacement, seeded by `seed`) with their trunk outputs."""
        chosen = random.Random(seed).sample(self.episodes, self.per_update)
        picked = [i for episode in chosen for i in episode]
        for i in picked:
            if i not in self._trunks:
                self._trunks[i] = sequence_trunk(model, self.seqs[i], device)
        return ExpertDraw([self.seqs[i] for i in picked], [self._trunks[i] for i in picked], self.coef)
