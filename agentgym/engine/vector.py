"""Many text envs stepping concurrently: serial, a thread pool, worker processes, or Ray actors.

    pool = make_pool("agentgym/Toy-KeyDoor-v0", n=64, executor="thread")
    results = pool.reset([(i, seed, None) for i, seed in enumerate(seeds)])
    results = pool.step([(i, "left") for i in range(64)])

Threads suit I/O-bound envs (servers, browsers, sandboxes); processes suit CPU-bound ones (the env is
built in the worker from its id or a picklable factory); Ray actors spread envs over a cluster. An env
that raises, hangs past `timeout_s` or whose worker dies gives an `EnvFailure` for that env only:
the pool never raises for one env's fault and never hangs on it.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import pickle
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, Union

from agentgym.errors import ConfigError, require

EnvSpecLike = Union[str, Callable[[], Any]]
EXECUTORS = ("serial", "thread", "process", "ray")


@dataclass(frozen=True)
class ResetResult:
    obs: str
    info: dict[str, Any]
    instructions: str
    tools: tuple[dict[str, Any], ...]   # OpenAI function schemas (picklable, unlike Tool objects)
    max_turns: int | None               # the env's own turn limit, where it has one
    env_id: str
    seconds: float


@dataclass(frozen=True)
class StepResult:
    obs: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    seconds: float


@dataclass(frozen=True)
class EnvFailure:
    """An env raised, hung or lost its worker; `message` says which and why."""

    message: str


Result = Union[ResetResult, StepResult, EnvFailure]


def env_turn_limit(env: Any) -> int | None:
    """The turn limit of a made env: the innermost `TurnLimit`-style `max_turns`, else the spec's."""
    e = env
    while e is not None:
        if isinstance(getattr(e, "max_turns", None), int):
            return e.max_turns
        e = getattr(e, "env", None)
    spec = getattr(getattr(env, "unwrapped", env), "spec", None)
    return getattr(spec, "max_episode_steps", None)


def build_env(env: EnvSpecLike, env_kwargs: dict[str, Any] | None = None, max_turns: int | None = None) -> Any:
    """An env from a registered id (with `max_turns` overriding its limit) or a zero-argument factory."""
    if isinstance(env, str):
        from agentgym.registration import make

        return make(env, max_turns=max_turns, **(env_kwargs or {}))
    if callable(env):
        return env(**env_kwargs) if env_kwargs else env()
    raise ConfigError(f"env must be a registered id or a zero-argument factory, got {type(env).__name__}")


def env_name(env_spec: EnvSpecLike, env: Any) -> str:
    if isinstance(env_spec, str) and env_spec.startswith("remote:"):   # not every served env's "agentgym/Remote-v0"
        return env_spec
    spec = getattr(getattr(env, "unwrapped", env), "spec", None)
    if getattr(spec, "id", None):
        return spec.id
    return env_spec if isinstance(env_spec, str) else getattr(env_spec, "__name__", type(env).__name__)


def _timed_reset(env: Any, env_spec: EnvSpecLike, seed: int | None, options: dict | None) -> Result:
    t0 = time.perf_counter()
    try:
        obs, info = env.reset(seed=seed, options=options)
        tools = tuple(t.schema if hasattr(t, "schema") else dict(t) for t in (getattr(env, "tools", None) or ()))
        return ResetResult(str(obs), dict(info), str(getattr(env, "instructions", "") or ""), tools,
                           env_turn_limit(env), env_name(env_spec, env), time.perf_counter() - t0)
    except Exception as exc:  # an env bug: fail this episode, keep the batch going
        return EnvFailure(f"env reset raised {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}")


def _timed_step(env: Any, action: str) -> Result:
    t0 = time.perf_counter()
    try:
        obs, reward, terminated, truncated, info = env.step(action)
        return StepResult(str(obs), float(reward), bool(terminated), bool(truncated), dict(info),
                          time.perf_counter() - t0)
    except Exception as exc:
        return EnvFailure(f"env step raised {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}")


def _call(env: Any, method: str) -> Any:
    try:
        return getattr(env, method)()
    except Exception as exc:
        return EnvFailure(f"env.{method}() raised {type(exc).__name__}: {exc}")


