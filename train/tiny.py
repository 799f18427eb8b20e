"""A tiny random causal LM with a word-level tokenizer, and a one-word key-door env, for CPU learning runs.

`model.policy: tiny:keydoor` builds (once, under the run dir) a 2-layer Llama (hidden 64) whose
vocabulary is the words of the key-door env plus ChatML special tokens, so a randomly initialised
model already says a valid command now and then, and GiGPO/GRPO can be shown to learn in minutes.

`agentgym/Toy-KeyDoor-OneWord-v0` is the key-door corridor (length 3) where an action is its first
word: left, right, take (the key), open (the door), and each observation says which way the door is,
so a policy that reads only the current observation can solve it. Rewards come only for taking the key
(`key_bonus`) and opening the door, several turns after the moves that made them possible.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from agentgym.envs.toy.keydoor import KeyDoorEnv

ONE_WORD_ENV = "agentgym/Toy-KeyDoor-OneWord-v0"
_WORDS = {"take": "take key", "open": "open door", "left": "left", "right": "right"}
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|> {% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant {% endif %}")
SPECIALS = ["[PAD]", "[UNK]", "<|im_start|>", "<|im_end|>"]


class OneWordKeyDoor(KeyDoorEnv):
    """Key-door where the first word of the action is the command (take -> take key, open -> open door)."""

    def __init__(self, length: int = 3, key_at_start: bool = False, **kwargs: Any):
        super().__init__(length=length, **kwargs)
        self.key_at_start = key_at_start

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = super().reset(seed=seed, options=options)
        if self.key_at_start:  # the short variant: take the key where you stand, then find the door
            self.key_pos = self.pos
            obs = self._describe()
            info = self._info(obs, valid=True)
        return obs, info

    @property
    def instructions(self) -> str:
        return "Take the key, then open the door: left, right, take or open."

    def _describe(self) -> str:
        # a direction hint keeps the task solvable from the current observation alone (history_turns: 0)
        text = super()._describe()
        if self.pos != self.door_pos:
            text += " The door is to the " + ("left." if self.door_pos < self.pos else "right.")
        return text

    def step(self, action: str):
        words = re.findall(r"[a-z]+", action.lower()[:200])
        command = _WORDS.get(words[0], " ".join(words[:2])) if words else action
        return super().step(command)


def register_tiny_envs() -> None:
    from agentgym.registration import register

    register(ONE_WORD_ENV, "agentgym.train.tiny:OneWordKeyDoor", max_turns=8)


def keydoor_vocab() -> list[str]:
    """The words that matter in the one-word key-door env (the rest of its text reads as [UNK]), so a
    random model's output is a command often enough for learning to start."""
    return SPECIALS + ["left", "right", "take", "open", "room", "0", "1", "2", "key", "door", "here", "hold", "empty",
                       "."]


def build_tokenizer(vocab: list[str]) -> Any:
    from tokenizers import Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                   eos_token="<|im_end|>", additional_special_tokens=["<|im_start|>"])
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny(target: Path, name: str = "keydoor", seed: int = 0, layers: int = 2, hidden: int = 64) -> Path:
    """Write a random tiny Llama + word-level tokenizer to `target` (kept if already there)."""
    if name != "keydoor":
        raise ValueError(f"unknown tiny model {name!r}; the one built in is tiny:keydoor")
    target = Path(target)
    if (target / "DONE").exists():
        return target
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer(keydoor_vocab())
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=512, tie_word_embeddings=True, initializer_range=0.2,
                         pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.pad_token_id)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    torch.random.set_rng_state(state)
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target, safe_serialization=True)
    tokenizer.save_pretrained(target)
    (target / "DONE").write_text("ok")
    return target
