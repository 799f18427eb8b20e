"""The multi-turn rollout engine: B tasks x G samples, token in, token out.

    trajs = rollout("agentgym/Toy-KeyDoor-v0", policy, chat, seeds=[0, 1, 2], group_size=4)

Group i is `group_size` envs reset with `seeds[i]`; trajectories come back group-major. Each turn the
active envs' requests go to the policy as ONE batch, the envs step concurrently (see `agentgym.engine.vector`),
and an episode ends on terminated / truncated / its turn limit / a full context / a failure. In async
mode every episode runs as a coroutine: an env whose step returns early has its next request queued at
once, and requests from ready envs are batched opportunistically.

Token accounting: the next prompt is the previous prompt + the generated ids + the chat template's
delimiters around the new observation (`ChatFormat.continue_prompt`); generated ids are never
re-tokenized. In the `step` layout each prompt is the system prompt + the last `history_turns` turns,
rebuilt from the same recorded token pieces; once the first observation has slid out of that window, the
task (`info["task"]` at reset, else the first observation) is restated before the window (`window_message`).
The `fold` layout grows like `trajectory` until a budget, then folds older turns into a summary
(`agentgym.engine.folding`; the shapes of all three: `agentgym.engine.layouts`).

A policy failure (a Generation with finish_reason "error", or an exception) or an env failure (an exception,
or a step whose info names a `failure`: the env's word that its infrastructure failed, as the SWE envs' dead
sandbox) ends that episode with end_reason "failed" and its error message; the rest of the batch goes on.
"""
from __future__ import annotations

import asyncio
import threading
import time
import zlib
from dataclasses import replace
from typing import Any, Callable, Sequence

from agentgym.chat import ChatFormat
from agentgym.errors import ConfigError
from agentgym.engine.folding import fold_budget, fold_prompt, record_summary
from agentgym.engine.layouts import TASK_REMINDER, next_prompt_ids, step_messages, window_message  # noqa: F401 (re-exported)
from agentgym.policy import EnvContext, Generation, GenerationRequest, Policy
from agentgym.trajectory import Trajectory, Turn, history_keys, json_safe
from agentgym.engine.rollout_config import LAYOUTS, RolloutConfig  # noqa: F401 (re-exported)
from agentgym.engine.vector import EnvFailure, EnvPool, ResetResult, StepResult, make_pool

class _Episode:
    """Mutable state of one running episode; becomes a frozen `Trajectory` when it ends."""

    def __init__(self, slot: int, seed: int, group_id: int, sample_index: int):
        self.slot, self.seed, self.group_id, self.sample_index = slot, seed, group_id, sample_index
        self.env_id = ""
        self.system = ""
        self.tools: tuple[dict[str, Any], ...] = ()
        self.limit: int | None = None
        self.obs, self.info, self.first_obs = "", {}, ""
        self.final_obs = ""                                  # what the env said after the last action
        self.obs_texts: list[str] = []                       # observation shown at each turn
        self.pieces: list[tuple[list[int], list[int]]] = []  # (response ids, ids appended after it)
        self.prompt: list[int] = []                          # trajectory layout: the running sequence
        self.turns: list[Turn] = []
        self.env_turns = 0                                   # turns that stepped the env (not fold summaries)
        self.segment_turns = 0                               # fold layout: env turns since the last fold
        self.summarising, self.summary_obs, self.fold_message = False, "", ""
        self.end_reason: str | None = None
        self.error: str | None = None
        self.success = False
        self.task_id, self.task = "", ""
        self.ground_truth = ""
        self.t0 = time.perf_counter()
        self.t_end: float | None = None                      # when it ended (its wall time stops there)

    def fail(self, message: str) -> None:
        self.end_reason, self.error = "failed", message

    def to_trajectory(self) -> Trajectory:
        return Trajectory(env_id=self.env_id, seed=self.seed, group_id=self.group_id,
                          sample_index=self.sample_index, turns=tuple(self.turns), success=self.success,
                          end_reason=self.end_reason or "failed", task_id=self.task_id, system_prompt=self.system,
                          first_observation=self.first_obs, final_observation=self.final_obs, error=self.error,
                          wall_s=(self.t_end or time.perf_counter()) - self.t0, task=self.task, ground_truth=self.ground_truth)


