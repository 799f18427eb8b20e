"""The training config: one dataclass tree, loadable from YAML, with dotted CLI overrides.

    cfg = load_config("train/configs/toy_learning.yaml", ["algorithm.gamma=0.9", "train.iterations=5"])

Every section validates itself at construction and `TrainConfig` checks the combinations; every
error is a `ConfigError` whose message says how to fix it (unknown keys get "did you mean").
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Sequence

from agentgym.action_listing import check_action_mode
from agentgym.errors import ConfigError
from agentgym.policies.registry import split_model_spec
from agentgym.policies.vllm import VLLMSection
from agentgym.policy import SamplingParams
from agentgym.horizon import CONTEXT_FIELDS, context_defaults, context_lines
from agentgym.engine.rollout import RolloutConfig
from agentgym.train.algorithm import AlgorithmSection, MOVED_ALGORITHM_KEYS  # noqa: F401  (re-exported)
from agentgym.train.estimators import get_estimator
from agentgym.train.updaters import refuse_unsupported, updater_for
from agentgym.train.guardrails import GuardrailsSection
from agentgym.train.sft_section import SFTSection
from agentgym.train.config_loader import (PRESET_DIR, build, options_dict, read_yaml,  # noqa: F401  (re-exported)
                                          resolve_preset, with_overrides)
from agentgym.train.collectors.async_collector import check_async, refuse_async_options
from agentgym.train.collectors.lookahead import check_lookahead
from agentgym.train.gateway_section import GatewaySection, check_gateway
from agentgym.train.selfplay.config import SelfPlaySection, check_selfplay
from agentgym.train.collectors.branching import BranchingSection, check_branching



def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


@dataclass(frozen=True)
class LoraSection:
    enabled: bool = False
    """Train LoRA adapters (peft) instead of all weights."""
    r: int = 16
    """Adapter rank."""
    alpha: int = 32
    """LoRA scaling numerator (scale = alpha / r)."""
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    """Module names that get adapters."""

    def __post_init__(self) -> None:
        _check(self.r >= 1, f"model.lora.r must be >= 1, got {self.r}")


@dataclass(frozen=True)
class ModelSection:
    policy: str = "hf:smollm2-135m-instruct"
    """What trains and rolls out: hf:MODEL, checkpoint:DIR, tiny:keydoor, or vllm:SPEC (SPEC one of those:
    the trainer trains its HF weights, a vLLM engine rolls out and gets the weights after each update; a
    plug-in back end registered with `rollout=` trains the same way, KIND:SPEC; policies/registry.py)."""
    init_from_config: dict[str, Any] = field(default_factory=dict)
    """If set, build a randomly initialised model from this HF config dict (e.g. {model_type: qwen2,
    hidden_size: 896, ...}) with the tokenizer of `policy`, instead of loading `policy`'s weights."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: str = "cpu"
    """Device of the trained model: cpu, cuda, cuda:0."""
    gradient_checkpointing: bool = False
    critic: Literal["none", "shared", "separate"] = "none"
    """Value model for the GAE estimators: a value head on the policy's backbone, or a separate model."""
    critic_model: str = ""
    """For critic=separate: a local HF model dir (default: a copy of the policy's weights)."""
    lora: LoraSection = field(default_factory=LoraSection)
    train_layers: int = 0
    """Train the full weights of only the top N decoder layers (and the final norm); 0 = every weight.
    Backward then stops N layers down: on a CPU, cheaper than LoRA on every layer."""
    vllm: VLLMSection = field(default_factory=VLLMSection)
    """Engine settings for model.policy=vllm:..."""
    prefix_cache_mb: float | None = None
    """Memory the HF rollout policy keeps for past prompts' KV, reused when a prompt extends one; None = the
    policy's own default (512 MB generating, 2048 MB choosing among admissible actions), 0 = off. Each RL
    process holds it, and the choice update reuses the trunk states kept with it: on ScienceWorld 512 MB let
    23% of the update's rows reuse them instead of 78% (435 trunk tokens recomputed a turn instead of 120)."""

    def __post_init__(self) -> None:
        split_model_spec(self.policy)  # the policy grammar's trainable subset; a bad spec fails here, with the forms
        if self.prefix_cache_mb is not None and self.prefix_cache_mb < 0:
            raise ConfigError(f"model.prefix_cache_mb must be >= 0 (0 = no cache), got {self.prefix_cache_mb}")
        if self.prefix_cache_mb is not None and split_model_spec(self.policy)[0] != "hf":
            raise ConfigError("model.prefix_cache_mb sizes the HF rollout policy's cache; a rollout engine "
                              f"({self.policy}) keeps its own: drop model.prefix_cache_mb")
        if self.train_layers < 0:
            raise ConfigError(f"model.train_layers must be >= 0, got {self.train_layers}")
        if self.train_layers and self.lora.enabled:
            raise ConfigError("model.train_layers and model.lora.enabled both choose what trains: set "
                              "model.lora.enabled=false or model.train_layers=0")
        if self.vllm.lora_push == "merged" and not (self.lora.enabled and split_model_spec(self.policy)[0] == "vllm"):
            raise ConfigError("model.vllm.lora_push=merged chooses how a vllm: policy gets LoRA weights: set "
                              "model.lora.enabled=true with model.policy=vllm:..., or drop model.vllm.lora_push")


