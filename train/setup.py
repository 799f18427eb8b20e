"""Build what the trainer needs from the config: model, tokenizer, rollout policy, chat format,
critic, KL reference, optimizer, and the env's tools. Heavy imports happen here, not at import time.

Model specs (`model.policy`):
    hf:NAME          the embedded default (smollm2-135m-instruct), a local HF dir or a hub id
    checkpoint:DIR   a training checkpoint (DIR/model, or DIR/latest's model)
    vllm:SPEC        SPEC one of the above (vllm:NAME = vllm:hf:NAME): train its HF weights here, generate
                     with a vLLM engine (a GPU, or vLLM's CPU build) that gets the weights after each update;
                     any back end registered with `rollout=` (policies/registry.py) the same way, KIND:SPEC
    tiny:keydoor     a tiny random Llama with a word-level tokenizer (train/tiny.py), for CPU learning runs
"""
from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any, TypedDict

from agentgym.chat import ChatFormat
from agentgym.errors import ConfigError, require
from agentgym.policies.registry import split_model_spec
from agentgym.train.batch import Components
from agentgym.train.config import TrainConfig


def model_path(config: TrainConfig, run_dir: Path) -> str:
    """The local folder or model name the trained model loads from (a tiny model is built here first)."""
    from agentgym.policies.registry import checkpoint_model_dir

    _, kind, name = split_model_spec(config.model.policy)
    if kind == "tiny":
        from agentgym.train import tiny

        return str(tiny.build_tiny(run_dir / "tiny-model", name, seed=config.train.seed))
    return checkpoint_model_dir(name) if kind == "checkpoint" else name


def load_model(config: TrainConfig, run_dir: Path) -> tuple[Any, Any]:
    """(model, tokenizer) on the configured device and dtype, in train mode."""
    torch = require("torch", "hf")
    m = config.model
    dtype = getattr(torch, m.dtype)
    from agentgym.policies.models import load_model_and_tokenizer, load_tokenizer

    name = model_path(config, run_dir)
    if m.init_from_config:
        transformers = require("transformers", "hf")
        tokenizer = load_tokenizer(name)
        cfg = transformers.AutoConfig.for_model(**{"vocab_size": len(tokenizer), **m.init_from_config})
        model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype)
    else:
        model, tokenizer = load_model_and_tokenizer(name, device="cpu", dtype=dtype)
    model.to(device=m.device, dtype=dtype)
    if m.gradient_checkpointing:
        # non-reentrant: gradients reach LoRA weights even though the frozen embeddings' outputs need none
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    if m.lora.enabled:
        peft = require("peft", "hf")
        lc = peft.LoraConfig(r=m.lora.r, lora_alpha=m.lora.alpha, lora_dropout=m.lora.dropout,
                             target_modules=list(m.lora.target_modules), task_type="CAUSAL_LM")
        model = peft.get_peft_model(model, lc)
    if m.train_layers:
        freeze_below_top_layers(model, m.train_layers)
    model.eval()  # no dropout: the trainer's log-probs must match the sampler's
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def freeze_below_top_layers(model: Any, n: int) -> int:
    """Train only the last `n` decoder layers and the final norm; returns the trainable parameter count."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if layers is None:
        raise ConfigError(f"train_layers needs a decoder with .layers; {type(base).__name__} has none "
                          "(set sft.train_layers=0 / model.train_layers=0)")
    for p in model.parameters():
        p.requires_grad_(False)
    keep = list(layers[-n:]) + [m for m in (getattr(decoder, "norm", None),) if m is not None]
    for module in keep:
        for p in module.parameters():
            p.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def make_policy(config: TrainConfig, model: Any, tokenizer: Any, run_dir: Path | None = None) -> Any:
    """The rollout policy: an HFPolicy sharing `model` in place, or a trainable back end's engine (vLLM, a
    plug-in's) fed pushed weights."""
    if split_model_spec(config.model.policy)[0] != "hf":
        return make_rollout_engine(config, tokenizer, run_dir or Path(config.train.run_dir))
    cache = prefix_cache_kwargs(config)
    if config.rollout.action_mode == "admissible":
        from agentgym.policies.admissible import AdmissiblePolicy

        return AdmissiblePolicy(model, tokenizer, **cache)
    from agentgym.policies.hf import HFPolicy

    return HFPolicy(model, tokenizer, **cache)


class PrefixCacheKwargs(TypedDict, total=False):
    prefix_cache_mb: float