class _Engine:
    """The per-episode logic shared by the sync and async loops."""

    def __init__(self, pool: EnvPool, policy: Policy, chat: ChatFormat, config: RolloutConfig):
        self.pool, self.policy, self.chat, self.config = pool, policy, chat, config
        # a model's own context (e.g. HFPolicy.max_context) caps the configured one
        limits = [n for n in (config.max_context_tokens, getattr(policy, "max_context", None))
                  if isinstance(n, int) and n > 0]
        self.context_limit = min(limits) if limits else None
        self.fold_at = fold_budget(config, self.context_limit) if config.layout == "fold" else None

    # ------------------------------------------------------------------ reset
    def start(self, ep: _Episode, result: ResetResult | EnvFailure) -> None:
        if isinstance(result, EnvFailure):
            ep.fail(result.message)
            return
        ep.env_id, ep.system, ep.tools = result.env_id, result.instructions, result.tools
        ep.limit = self.config.max_turns or result.max_turns
        if ep.limit is None:
            raise ConfigError(f"env {result.env_id!r} has no turn limit; set RolloutConfig.max_turns "
                              "(or register the env with max_turns)")
        ep.task_id = str(result.info.get("task_id", ""))
        ep.ground_truth = ground_truth(result.info)
        ep.obs = self.chat.truncate_observation(result.obs, self.config.max_observation_tokens)
        ep.first_obs, ep.info = ep.obs, result.info
        ep.task = str(result.info.get("task") or ep.obs) if self.config.keep_task else ""
        ep.obs_texts.append(ep.obs)
        if self.config.layout != "step":
            ep.prompt = self.chat.initial_prompt(ep.system, ep.obs, ep.tools)

    # ------------------------------------------------------------------ one turn
    def prompt_ids(self, ep: _Episode) -> list[int]:
        if self.config.layout == "fold":
            return fold_prompt(self, ep)
        if self.config.layout == "trajectory":
            return ep.prompt
        t = len(ep.turns)
        start = max(0, t - self.config.history_turns)
        ids = self.chat.initial_prompt(ep.system, window_message(ep.task, ep.obs_texts[start], start), ep.tools)
        for response, after in ep.pieces[start:t]:
            ids += response
            ids += after
        return ids

    def request(self, ep: _Episode) -> GenerationRequest | None:
        """The next request, or None after ending the episode because its context is full."""
        ids = self.prompt_ids(ep)
        sampling = self.config.sampling
        limit = self.context_limit
        if limit is not None and len(ids) + sampling.max_tokens > limit:
            ep.end_reason, ep.final_obs, ep.summarising = "context_full", ep.obs, False
            return None
        if sampling.seed is not None:  # distinct but reproducible per (group, sample, turn)
            key = f"{sampling.seed}/{ep.group_id}/{ep.sample_index}/{len(ep.turns)}".encode()
            sampling = replace(sampling, seed=zlib.crc32(key) & 0x7FFFFFFF)
        obs = ep.summary_obs if ep.summarising else ep.obs
        return GenerationRequest(tuple(ids), sampling, EnvContext(self.pool.handle(ep.slot), obs, ep.info))

    def record(self, ep: _Episode, req: GenerationRequest, gen: Generation,
               result: StepResult | ResetResult | EnvFailure | None,
               generate_s: float) -> None:
        """Record a finished turn and decide whether the episode goes on."""
        if ep.summarising:  # a fold's summary turn: the env was not stepped
            record_summary(self, ep, req, gen, generate_s)
            return
        if not isinstance(result, StepResult):  # an env failure (a pool answers a step with a StepResult)
            ep.fail(result.message if isinstance(result, EnvFailure) else f"the env pool answered a step with {result!r}")
            return
        info = result.info
        tool_results = info.get("tool_results") or ()
        turn = Turn(index=len(ep.turns), observation=ep.obs, action=gen.text, prompt_ids=req.prompt_ids,
                    response_ids=tuple(map(int, gen.token_ids)), logprobs=tuple(map(float, gen.logprobs)),
                    reward=result.reward,
                    reward_components={k: float(v) for k, v in (info.get("reward_components") or {}).items()},
                    anchor=_anchor(ep.info, ep.obs), valid=bool(info.get("valid_action", True)),
                    terminated=result.terminated, truncated=result.truncated, finish_reason=gen.finish_reason,
                    tool_calls=len(tool_results), tool_errors=sum(not getattr(r, "ok", True) for r in tool_results),
                    generate_s=generate_s, env_s=result.seconds, info=_turn_extras(info),
                    history=history_keys(ep.turns, self.config.history_key_depth), choice=gen.choice,
                    policy_version=gen.policy_version)
        if ep.fold_message:  # the first turn of a fold segment keeps the message its prompt starts with
            turn = replace(turn, info={**turn.info, "fold_message": ep.fold_message})
            ep.fold_message = ""
        ep.turns.append(turn)
        ep.env_turns += 1
        ep.segment_turns += 1
        ep.success = bool(info.get("success", False))
        ep.obs = self.chat.truncate_observation(result.obs, self.config.max_observation_tokens)
        ep.info = info
        if info.get("failure"):  # the env's word that its infrastructure failed (a sandbox died): not the agent's
            ep.fail(str(info["failure"]))
        elif result.terminated:
            ep.end_reason = "terminated"
        elif ep.env_turns >= ep.limit:
            ep.end_reason = "max_turns"
        elif result.truncated:
            ep.end_reason = "truncated"
        if ep.end_reason is not None:
            ep.final_obs = ep.obs
            return
        after = self.chat.turn_suffix(turn.response_ids, ep.obs)
        ep.pieces.append((list(turn.response_ids), after))
        ep.obs_texts.append(ep.obs)
        if self.config.layout != "step":
            ep.prompt.extend(turn.response_ids)  # requests hold their own tuple copy
            ep.prompt.extend(after)