@dataclass(frozen=True)
class RolloutSection(RolloutConfig):
    """The rollout engine's config (agentgym.engine.rollout.RolloutConfig: layout, history window, token limits,
    executor, with the defaults every mode shares) plus what training needs: the env, the group sizes, the
    sampling of the rollout policy and the action mode. SFT's demonstrations and in-training evals run with it."""

    env: str = "agentgym/Toy-KeyDoor-v0"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    group_size: int = 8
    """G: rollouts per task (same seed)."""
    groups: int = 16
    """Tasks per iteration (each a fresh training seed)."""
    max_new_tokens: int = SamplingParams.max_tokens
    """Tokens per turn (the engine's sampling.max_tokens)."""
    temperature: float = 1.0
    top_p: float = 1.0
    action_mode: Literal["generate", "admissible"] = "generate"
    """generate: free text; admissible: choose among info["admissible_actions"] by likelihood, trained
    exactly on that renormalised distribution (policies/admissible.py, train/updaters/choice_ppo.py)."""
    seed_start: int = 0
    """Training seeds are seed_start, seed_start+1, ... (one per group, never reused)."""
    lookahead: int = 0
    """Admissible mode: play each task once greedily and, at chosen turns of each failed play, try this many other
    actions (the policy's next-ranked), each followed greedily to the end; train those turns' choices toward
    what returned more (agentgym/engine/lookahead.py). 0: sampled groups of rollout.group_size."""
    lookahead_points: int = 1
    """With rollout.lookahead: turns looked ahead per failed greedy play (loop turns first, then at random)."""
    lookahead_success_points: int = 0
    """With rollout.lookahead: turns looked ahead per successful greedy play (at random), so the update also
    sees the choices that worked, whether or not an alternative beat them."""
    sleep_level: int = 1
    """A rollout engine with sleep mode (vLLM) frees its KV cache (1) or also its weights (2) while the
    trainer updates; 0 keeps it resident."""
    tool_format: str = "auto"
    """How the policy writes tool calls and the env parses them: auto (the tokenizer's chat template decides),
    or a format of agentgym.toolcall_formats (hermes, llama3, mistral, qwen3_coder, deepseek_v3, harmony, ...)."""
    branching: BranchingSection = field(default_factory=BranchingSection)
    """Grow branches from env snapshots of the batch's plays and train on them too: where (turns, shares, a rule),
    how many, from every group or only the all-success / all-failure ones (train/collectors/branching.py)."""
    group_rewards: tuple[dict[str, Any], ...] = ()
    """Scorers of each task's G rollouts together, added to the last turn as their own components (RULER-style
    judging), e.g. [{name: ruler, fn: group_judge, weight: 1.0, kwargs: {model: "openai:http://HOST:PORT"}}]."""
    sampling: SamplingParams = field(default_factory=SamplingParams, init=False, repr=False)
    """Derived from temperature, top_p and max_new_tokens (not an option)."""

    def __post_init__(self) -> None:
        _check(self.group_size >= 1, f"rollout.group_size must be >= 1, got {self.group_size}")
        _check(self.groups >= 1, f"rollout.groups must be >= 1, got {self.groups}")
        _check(self.temperature > 0, "rollout.temperature must be > 0 for on-policy training "
                                     f"(got {self.temperature}); use eval.temperature for greedy eval")
        _check(self.max_new_tokens >= 1, "rollout.max_new_tokens must be >= 1")
        _check(0 < self.top_p <= 1, f"rollout.top_p must be in (0, 1], got {self.top_p}")
        _check(self.sleep_level in (0, 1, 2), f"rollout.sleep_level must be 0, 1 or 2, got {self.sleep_level}")
        _check(self.lookahead >= 0 and self.lookahead_points >= 1 and self.lookahead_success_points >= 0,
               f"rollout.lookahead and rollout.lookahead_success_points must be >= 0 and rollout.lookahead_points "
               f">= 1, got {self.lookahead}, {self.lookahead_success_points} and {self.lookahead_points}")
        object.__setattr__(self, "sampling", SamplingParams(self.temperature, self.top_p, self.max_new_tokens))
        from agentgym.toolcall_formats import FORMATS

        _check(self.tool_format == "auto" or self.tool_format in FORMATS,
               f"rollout.tool_format must be auto or one of {', '.join(FORMATS)}, got {self.tool_format!r}")
        super().__post_init__()

    def engine_config(self, *, temperature: float | None = None, stop: Sequence[str] = (), seed: int | None = None,
                      **overrides: Any) -> RolloutConfig:
        """This section as the engine's own RolloutConfig (every engine field as set here, so training, SFT
        demonstrations and in-training evals build prompts alike), sampling at `temperature` (default: the
        section's) with the chat format's `stop` strings; `overrides` replace engine fields (max_turns, ...)."""
        engine = {f.name: getattr(self, f.name) for f in dataclasses.fields(RolloutConfig)}
        t = self.temperature if temperature is None else temperature
        engine["sampling"] = SamplingParams(temperature=t, top_p=self.top_p if t > 0 else 1.0,
                                            max_tokens=self.max_new_tokens, stop=tuple(stop), seed=seed)
        return RolloutConfig(**{**engine, **overrides})


