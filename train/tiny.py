"""A tiny random causal LM with a word-level tokenizer, for CPU learning runs.

`model.policy: tiny:keydoor` builds (once, under the run dir) a 2-layer Llama (hidden 64, 2 heads) whose
vocabulary is the words of the one-word key-door env (`agentgym/Toy-KeyDoor-OneWord-v0`, envs/toy/oneword.py)
plus ChatML special tokens, so a randomly initialised model already says a valid command now and then, and
GiGPO/GRPO can be shown to learn in minutes.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from agentgym.registration import discover

ONE_WORD_ENV = "agentgym/Toy-KeyDoor-OneWord-v0"
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|> {% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant {% endif %}")
SPECIALS = ["[PAD]", "[UNK]", "<|im_start|>", "<|im_end|>"]


def register_tiny_envs() -> None:
    """The toy family registers ONE_WORD_ENV now; this only makes sure the registry has loaded it (older callers)."""
    discover()


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
    heads = max(1, hidden // 32)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2,
                         # heads of 32 dims: the smallest vLLM's CPU attention takes (the engine serves it too)
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                         max_position_embeddings=512, tie_word_embeddings=True, initializer_range=0.2,
                         pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.pad_token_id)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    torch.random.set_rng_state(state)
    # built aside, then renamed in: torchrun's ranks all build it at once, and none may read a half-written file
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    tmp.chmod(0o755)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / "DONE").write_text("ok")
    try:
        tmp.rename(target)
    except OSError:  # another process got there first with the same model (same seed)
        shutil.rmtree(tmp, ignore_errors=True)
        if not (target / "DONE").exists():
            raise
    return target