def ground_truth(info: dict[str, Any]) -> str:
    """The task's ground-truth answer an env exposes at reset as info["ground_truth"] (a string, or a list
    whose first entry is the canonical answer), else "": what IGPO's information gain scores."""
    value = info.get("ground_truth")
    if isinstance(value, (list, tuple)):
        value = value[0] if value else ""
    return "" if value is None else str(value)


def _anchor(info: dict[str, Any], observation: str) -> Any:
    """The env's anchor, else the observation text (an env that never sets one must not put every turn
    of a group into one GiGPO step group)."""
    anchor = info.get("anchor")
    return observation if anchor is None else anchor


def _turn_extras(info: dict[str, Any]) -> dict[str, Any]:
    extras: dict[str, Any] = {"success": bool(info.get("success", False))}
    if "admissible_actions" in info:
        extras["num_admissible_actions"] = len(info["admissible_actions"] or ())
    for key in ("tool_format", "unparsed_tool_call"):  # what the tool-call guard counts (ToolEnv sets them)
        if isinstance(info.get(key), str):
            extras[key] = info[key]
    results = info.get("tool_results") or ()
    if results:  # JSON-safe, for reports; outputs capped so a chatty tool cannot bloat result files
        extras["tool_results"] = [{"name": str(getattr(r, "name", "?")), "ok": bool(getattr(r, "ok", True)),
                                   "arguments": json_safe(getattr(r, "arguments", {})),
                                   "output": str(getattr(r, "output", r))[:MAX_TOOL_OUTPUT_CHARS]} for r in results]
    return extras


MAX_TOOL_OUTPUT_CHARS = 4000


def _error_generation(message: str) -> Generation:
    return Generation((), "", (), "error", message)


def _checked(gens: Any, n: int) -> list[Generation]:
    if not isinstance(gens, (list, tuple)) or len(gens) != n:
        got = len(gens) if isinstance(gens, (list, tuple)) else type(gens).__name__
        return [_error_generation(f"policy returned {got} generations for {n} requests")] * n
    return [g if isinstance(g, Generation) else _error_generation(f"policy returned {type(g).__name__}, "
                                                                   "not a Generation") for g in gens]


def generate_isolated(policy: Policy, requests: list[GenerationRequest]) -> list[Generation]:
    """`policy.generate`, where an exception fails only the request(s) that raise it."""
    try:
        return _checked(policy.generate(requests), len(requests))
    except Exception as exc:
        if len(requests) == 1:
            return [_error_generation(f"policy raised {type(exc).__name__}: {exc}")]
    return [generate_isolated(policy, [r])[0] for r in requests]  # find the request(s) at fault