ADAMW_EPS, ADAMW_BETAS = 1e-8, (0.9, 0.999)  # the defaults, and what sgd requires them to stay


@dataclass(frozen=True)
class OptimSection:
    lr: float = 1e-5
    """Policy learning rate. The default suits the default model (SmolLM2-135M, full weights, on a CPU: 1e-6
    barely moves it in a short run); the GPU presets train 1.5B-7B models at 1e-6, LoRA and top-layer
    presets go higher (5e-5, 1e-4)."""
    critic_lr: float = 1e-5
    optimizer: Literal["adamw", "sgd"] = "adamw"
    """The RL policy's optimizer (the sft stage and ArCHer's critic keep AdamW). adamw moves every trained
    weight by ~lr from its first step whatever the gradient's size, so a batch with little signal still takes a
    full step in its noise's direction; sgd steps in proportion to the clipped gradient (lr is then a step length
    per unit of gradient norm, ~1e-1 rather than ~1e-5 on the CPU presets), so such a batch barely moves the
    weights."""
    eps: float = ADAMW_EPS
    """AdamW's epsilon: well above the gradients' per-weight size it turns AdamW into SGD with step lr / eps."""
    weight_decay: float = 0.0
    betas: tuple[float, float] = ADAMW_BETAS
    max_grad_norm: float = 1.0
    """Gradient-norm clip of the policy's parameters."""
    critic_max_grad_norm: float | None = None
    """Gradient-norm clip of the critic's own parameters (null: max_grad_norm), clipped separately."""
    warmup_steps: int = 0

    def __post_init__(self) -> None:
        _check(self.lr > 0, f"optim.lr must be > 0, got {self.lr}")
        _check(self.eps > 0, f"optim.eps must be > 0, got {self.eps}")
        _check(self.optimizer == "adamw" or (self.betas == ADAMW_BETAS and self.eps == ADAMW_EPS),
               "optim.betas and optim.eps are AdamW's: drop them or set optim.optimizer=adamw")