class EnvPool:
    """`n` envs addressed by index. Subclasses implement `_run(kind, items)`; the rest is shared."""

    def __init__(self, env: EnvSpecLike, n: int, env_kwargs: dict[str, Any] | None, max_turns: int | None,
                 timeout_s: float | None):
        self.env_spec, self.n, self.env_kwargs, self.max_turns = env, n, env_kwargs, max_turns
        self.timeout_s = timeout_s

    def reset(self, items: Sequence[tuple[int, int | None, dict | None]]) -> list[Result]:
        """Reset envs `(index, seed, options)` concurrently; results in the order given."""
        return self._run("reset", list(items))

    def step(self, items: Sequence[tuple[int, str]]) -> list[Result]:
        """Step envs `(index, action)` concurrently; results in the order given."""
        return self._run("step", list(items))

    def step_one(self, index: int, action: str) -> Result:
        """Step one env, blocking; safe to call from several threads (async rollouts use it)."""
        return self._run("step", [(index, action)])[0]

    def reset_one(self, index: int, seed: int | None, options: dict | None = None) -> Result:
        return self._run("reset", [(index, seed, options)])[0]

    def call(self, index: int, method: str) -> Any:
        """Call a no-argument method of env `index` (e.g. `oracle_action`) and return its value."""
        return self._run("call", [(index, method)])[0]

    def handle(self, index: int) -> Any:
        """What a non-model policy sees as `context.env`: the env itself, or a proxy for a remote one."""
        return RemoteEnv(self, index)

    def _run(self, kind: str, items: list[tuple]) -> list[Any]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class RemoteEnv:
    """Stands in for an env living in a worker process or actor: `oracle_action()` is forwarded."""

    def __init__(self, pool: EnvPool, index: int):
        self._pool, self._index = pool, index

    def oracle_action(self) -> str | None:
        result = self._pool.call(self._index, "oracle_action")
        return None if isinstance(result, EnvFailure) else result

    def render(self) -> Any:
        return self._pool.call(self._index, "render")


class LocalPool(EnvPool):
    """Envs in this process: stepped inline (`serial`) or on a thread pool (`thread`)."""

    def __init__(self, env: EnvSpecLike, n: int, env_kwargs=None, max_turns=None, timeout_s=None,
                 workers: int = 0, threaded: bool = True):
        super().__init__(env, n, env_kwargs, max_turns, timeout_s)
        self.threaded = threaded
        self.executor = cf.ThreadPoolExecutor(max_workers=workers or min(64, max(1, n)),
                                              thread_name_prefix="agentgym-env") if threaded else None
        try:
            # the first env is built here: registry discovery is not thread-safe on first use
            first = build_env(env, env_kwargs, max_turns)
            self.envs = [first] + self._map(lambda _: build_env(env, env_kwargs, max_turns), list(range(1, n)))
        except Exception:
            self.close()
            raise

    def _map(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        if self.executor is None or len(items) <= 1:
            return [fn(x) for x in items]
        return list(self.executor.map(fn, items))

    def handle(self, index: int) -> Any:
        return self.envs[index]

    def _one(self, kind: str, item: tuple) -> Any:
        env = self.envs[item[0]]
        if kind == "reset":
            return _timed_reset(env, self.env_spec, item[1], item[2])
        if kind == "step":
            return _timed_step(env, item[1])
        return _call(env, item[1])

    def _run(self, kind: str, items: list[tuple]) -> list[Any]:
        if self.executor is None or self.timeout_s is None:
            return self._map(lambda it: self._one(kind, it), items)
        futures = [self.executor.submit(self._one, kind, it) for it in items]
        out = []
        for it, fut in zip(items, futures):
            try:
                out.append(fut.result(timeout=self.timeout_s))
            except cf.TimeoutError:  # the thread cannot be killed; the episode fails and we move on
                out.append(EnvFailure(f"env {it[0]} {kind} took longer than {self.timeout_s}s"))
        return out

    def close(self) -> None:
        for env in getattr(self, "envs", ()):
            try:
                env.close()
            except Exception:
                pass
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)


def _worker_main(conn: Any, env_spec: EnvSpecLike, indices: list[int], env_kwargs, max_turns) -> None:
    """A worker process: builds its envs, then answers batched (kind, items) requests until told to stop."""
    try:
        envs = {i: build_env(env_spec, env_kwargs, max_turns) for i in indices}
        conn.send(("ok", None))
    except Exception as exc:
        conn.send(("error", f"building env {env_spec!r} failed: {type(exc).__name__}: {exc}"))
        return
    while True:
        try:
            kind, items = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            break
        if kind == "close":
            break
        out = []
        for item in items:
            env = envs[item[0]]
            if kind == "reset":
                out.append(_timed_reset(env, env_spec, item[1], item[2]))
            elif kind == "step":
                out.append(_timed_step(env, item[1]))
            else:
                out.append(_call(env, item[1]))
        try:
            conn.send(out)
        except Exception as exc:  # e.g. an info value that cannot be pickled
            conn.send([EnvFailure(f"result of {kind} could not be sent back: {exc}")] * len(items))
    for env in envs.values():
        try:
            env.close()
        except Exception:
            pass