async def agenerate_isolated(policy: Policy, requests: list[GenerationRequest]) -> list[Generation]:
    """The async twin of `generate_isolated` (uses `policy.agenerate` where there is one)."""
    call = getattr(policy, "agenerate", None)
    try:
        if call is None:
            return _checked(await asyncio.to_thread(policy.generate, requests), len(requests))
        return _checked(await call(requests), len(requests))
    except Exception as exc:
        if len(requests) == 1:
            return [_error_generation(f"policy raised {type(exc).__name__}: {exc}")]
    return [(await agenerate_isolated(policy, [r]))[0] for r in requests]


def _resolve_chat(policy: Policy, chat: ChatFormat | None) -> ChatFormat:
    if chat is not None:
        return chat
    if callable(getattr(policy, "chat_format", None)):
        return policy.chat_format()
    return getattr(policy, "chat", None) or ChatFormat.simple()


def rollout(env: str | Callable[[], Any] | EnvPool, policy: Policy, chat: ChatFormat | None, seeds: Sequence[int],
            group_size: int = 1, config: RolloutConfig | None = None, env_kwargs: dict[str, Any] | None = None,
            start_group_id: int = 0, on_trajectory: Callable[[Trajectory], None] | None = None,
            reset_options: dict[str, Any] | None = None) -> list[Trajectory]:
    """Run `len(seeds) * group_size` episodes; trajectories come back group-major.

    `env` is a registered id, a zero-argument factory, or an `EnvPool` to reuse across calls (its own
    executor and turn limit then apply, and it is left open); `chat` defaults to the policy's own chat format
    (or `ChatFormat.simple()`); `on_trajectory` is called with each trajectory as soon as it ends. Envs are
    reset with `tool_format` = the chat format's (the policy's own tool-call format) unless `reset_options`
    names one, so a `ToolEnv` parses the calls the way the model writes them.
    """
    config = config or RolloutConfig()
    if group_size < 1:
        raise ConfigError(f"group_size must be >= 1, got {group_size}")
    if not seeds:
        return []
    chat = _resolve_chat(policy, chat)
    reset_options = {"tool_format": getattr(chat, "tool_format", "hermes"), **(reset_options or {})}
    episodes = [_Episode(g * group_size + s, int(seed), start_group_id + g, s)
                for g, seed in enumerate(seeds) for s in range(group_size)]
    waves = _waves(episodes, group_size, config.max_envs)
    own_pool = not isinstance(env, EnvPool)
    if own_pool:
        pool = make_pool(env, len(waves[0]), config.executor, config.env_workers, env_kwargs, config.max_turns,
                         config.env_timeout_s, ray_address=config.ray_address)
    elif env.n < len(waves[0]):
        raise ConfigError(f"the env pool holds {env.n} envs but this rollout needs {len(waves[0])} "
                          f"({len(seeds)} seeds x group_size {group_size}); make a bigger pool")
    else:
        pool = env
    try:
        engine = _Engine(pool, policy, chat, config)
        finish = _finisher(on_trajectory)
        for wave in waves:
            for ep, result in zip(wave, pool.reset([(ep.slot, ep.seed, reset_options) for ep in wave])):
                engine.start(ep, result)
                if ep.end_reason is not None:
                    finish(ep)
            if config.async_mode:
                _run_coroutine(_run_async(engine, [ep for ep in wave if ep.end_reason is None], finish))
            else:
                _run_sync(engine, wave, finish)
        return [ep.to_trajectory() for ep in episodes]
    finally:
        if own_pool:
            pool.close()


def _waves(episodes: list["_Episode"], group_size: int, max_envs: int) -> list[list["_Episode"]]:
    """`episodes` (group-major) in waves of at most `max_envs` (0: one wave), whole groups to a wave where a
    group fits; each wave's episodes take env slots 0.. again, so the pool needs only the largest wave."""
    if not max_envs or max_envs >= len(episodes):
        return [episodes]
    size = max_envs - max_envs % group_size if max_envs >= group_size else max_envs
    waves = [episodes[i:i + size] for i in range(0, len(episodes), size)]
    for wave in waves:
        for slot, ep in enumerate(wave):
            ep.slot = slot
    return waves