@dataclass(frozen=True)
class TrainSection:
    iterations: int = 100
    ppo_epochs: int = 1
    mini_batches: int = 1
    """Optimizer steps per PPO epoch (the batch is split into this many mini-batches)."""
    micro_batch_size: int = 8
    """Samples per forward/backward; gradients accumulate over a mini-batch."""
    token_budget: int | None = None
    """Token PPO: micro-batches of at most this many tokens packed in one row, no padding (train/updaters/
    token_rows.py; a longer sample gets a row of its own) instead of micro_batch_size padded samples. The choice
    update (admissible mode) always packs; here it caps its rows (unset: choice_rows.Shortcuts' 6,144): a
    backward's memory grows with the row."""
    seed: int = 0
    run_dir: str = "runs/agentgym"
    torch_threads: int = 0
    """torch intra-op threads (0: torch's default). 1 is fastest for tiny models on a busy CPU."""
    verify_tokens: bool = True
    """Check rollout token ids against the chat template before training (fails loudly on a mismatch)."""
    verify_samples: int = 0
    """How many samples (turns in the step layout, episodes in the trajectory layout) to verify per batch,
    drawn at random; 0 = every one."""
    distributed: Literal["none", "ddp", "fsdp"] = "none"
    """Data-parallel training over torchrun's processes, gloo on CPU, nccl on CUDA: ddp
    (DistributedDataParallel, a full replica per rank) or fsdp (FSDP2 fully_shard per decoder layer:
    parameters, gradients and optimizer state sharded over the ranks); the critic follows the policy.
    Under torchrun "none" means ddp. See README "Scaling out"."""
    guardrails: GuardrailsSection = field(default_factory=GuardrailsSection)
    """Run-health checks: stale rollout weights, no learning signal, a group that is not one task, token drift,
    reward sanity, collapse, tool errors."""
    push_weights: bool = True
    """Send the updated weights to a rollout engine with its own copy (vLLM) after each update. false is a
    fault injection for the stale_weights guard (the engine keeps its initial weights), never for real runs."""
    mode: Literal["sync", "async"] = "sync"
    """sync: roll out a batch, update, push weights, repeat. async: rollout workers keep playing episodes with
    the newest weights they have while the trainer updates on finished ones (train/async_rl.py, README "Async RL")."""
    max_staleness: int = 1
    """Async: η, how many updates ahead of the weights a rollout may start; an episode whose oldest turn is more
    than η versions old is dropped or kept, as `staleness` says. η = 0 with one worker is the sync loop exactly."""
    staleness: Literal["drop", "correct"] = "drop"
    """Async: what happens to an episode more than max_staleness versions old: dropped, or trained with the
    decoupled PPO weight min(π_prox / π_behav, algorithm.loss.tis_cap) like every async episode."""
    batch_order: Literal["finish", "start"] = "finish"
    """Async: the groups a batch takes: the first to finish, or (duration-aware) the earliest started, waiting
    for a slow one rather than letting faster, later groups overtake it (which favours fast actions)."""
    rollout_workers: int = 1
    """Async: rollout threads, each playing `groups_per_rollout` groups at a time."""
    groups_per_rollout: int = 0
    """Async: groups a rollout worker plays in one call (0: rollout.groups; 1: each task as soon as it can)."""
    change_kept: float = 1.0
    """Share of training's weight change the final weights keep: start + change_kept x (trained - start), applied
    after the last iteration, before its eval and checkpoint (train/merge.py; WiSE-FT / WARP's interpolation
    toward the initialisation). 1: the trained weights as they are."""
    soup_runs: int = 1
    """K > 1: K independent runs of this config from the same start (member k: seed + 1000 k, rollout.seed_start
    + k x 10^8, in RUN_DIR/soup/run-k), played side by side as processes with the threads split among them, whose
    final weights are averaged into RUN_DIR's checkpoint (train/soup.py; model soups, WARP's merge of RL runs)."""

    def __post_init__(self) -> None:
        if self.mode == "sync":
            refuse_async_options(self)
        _check(0 < self.change_kept <= 1, f"train.change_kept is the share of the weight change kept, in (0, 1]: "
                                          f"got {self.change_kept}")
        _check(self.max_staleness >= 0, f"train.max_staleness must be >= 0, got {self.max_staleness}")
        _check(self.rollout_workers >= 1 and self.groups_per_rollout >= 0,
               "train.rollout_workers must be >= 1 and train.groups_per_rollout >= 0")
        _check(self.iterations >= 1, f"train.iterations must be >= 1, got {self.iterations}")
        _check(self.soup_runs >= 1, f"train.soup_runs is how many runs are averaged, >= 1: got {self.soup_runs}")
        _check(self.verify_samples >= 0, f"train.verify_samples must be >= 0, got {self.verify_samples}")
        _check(self.ppo_epochs >= 1 and self.mini_batches >= 1 and self.micro_batch_size >= 1,
               "train.ppo_epochs, train.mini_batches and train.micro_batch_size must be >= 1")
        _check(self.token_budget is None or self.token_budget >= 1,
               f"train.token_budget must be >= 1 tokens (or unset for padded micro-batches), got {self.token_budget}")