def prefix_cache_kwargs(config: TrainConfig) -> PrefixCacheKwargs:
    """The HF policy's prefix-cache size from model.prefix_cache_mb; none (each policy's own default) when unset."""
    size = config.model.prefix_cache_mb
    return {} if size is None else {"prefix_cache_mb": size}


def make_rollout_engine(config: TrainConfig, tokenizer: Any, run_dir: Path) -> Any:
    """The trainable back end's engine (policies/registry.py, `rollout_backend`) on the model the trainer
    loaded, with the trainer's tokenizer (so prompts and the engine agree on ids); vLLM also gets the
    model.vllm section and reports log-probs after temperature scaling (as the trainer computes them)."""
    from agentgym.policies.registry import rollout_backend

    m = config.model
    backend = split_model_spec(m.policy)[0]
    path = model_path(config, run_dir)
    if backend != "vllm":
        return rollout_backend(backend)(path, tokenizer=tokenizer, seed=config.train.seed, dtype=m.dtype)
    kwargs: dict[str, Any] = {"logprobs_mode": "processed_logprobs", "seed": config.train.seed, "dtype": m.dtype,
                              "tokenizer": tokenizer, **m.vllm.engine_kwargs()}
    if config.rollout.max_context_tokens is not None:  # None: the engine takes the model's own context length
        kwargs["max_model_len"] = config.rollout.max_context_tokens + config.rollout.max_new_tokens
    if split_model_spec(m.policy)[1] == "tiny":  # a word-level tokenizer vLLM cannot load: ids in and out
        kwargs["skip_tokenizer_init"] = True
    if m.lora.enabled and m.vllm.lora_push == "adapter":  # the trainer pushes the adapter, not merged weights
        kwargs.update(enable_lora=True, max_lora_rank=m.lora.r)
    return rollout_backend("vllm")(path, **kwargs)


def make_reference(config: TrainConfig, model: Any) -> Any:
    """A context-manager factory yielding the frozen reference model (KL penalty), or None."""
    if config.algorithm.regularisers.kl_coef <= 0:
        return None
    if hasattr(model, "disable_adapter"):  # LoRA: the base model with adapters switched off
        @contextlib.contextmanager
        def adapters_off():
            with model.disable_adapter():
                yield model
        return adapters_off
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return lambda: contextlib.nullcontext(ref)


def make_optimizer(config: TrainConfig, model: Any, critic: Any) -> tuple[Any, Any]:
    torch = require("torch", "hf")
    o = config.optim
    groups = [{"params": [p for p in model.parameters() if p.requires_grad], "lr": o.lr}]
    if critic is not None:
        own = [p for n, p in critic.named_parameters() if p.requires_grad]
        groups.append({"params": own, "lr": o.critic_lr})
    if o.optimizer == "sgd":  # config refuses it with a critic
        optimizer = torch.optim.SGD(groups, weight_decay=o.weight_decay)
    else:
        optimizer = torch.optim.AdamW(groups, weight_decay=o.weight_decay, betas=o.betas, eps=o.eps)
    scheduler = None
    if o.warmup_steps > 0:
        warm = o.warmup_steps
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warm))
    return optimizer, scheduler


def env_tools(config: TrainConfig) -> tuple[str, list]:
    """Check the env id (did-you-mean on a typo) and read its tools for the chat template."""
    env_id, tools, _ = env_facts(config)
    return env_id, tools


def env_facts(config: TrainConfig) -> tuple[str, list, tuple[float, float] | None]:
    """The env id (checked, with a did-you-mean on a typo), its tools for the chat template and the step
    reward range it declares (the reward_sanity guardrail's)."""
    from agentgym.registration import make, reward_range

    env = make(config.rollout.env, **dict(config.rollout.env_kwargs))
    try:
        return config.rollout.env, list(getattr(env, "tools", []) or []), reward_range(env)
    finally:
        env.close()


def build_components(config: TrainConfig, run_dir: Path) -> Components:
    torch = require("torch", "hf")
    env_id, tools, rewards = env_facts(config)
    model, tokenizer = load_model(config, run_dir)
    from agentgym.train.critic import build_critic

    chat = ChatFormat.from_tokenizer(tokenizer, config.rollout.tool_format)
    critic = None
    if config.model.critic != "none":
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        critic = build_critic(config.model.critic, base, config.model.critic_model, config.model.device)
    optimizer, scheduler = make_optimizer(config, model, critic)
    return Components(model, tokenizer, make_policy(config, model, tokenizer), chat, critic,
                      make_reference(config, model), optimizer, scheduler, torch.device(config.model.device),
                      env_id, tools, int(tokenizer.pad_token_id), rewards)