def _finisher(on_trajectory: Callable[[Trajectory], None] | None) -> Callable[[_Episode], None]:
    def finish(ep: _Episode) -> None:
        ep.t_end = ep.t_end or time.perf_counter()
        if on_trajectory is not None:
            on_trajectory(ep.to_trajectory())
    return finish


def _run_sync(engine: _Engine, episodes: list[_Episode], finish: Callable[[_Episode], None]) -> None:
    active = [ep for ep in episodes if ep.end_reason is None]
    while active:
        asking, requests = [], []
        for ep in active:
            req = engine.request(ep)
            if req is None:
                finish(ep)
            else:
                asking.append(ep)
                requests.append(req)
        if not asking:
            break
        t0 = time.perf_counter()
        gens = generate_isolated(engine.policy, requests)
        generate_s = time.perf_counter() - t0
        stepping = []
        for ep, req, gen in zip(asking, requests, gens):
            if gen.finish_reason == "error":
                ep.fail(gen.error or "the policy returned an error generation")
                finish(ep)
            elif ep.summarising:  # a fold's summary: recorded, the env is not stepped
                engine.record(ep, req, gen, None, generate_s)
            else:
                stepping.append((ep, req, gen))
        results = engine.pool.step([(ep.slot, gen.text) for ep, _, gen in stepping]) if stepping else []
        for (ep, req, gen), result in zip(stepping, results):
            engine.record(ep, req, gen, result, generate_s)
            if ep.end_reason is not None:
                finish(ep)
        active = [ep for ep in asking if ep.end_reason is None]


def _run_coroutine(coro: Any) -> None:
    """`asyncio.run`, also from inside a running event loop (then on a helper thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(coro)
        return
    errors: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=target, name="agentgym-rollout")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


class _Batcher:
    """Collects requests from ready episodes and sends them to the policy in opportunistic batches."""

    def __init__(self, policy: Policy, max_inflight: int):
        self.policy, self.max_inflight = policy, max_inflight
        self.pending: list[tuple[GenerationRequest, asyncio.Future]] = []
        self.inflight = 0

    async def submit(self, request: GenerationRequest) -> tuple[Generation, float]:
        future = asyncio.get_running_loop().create_future()
        self.pending.append((request, future))
        self._kick()
        return await future

    def _kick(self) -> None:
        if self.pending and self.inflight < self.max_inflight:
            self.inflight += 1
            asyncio.get_running_loop().create_task(self._dispatch())

    async def _dispatch(self) -> None:
        try:
            await asyncio.sleep(0)  # let every episode that is ready right now add its request
            batch, self.pending = self.pending, []
            if batch:
                t0 = time.perf_counter()
                gens = await agenerate_isolated(self.policy, [r for r, _ in batch])
                seconds = time.perf_counter() - t0
                for (_, future), gen in zip(batch, gens):
                    if not future.done():
                        future.set_result((gen, seconds))
        finally:
            self.inflight -= 1
            self._kick()


async def _run_async(engine: _Engine, episodes: list[_Episode], finish: Callable[[_Episode], None]) -> None:
    batcher = _Batcher(engine.policy, engine.config.max_inflight_batches)
    loop = asyncio.get_running_loop()
    threaded = engine.config.executor != "serial"
    import concurrent.futures as cf

    workers = engine.config.env_workers or min(64, max(1, len(episodes)))
    with cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agentgym-astep") as steppers:
        async def run(ep: _Episode) -> None:
            while ep.end_reason is None:
                req = engine.request(ep)
                if req is None:
                    break
                gen, generate_s = await batcher.submit(req)
                if gen.finish_reason == "error":
                    ep.fail(gen.error or "the policy returned an error generation")
                    break
                result: StepResult | ResetResult | EnvFailure | None = None  # stays None for a fold's summary (no env step)
                if ep.summarising:
                    pass
                elif threaded:
                    result = await loop.run_in_executor(steppers, engine.pool.step_one, ep.slot, gen.text)
                else:
                    result = engine.pool.step_one(ep.slot, gen.text)
                engine.record(ep, req, gen, result, generate_s)
            finish(ep)

        await asyncio.gather(*(run(ep) for ep in episodes))