@dataclass
class _Worker:
    process: Any
    conn: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    dead: str | None = None


class ProcessPool(EnvPool):
    """Envs live in worker processes (env `i` in worker `i % workers`); one message per worker per call."""

    def __init__(self, env: EnvSpecLike, n: int, env_kwargs=None, max_turns=None, timeout_s=None,
                 workers: int = 0, start_method: str = "spawn"):
        super().__init__(env, n, env_kwargs, max_turns, timeout_s)
        try:
            pickle.dumps((env, env_kwargs))
        except Exception as exc:
            raise ConfigError(f"the process executor builds envs in worker processes, so the env must be an id "
                              f"or a picklable (module-level) factory: {exc}") from None
        count = max(1, min(n, workers or (os.cpu_count() or 1)))
        ctx = mp.get_context(start_method)
        self.workers: list[_Worker] = []
        for w in range(count):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker_main, args=(child, env, list(range(w, n, count)), env_kwargs,
                                                          max_turns), daemon=True, name=f"agentgym-env-{w}")
            proc.start()
            child.close()
            self.workers.append(_Worker(proc, parent))
        for worker in self.workers:
            status = self._recv(worker, timeout=None if timeout_s is None else max(timeout_s, 60.0))
            if not (isinstance(status, tuple) and status[0] == "ok"):
                self.close()
                message = status[1] if isinstance(status, tuple) else status.message
                raise ConfigError(f"process executor: {message}")

    def _recv(self, worker: _Worker, timeout: float | None) -> Any:
        try:
            if timeout is not None and not worker.conn.poll(timeout):
                worker.dead = f"worker {worker.process.name} did not answer within {timeout}s; it was stopped"
                worker.process.kill()
                return EnvFailure(worker.dead)
            return worker.conn.recv()
        except (EOFError, OSError, ConnectionError) as exc:
            worker.dead = f"worker {worker.process.name} died (exit code {worker.process.exitcode}): {exc!r}"
            return EnvFailure(worker.dead)

    def _run(self, kind: str, items: list[tuple]) -> list[Any]:
        by_worker: dict[int, list[int]] = {}
        for pos, item in enumerate(items):
            by_worker.setdefault(item[0] % len(self.workers), []).append(pos)
        out: list[Any] = [None] * len(items)
        held = [self.workers[w] for w in sorted(by_worker)]
        for w in held:
            w.lock.acquire()
        try:
            for w_index, positions in sorted(by_worker.items()):
                worker = self.workers[w_index]
                if worker.dead is None:
                    try:
                        worker.conn.send((kind, [items[p] for p in positions]))
                    except (OSError, ValueError) as exc:
                        worker.dead = (f"worker {worker.process.name} died (exit code "
                                       f"{worker.process.exitcode}): {exc!r}")
            for w_index, positions in sorted(by_worker.items()):
                worker = self.workers[w_index]
                got = EnvFailure(worker.dead) if worker.dead else self._recv(worker, self.timeout_s)
                for k, p in enumerate(positions):
                    out[p] = got if isinstance(got, EnvFailure) else got[k]
        finally:
            for w in held:
                w.lock.release()
        return out

    def close(self) -> None:
        for worker in getattr(self, "workers", ()):
            try:
                if worker.dead is None:
                    worker.conn.send(("close", None))
            except Exception:
                pass
        for worker in getattr(self, "workers", ()):
            worker.process.join(timeout=2.0)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(timeout=1.0)
            worker.conn.close()
        self.workers = []