@dataclass(frozen=True)
class EvalSection:
    every: int = 0
    """Evaluate every N iterations (0: never)."""
    seeds: int = 32
    seed_start: int = 1_000_000
    """Held-out seeds: seed_start ... seed_start + seeds - 1 (far from training seeds)."""
    temperature: float = 0.0
    split: str = "test"


@dataclass(frozen=True)
class LoggingSection:
    tensorboard: bool = False
    wandb: bool = False
    wandb_project: str = "agentgym"
    progress: bool = True
    """A tqdm progress bar with ETA when stderr is a terminal."""


@dataclass(frozen=True)
class CheckpointSection:
    every: int = 0
    """Checkpoint every N iterations (0: only at the end)."""
    keep: int = 2
    resume: str = ""
    """"auto": resume from run_dir's latest checkpoint if any; a path: from that checkpoint."""


@dataclass(frozen=True)
class TrainConfig:
    model: ModelSection = field(default_factory=ModelSection)
    rollout: RolloutSection = field(default_factory=RolloutSection)
    algorithm: AlgorithmSection = field(default_factory=AlgorithmSection)
    optim: OptimSection = field(default_factory=OptimSection)
    train: TrainSection = field(default_factory=TrainSection)
    eval: EvalSection = field(default_factory=EvalSection)
    logging: LoggingSection = field(default_factory=LoggingSection)
    checkpoint: CheckpointSection = field(default_factory=CheckpointSection)
    sft: SFTSection = field(default_factory=SFTSection)
    """Behaviour cloning before RL (train/sft_section.py; its stage is train/sft/)."""
    selfplay: SelfPlaySection = field(default_factory=SelfPlaySection)
    """Self-play and a league on a multi-agent env (train/selfplay/config.py)."""
    gateway: GatewaySection = field(default_factory=GatewaySection)
    """Train an outside harness through the OpenAI-compatible gateway (train/gateway_section.py)."""

    def __post_init__(self) -> None:
        a, m, r = self.algorithm, self.model, self.rollout
        get_estimator(a.estimator)  # an unknown name fails first, with a did-you-mean
        refuse_unsupported(self)  # what the chosen updater cannot do, named with its fix
        estimator = get_estimator(a.estimator)
        if estimator.needs_critic:
            _check(m.critic != "none", f"algorithm.estimator={a.estimator} needs a critic: set model.critic=shared "
                                       "(value head on the policy) or model.critic=separate")
        elif estimator.needs_groups and not r.lookahead:  # lookahead's groups are a turn's play-outs
            _check(r.group_size >= 2, f"algorithm.estimator={a.estimator} compares rollouts of one task: set "
                                      f"rollout.group_size >= 2 (got {r.group_size})")
        _check(not (self.optim.optimizer == "sgd" and m.critic != "none"),
               "optim.optimizer=sgd steps the policy only: with model.critic set use optim.optimizer=adamw")
        _check(not (a.dynamic_sampling and r.group_size < 2),
               "algorithm.dynamic_sampling drops groups without reward variance: it needs rollout.group_size >= 2")
        _check(a.dynamic_sampling or a.dynamic_sampling_keep == "returns",
               "algorithm.dynamic_sampling_keep chooses what dynamic sampling keeps: set algorithm.dynamic_sampling=true "
               "or leave dynamic_sampling_keep out")
        _check(a.dynamic_sampling_keep == "returns" or estimator.turn_advantages is not None,
               f"algorithm.dynamic_sampling_keep=advantages reads a critic-free estimator's turn advantages, and "
               f"{a.estimator} needs a critic: set algorithm.dynamic_sampling_keep=returns")
        _check(not (m.lora.enabled and m.critic == "separate" and m.critic_model == ""),
               "model.critic=separate with LoRA needs model.critic_model (a local HF model dir)")
        _check(not (m.policy.startswith("vllm:") and r.action_mode == "admissible"),
               "model.policy=vllm:... generates free text, and rollout.action_mode=admissible scores the env's "
               "actions with the trained HF model: use model.policy=hf:... or rollout.action_mode=generate")
        _check(not (r.action_mode == "admissible" and r.layout == "fold" and r.fold_summary),
               "rollout.action_mode=admissible picks among the env's actions and cannot write a fold's summary: set "
               "rollout.fold_summary=false (fold with the env's state summary only) or another rollout.layout")
        check_action_mode(r.env, r.action_mode, dict(r.env_kwargs))  # admissible needs an env that lists its actions
        _check(not (self.sft.enabled and r.layout == "fold"),
               "sft demonstrations are laid out as trajectory or step samples: set rollout.layout=trajectory or "
               "step with sft.enabled, or train with layout=fold without the sft stage")
        _check(self.eval.every >= 0 and self.checkpoint.every >= 0, "eval.every and checkpoint.every must be >= 0")
        _check(not r.max_envs or not (r.lookahead or r.branching.mode != "off" or self.selfplay.enabled),
               "rollout.max_envs plays a rollout's episodes in waves, and rollout.lookahead, rollout.branching and "
               "selfplay build their own env pools: set rollout.max_envs=0 with them")
        _check(self.train.push_weights or split_model_spec(m.policy)[0] != "hf",
               "train.push_weights=false only applies to a rollout engine with its own weights (model.policy=vllm:...); "
               "the HF policy generates with the trained module itself")

        _check(self.train.change_kept == 1 or not (m.lora.enabled or self.train.distributed != "none"),
               "train.change_kept interpolates the full weights of one process: set model.lora.enabled=false and "
               "train.distributed=none, or train.change_kept=1")
        _check(self.train.soup_runs == 1 or not (m.lora.enabled or self.train.distributed != "none"
                                                  or self.train.mode != "sync" or self.selfplay.enabled),
               "train.soup_runs averages the full weights of plain runs: set model.lora.enabled=false, "
               "train.distributed=none, train.mode=sync and selfplay.enabled=false, or train.soup_runs=1")
        if self.train.mode == "async":
            check_async(self, updater_for(self).name)
        if r.lookahead:
            check_lookahead(self)
        if self.selfplay.enabled:
            check_selfplay(self)
        if r.branching.mode != "off":
            check_branching(self)
        if self.gateway.enabled:
            check_gateway(self)

    def to_dict(self) -> dict[str, Any]:
        """The options as a nested dict (what `load_config` reads back); derived fields left out."""
        return options_dict(self)