class RayPool(EnvPool):
    """Envs held by Ray actors (env `i` in actor `i % workers`), spread over the cluster's nodes; needs
    `pip install 'agentgym[ray]'`. `address`: a running cluster ("127.0.0.1:6379", "auto"); "" starts or
    joins a local one (RAY_ADDRESS is honoured). A dead actor is its episodes' failure and is replaced."""

    def __init__(self, env: EnvSpecLike, n: int, env_kwargs=None, max_turns=None, timeout_s=None, workers: int = 0,
                 address: str = ""):
        super().__init__(env, n, env_kwargs, max_turns, timeout_s)
        self.ray = ray = require("ray", "ray")
        if not ray.is_initialized():
            try:
                ray.init(address=address or None, ignore_reinit_error=True, log_to_driver=False)
            except ConnectionError as exc:
                raise ConfigError(f"rollout.ray_address={address!r}: no Ray cluster there ({exc}); start one with "
                                  "`ray start --head` or leave the address empty for a local one") from None
        self._actor_cls = ray.remote(_EnvActor)
        # round-robin over the live nodes (soft: elsewhere if that node is gone); Ray's "SPREAD" is best-effort
        self._nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU")]
        self._args = (env, env_kwargs, max_turns)
        count = max(1, min(n, workers or int(ray.available_resources().get("CPU", 1))))
        self._indices = [list(range(w, n, count)) for w in range(count)]
        self.actors = [self._new_actor(w) for w in range(count)]
        self.replaced = 0

    def _new_actor(self, w: int) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        env, env_kwargs, max_turns = self._args
        strategy = NodeAffinitySchedulingStrategy(self._nodes[w % len(self._nodes)], soft=True) \
            if self._nodes else "SPREAD"
        return self._actor_cls.options(scheduling_strategy=strategy).remote(env, self._indices[w], env_kwargs,
                                                                             max_turns)

    def nodes(self) -> list[str]:
        """The Ray node id each actor runs on."""
        return self.ray.get([a.node_id.remote() for a in self.actors])

    def _run(self, kind: str, items: list[tuple]) -> list[Any]:
        by_actor: dict[int, list[int]] = {}
        for pos, item in enumerate(items):
            by_actor.setdefault(item[0] % len(self.actors), []).append(pos)
        refs = {a: self.actors[a].run.remote(kind, [items[p] for p in ps]) for a, ps in by_actor.items()}
        out: list[Any] = [None] * len(items)
        for a, positions in by_actor.items():
            try:
                got = self.ray.get(refs[a], timeout=self.timeout_s)
            except Exception as exc:  # actor died or timed out: its envs' episodes fail, a fresh actor takes over
                got = EnvFailure(f"ray actor {a} failed: {type(exc).__name__}: {str(exc)[:300]}")
                self._replace(a)
            for k, p in enumerate(positions):
                out[p] = got if isinstance(got, EnvFailure) else got[k]
        return out

    def _replace(self, a: int) -> None:
        try:
            self.ray.kill(self.actors[a])
        except Exception:
            pass
        self.actors[a] = self._new_actor(a)
        self.replaced += 1

    def close(self) -> None:
        for actor in getattr(self, "actors", ()):
            try:
                self.ray.kill(actor)
            except Exception:
                pass
        self.actors = []


class _EnvActor:
    """The Ray actor body: the same batched protocol as a worker process."""

    def __init__(self, env_spec: EnvSpecLike, indices: list[int], env_kwargs, max_turns):
        self.env_spec = env_spec
        self.envs = {i: build_env(env_spec, env_kwargs, max_turns) for i in indices}

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def run(self, kind: str, items: list[tuple]) -> list[Any]:
        out = []
        for item in items:
            env = self.envs[item[0]]
            if kind == "reset":
                out.append(_timed_reset(env, self.env_spec, item[1], item[2]))
            elif kind == "step":
                out.append(_timed_step(env, item[1]))
            else:
                out.append(_call(env, item[1]))
        return out


def make_pool(env: EnvSpecLike, n: int, executor: str = "thread", workers: int = 0,
              env_kwargs: dict[str, Any] | None = None, max_turns: int | None = None,
              timeout_s: float | None = None, ray_address: str = "") -> EnvPool:
    """A pool of `n` envs stepping on `executor` ("serial", "thread", "process" or "ray")."""
    if n < 1:
        raise ConfigError(f"a pool needs at least one env, got n={n}")
    if executor == "serial":
        return LocalPool(env, n, env_kwargs, max_turns, timeout_s, threaded=False)
    if executor == "thread":
        return LocalPool(env, n, env_kwargs, max_turns, timeout_s, workers=workers)
    if executor == "process":
        return ProcessPool(env, n, env_kwargs, max_turns, timeout_s, workers=workers)
    if executor == "ray":
        return RayPool(env, n, env_kwargs, max_turns, timeout_s, workers=workers, address=ray_address)
    raise ConfigError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