# --------------------------------------------------------------------------------------- loading

def config_from_dict(data: dict[str, Any], overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """Build and validate a config from a nested dict plus dotted `key=value` overrides."""
    data = with_overrides(data, overrides)
    _fill_env_context(data)
    return build(TrainConfig, data)


def _fill_env_context(data: dict[str, Any]) -> None:
    """Rollout context settings the config leaves out come from the env's registration (agentgym.horizon)."""
    rollout = data.get("rollout", {})
    if not isinstance(rollout, dict):
        return  # _build says what is wrong with it
    env = rollout.get("env", RolloutSection.env)
    if not isinstance(env, str):
        return
    for name, value in context_defaults(env).settings().items():
        rollout.setdefault(name, value)
    if rollout:
        data["rollout"] = rollout


def context_line(config: TrainConfig) -> str:
    """What `agentgym train` prints: the rollout's layout and token budgets, and where each came from."""
    r = config.rollout
    chosen = {name: getattr(r, name) for name in CONTEXT_FIELDS}
    recommended, engine = context_defaults(r.env).settings(), RolloutConfig()
    given = tuple(n for n in CONTEXT_FIELDS if chosen[n] != recommended.get(n, getattr(engine, n)))
    return context_lines({r.env: chosen}, given)[0]


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """Load a YAML file (or a preset name from train/configs/) and apply overrides."""
    return config_from_dict(read_yaml(path) if path else {}, overrides)
