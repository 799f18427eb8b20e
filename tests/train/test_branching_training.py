"""Training on branches (rollout.branching, issue 52): a branched batch's advantages are the estimator's on the
same episodes played out by hand, a branch's copied turns are trained once, the collector runs in the trainer
(over a served env too), a tool env keeps the policy's own call format, and what cannot branch is refused."""
from __future__ import annotations

import json
import random
from dataclasses import replace

import numpy as np
import pytest

import agentgym
from agentgym.chat import ChatFormat
from agentgym.engine.branching import BranchConfig, check_restored, grow_branches
from agentgym.engine.rollout import RolloutConfig, rollout
from agentgym.errors import CheckError, ConfigError
from agentgym.policies.scripted import ScriptedPolicy
from agentgym.train.estimators import advantages as A
from agentgym.trajectory import Trajectory, TurnTable, split_groups

PICKPLACE = "agentgym/Household-PickPlace-v0"
KWARGS = {"revisit_penalty": 0.05}  # failures that loop score below failures that search: returns vary
OPTIONS = {"split": "train"}


def mixed_policy(seed: int, share: float = 0.6) -> ScriptedPolicy:
    """The oracle's command with probability `share`, else a random admissible one: some plays succeed."""
    rng = random.Random(seed)

    def act(context):
        if rng.random() < share:
            return context.env.oracle_action()
        return rng.choice(list(context.info["admissible_actions"]))
    return ScriptedPolicy(act, ChatFormat.simple())


def branched_batch(seed: int = 0, layout: str = "trajectory") -> tuple[list[Trajectory], list[Trajectory]]:
    """4 tasks x 2 plays, then 3 branches from the middle of each group's first play: (plays, branches)."""
    config = RolloutConfig(max_turns=10, layout=layout, executor="thread")
    policy = mixed_policy(seed)
    plays = rollout(PICKPLACE, policy, None, [11, 12, 13, 14], 2, config, KWARGS, 11, reset_options=OPTIONS)
    where = BranchConfig(shares=(0.5,), G=3)
    wanted = [(g[0], k) for g in split_groups(plays) for k in where.turns_of(g[0], random.Random(0))]
    return plays, grow_branches(PICKPLACE, policy, None, wanted, 3, config, KWARGS, 15, OPTIONS)


def play_by_hand(seed: int, actions: list[str]) -> list[tuple]:
    """(anchor, reward, valid, terminated) of each action, played from reset in a fresh env."""
    env = agentgym.make(PICKPLACE, max_turns=10, **KWARGS)
    try:
        obs, info = env.reset(seed=seed, options={"tool_format": "hermes", **OPTIONS})
        out = []
        for action in actions:
            anchor = info.get("anchor") if info.get("anchor") is not None else obs
            obs, reward, terminated, _, info = env.step(action)
            out.append((anchor, float(reward), bool(info.get("valid_action", True)), bool(terminated)))
        return out
    finally:
        env.close()


ESTIMATORS = {
    "gigpo": lambda t: A.gigpo(t, gamma=0.95),
    "gigpo_turn_stats": lambda t: A.gigpo(t, gamma=0.95, episode_stats="turn"),
    "grpo_turn_stats": lambda t: A.grpo(t, episode_stats="turn"),
    "rloo": A.rloo,
    "reinforce_pp": lambda t: A.reinforce_pp(t, gamma=0.9),
    "hgpo_step": lambda t: A.hgpo_step(t, np.zeros((len(t), 0), dtype=np.int64)),
}


@pytest.fixture(scope="module")
def batch():
    plays, branches = branched_batch()
    assert branches and all(b.shared_prefix > 0 for b in branches)
    assert len({round(t.total_reward, 9) for t in plays + branches}) > 2  # returns vary: advantages bite
    return plays, branches


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_branched_advantages_equal_the_estimators_on_the_episodes_played_out_by_hand(batch, name):
    plays, branches = batch
    fn = ESTIMATORS[name]
    table = TurnTable.from_trajectories(plays + branches)
    branched = fn(table)
    assert np.all(branched[table.shared] == 0)
    # by hand: every play from its reset, every branch from its reset through its trunk's actions and then its
    # own; a branch keeps only the turns it played itself (its group's prefix is one play's, trained there)
    cols: dict[str, list] = {k: [] for k in ("group", "traj", "turn", "anchor", "reward", "valid", "terminated")}
    for i, t in enumerate(plays + branches):
        steps = play_by_hand(t.seed, [k.action for k in t.turns])
        for j, (anchor, reward, valid, terminated) in enumerate(steps):
            recorded = t.turns[j]
            assert (anchor, reward, valid, terminated) == (recorded.anchor, recorded.reward, recorded.valid,
                                                           recorded.terminated), (t.seed, j)
            if j >= t.shared_prefix:
                for key, value in zip(cols, (t.group_id, i, j - t.shared_prefix, anchor, reward, valid, terminated)):
                    cols[key].append(value)
    by_hand = fn(TurnTable.from_columns(**cols))
    np.testing.assert_allclose(branched[~table.shared], by_hand, atol=1e-9)
    assert np.any(np.abs(by_hand) > 1e-9)


def test_the_copied_rows_would_change_the_figures_if_counted(batch):
    """The comparison above can fail: counting the copies as trained rows moves the advantages."""
    plays, branches = batch
    table = TurnTable.from_trajectories(plays + branches)
    blind = replace(table, shared=None)
    keep = ~table.shared
    assert not np.allclose(A.reinforce_pp(table, gamma=0.9)[keep], A.reinforce_pp(blind, gamma=0.9)[keep])
    assert not np.allclose(A.grpo(table, episode_stats="turn")[keep], A.grpo(blind, episode_stats="turn")[keep])


@pytest.mark.parametrize("layout", ["trajectory", "step"])
def test_shared_rows_are_trained_once(layout):
    from agentgym.train.samples import build_samples

    plays, branches = branched_batch(seed=1, layout=layout)
    trajs = plays + branches
    table = TurnTable.from_trajectories(trajs)
    rows = np.concatenate([s.row[s.row >= 0] for s in build_samples(trajs, layout)])
    # every trained turn's tokens are in exactly one sample; no copied turn's tokens are in any
    assert set(rows.tolist()) == set(np.flatnonzero(~table.shared).tolist())
    if layout == "step":  # one sample per trained turn, none of a copy
        assert len(build_samples(trajs, layout)) == int((~table.shared).sum())
    else:  # one per episode, each branch's still carrying its whole conversation (token in, token out)
        assert len(build_samples(trajs, layout)) == len(trajs)


def _choice_trajectory(prompts: list[tuple[int, ...]], group_id: int = 0, shared_prefix: int = 0) -> Trajectory:
    """An episode whose turn i chose between two two-token actions after `prompts[i]`."""
    from agentgym.policy import Choice
    from agentgym.trajectory import Turn

    turns = tuple(Turn(index=i, observation=f"o{i}", action=f"a{i}", prompt_ids=p, response_ids=(1,),
                       logprobs=(0.0,), reward=0.0, choice=Choice(((1, 3), (2, 3)), 0)) for i, p in enumerate(prompts))
    return Trajectory("e", 0, group_id, 0, turns, False, "max_turns", shared_prefix=shared_prefix)


def test_the_choice_update_skips_a_branchs_copied_turns():
    from agentgym.train.updaters.choice_ppo import choice_sequences

    trunk = _choice_trajectory([tuple(range(5 + 3 * i)) for i in range(4)])
    branch = replace(trunk, group_id=1, shared_prefix=2)
    for layout in ("trajectory", "step"):
        rows = [t.row for s in choice_sequences([trunk, branch], layout) for t in s.turns]
        assert rows == [0, 1, 2, 3, 6, 7]  # the branch's rows 4, 5 are its copies of the trunk's turns 0, 1


def test_a_branch_packed_with_its_trunk_costs_only_its_new_tokens():
    """The choice update's packed rows (train/updaters/choice_rows.py) put a branch beside its trunk before any
    other play of the task, and the row then feeds the copied prefix once: the branch adds only the tokens
    after its branch point and the candidate trees of its own turns."""
    from agentgym.policies.packed_rows import common_prefix
    from agentgym.train.updaters.choice_ppo import choice_sequences
    from agentgym.train.updaters.choice_rows import own_tokens, pack_groups, packed_block

    def prompts(tail: int) -> list[tuple[int, ...]]:  # turns 0, 1 as the trunk's, then a tail of its own
        return [tuple(range(5 + 3 * i)) if i < 2 else tuple(range(9)) + tuple(range(tail, tail + 3 * i - 4))
                for i in range(4)]

    trunk = _choice_trajectory(prompts(9))  # turn i's prompt: range(5 + 3i)
    branch = _choice_trajectory(prompts(500), group_id=1, shared_prefix=2)
    other = _choice_trajectory([tuple(range(5)) + tuple(range(700, 700 + 3 * i)) for i in range(4)])
    seqs = choice_sequences([trunk, branch, other], "trajectory")
    shared = common_prefix(seqs[0].ids, seqs[1].ids)
    assert shared == 9 and [len(s.turns) for s in seqs] == [4, 2, 4]
    pair = own_tokens(seqs[0]) + own_tokens(seqs[1]) - shared
    assert pack_groups(seqs, [0, 2, 1], row_tokens=pair) == [[0, 1], [2]]  # not [[0, 2], [1]]: the order's pairs
    trees = own_tokens(seqs[1]) - len(seqs[1].ids)  # its own two turns' candidate trees
    assert 2 * trees == own_tokens(seqs[0]) - len(seqs[0].ids) > 0  # half the trunk's: the copies bring no tree
    assert len(packed_block(seqs, [0, 1]).ids) - own_tokens(seqs[0]) == len(seqs[1].ids) - shared + trees


def test_signal_figures_count_trained_rows_and_branch_groups_are_exact(batch):
    from agentgym.train.algorithm import AlgorithmSection
    from agentgym.train.estimators.signal import estimator_signal

    plays, branches = batch
    figures = estimator_signal(AlgorithmSection(estimator="gigpo"), plays + branches)
    assert 0 < figures["signal/live_group_share"] <= 1 and figures["signal/step_groups_multi"] >= len(branches) // 3
    table = TurnTable.from_trajectories(plays + branches)
    for g in split_groups(branches):  # the branch turn of a point's branches: one state, G actions
        k = g[0].shared_prefix
        assert len({b.turns[k].anchor for b in g}) == 1 and len(g) == 3
    assert 0 < figures["signal/step_turn_share"] <= 1 and len(table) > 0


def test_a_restore_that_reaches_another_state_stops_naming_env_seed_and_turn(batch):
    plays, branches = batch
    b = branches[0]
    k = b.shared_prefix
    trunk = next(p for p in plays if p.seed == b.seed and p.sample_index == 0)  # the play it branched from
    assert trunk.turns[:k] == b.turns[:k]
    same = replace(b, turns=(*b.turns[:k], replace(b.turns[k], action=trunk.turns[k].action, reward=-7.0),
                             *b.turns[k + 1:]))
    with pytest.raises(CheckError, match=rf"env {PICKPLACE} seed {b.seed}: the state restored at turn {k}"):
        check_restored(trunk, same, k)
    check_restored(trunk, replace(b, turns=(*b.turns[:k], replace(b.turns[k], action="another action"),
                                            *b.turns[k + 1:])), k)  # another action: nothing to compare


# --------------------------------------------------------------------------------------------- the trainer


def _toy(run_dir, *overrides):
    from agentgym.train.config import load_config

    return load_config("toy_learning", ["train.iterations=1", f"train.run_dir={run_dir}", "eval.every=0",
                                        "rollout.groups=3", "rollout.group_size=2", "logging.progress=false",
                                        *overrides])


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["all", "balanced"])
def test_the_trainer_trains_on_branches(tmp_path, mode):
    from agentgym.train.trainer import train

    run = train(_toy(tmp_path / mode, f"rollout.branching.mode={mode}", "rollout.branching.turns=[1,3]",
                     "rollout.branching.branches=3"))
    m = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    flat = m["branch/flat_groups"]
    chosen = 3 if mode == "all" else flat
    assert m["branch/points"] <= 2 * chosen and m["branch/episodes"] == 3 * m["branch/points"]
    assert m["episodes_played"] == 6 + m["branch/episodes"] and m["episodes_trained"] == m["episodes_played"]
    assert {"signal/live_group_share", "signal/step_turn_share", "signal/step_groups_multi"} <= set(m)
    assert m["turns_played"] < 6 * 8 + m["branch/episodes"] * 8  # a branch plays only its turns after the point


BRANCHED = ["rollout.branching.mode=all", "rollout.branching.turns=[1,3]", "rollout.branching.branches=3",
            "algorithm.loss.tis_cap=2.0", "train.iterations=2"]


@pytest.mark.slow
def test_async_branching_at_eta_zero_reproduces_the_sync_trainer_exactly(tmp_path):
    """One rollout worker playing the whole batch at max_staleness 0 grows the same branches from the same
    weights as the sync collector: the same figures every iteration, the same weights after."""
    from safetensors.torch import load_file

    from agentgym.train.metrics import read_metrics
    from agentgym.train.trainer import train

    sync = train(_toy(tmp_path / "sync", *BRANCHED))
    asyn = train(_toy(tmp_path / "async", *BRANCHED, "train.mode=async", "train.max_staleness=0",
                      "train.rollout_workers=1"))
    a, b = read_metrics(sync), read_metrics(asyn)
    for key in ("success", "return", "policy_loss", "grad_norm", "branch/points", "branch/episodes",
                "branch/success", "episodes_trained", "signal/step_turn_share"):
        assert [m[key] for m in a] == [m[key] for m in b], key
    assert all(m["branch/episodes"] > 0 and "async/staleness_max" in m for m in b)  # the async collector grew them
    weights = [load_file(str(run / (run / "latest").read_text() / "model" / "model.safetensors")) for run in (sync, asyn)]
    assert all(bool((weights[0][k] == weights[1][k]).all()) for k in weights[0])


@pytest.mark.slow
def test_async_workers_hand_each_group_over_with_its_branches(tmp_path, async_collected):
    """Two workers, one group a chunk, running ahead of the trainer: every batch holds rollout.groups plays'
    groups, each with the branches grown from it, and no two branch groups share an id."""
    from agentgym.train.metrics import read_metrics
    from agentgym.train.trainer import train

    run = train(_toy(tmp_path, *BRANCHED, "train.mode=async", "train.max_staleness=1", "train.rollout_workers=2",
                     "train.groups_per_rollout=1", "train.staleness=correct"))
    metrics = read_metrics(run)
    assert len(async_collected) == 2 and all(m["branch/episodes"] > 0 for m in metrics)
    for batch in (c.batch for c in async_collected):
        plays = [t for t in batch if t.trunk_group is None]
        branches = [t for t in batch if t.trunk_group is not None]
        assert len({t.group_id for t in plays}) == 3 and branches
        assert {t.trunk_group for t in branches} <= {t.group_id for t in plays}
        assert not {t.group_id for t in branches} & {t.group_id for t in plays}
        for g in split_groups(branches):  # a branch group: one point of one trunk, copied the same way
            assert len(g) == 3 and len({(t.trunk_group, t.shared_prefix) for t in g}) == 1
            trunk = next(t for t in plays if t.group_id == g[0].trunk_group and t.sample_index == 0)
            assert all(t.turns[:t.shared_prefix] == trunk.turns[:t.shared_prefix] for t in g)


def test_branch_groups_are_renumbered_after_the_batchs_plays():
    from agentgym.train.collectors.async_collector import renumber_branches

    def traj(group_id, trunk_group=None):
        return Trajectory("e", group_id, group_id, 0, (), False, "max_turns", trunk_group=trunk_group)

    # two chunks' units: each worker numbered its branch groups after its own seeds (5 -> 6, 7 -> 8)
    units = [[traj(5), traj(5), traj(6, 5), traj(6, 5)], [traj(7), traj(8, 7), traj(8, 7)], [traj(8)]]
    renumbered = renumber_branches(units)
    assert [t.group_id for t in renumbered] == [9, 9, 10, 10] and [t.trunk_group for t in renumbered] == [5, 5, 7, 7]


@pytest.mark.slow
def test_branching_over_a_served_env(tmp_path):
    from agentgym.envs.remote.server import EnvServer
    from agentgym.envs.remote.service import EnvService
    from agentgym.train.trainer import train

    env_id = "agentgym/Toy-KeyDoor-OneWord-v0"
    server = EnvServer(EnvService(env_id, {"length": 2, "key_bonus": 0.5, "key_at_start": True})).start()
    try:
        assert server.url.startswith("http://127.0.0.1:")
        run = train(_toy(tmp_path / "remote", f"rollout.env=remote:{server.url}/{env_id}", "rollout.env_kwargs={}",
                         "rollout.branching.mode=all", "rollout.branching.rule=random", "rollout.branching.points=2"))
    finally:
        server.close()
    m = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert m["branch/points"] == 6 and m["branch/episodes"] == 24 and m["failed_episodes"] == 0


def test_a_tool_env_branches_in_the_policys_own_call_format():
    from agentgym.toolcall_formats import FORMATS, ToolCall
    from agentgym.train.collectors.branching import check_replayable

    mistral = FORMATS["mistral"]  # not the Calculator's own (hermes, openai)
    counter = iter(range(10_000))
    policy = ScriptedPolicy(lambda ctx: mistral.render_calls([ToolCall("calculate", {"expression": f"{next(counter)} + 1"})]),
                            ChatFormat.simple("mistral"))
    config = RolloutConfig(max_turns=4, executor="thread")
    calc = "agentgym/Toy-Calculator-v0"
    plays = rollout(calc, policy, None, [0, 1], 2, config, reset_options=OPTIONS)
    branches = grow_branches(calc, policy, None, [(plays[0], 2), (plays[2], 1)], 2, config, None, 2, OPTIONS)
    assert len(branches) == 4
    for t in plays + branches:  # every answer after the question is a tool response: the format was read
        assert t.error is None and all(k.observation.startswith("<tool_response>") for k in t.turns[1:])
    section = _section(calc)
    check_replayable(section, {"tool_format": "mistral", **OPTIONS})  # passes: the snapshot keeps the format


def _section(env: str):
    from agentgym.train.config import RolloutSection

    return RolloutSection(env=env, max_turns=4)


# --------------------------------------------------------------------------------------------- refusals


def test_refused_at_config_load_with_the_reason_and_the_fix(tmp_path):
    cases = [
        (["rollout.executor=process"], "rollout.executor=serial or thread"),
        (["rollout.layout=fold"], "rollout.layout=trajectory or step"),
        (["algorithm.dynamic_sampling=true"], "algorithm.dynamic_sampling=false"),
        (["rollout.branching.turns=[]"], "exactly one of rollout.branching.turns"),
        (["rollout.branching.rule=late", "rollout.branching.turns=[]", "rollout.branching.points=0"],
         "rollout.branching.branches and rollout.branching.points must be >= 1"),
    ]
    for overrides, match in cases:
        with pytest.raises(ConfigError, match=match) as info:
            _toy(tmp_path, "rollout.branching.mode=all", "rollout.branching.turns=[1]", *overrides)
        assert "rollout.branching.mode=off" in str(info.value)
    from agentgym.train.config import load_config

    with pytest.raises(ConfigError, match="both grow plays from snapshots: choose one"):
        load_config("quickstart_cpu", ["rollout.lookahead=2", "rollout.group_size=1", "rollout.branching.mode=all",
                                       "rollout.branching.turns=[1]"])


def test_an_env_without_snapshots_is_refused_at_config_load(tmp_path):
    from agentgym.envs.toy.keydoor import KeyDoorEnv

    class NoSnapshots(KeyDoorEnv):
        snapshot_fields = ()

    agentgym.register("test/NoSnapshots-v0", NoSnapshots, max_turns=4, override=True)
    with pytest.raises(ConfigError, match="declares none.*snapshot_fields.*mode=off"):
        _toy(tmp_path, "rollout.env=test/NoSnapshots-v0", "rollout.env_kwargs={}", "rollout.branching.mode=all",
             "rollout.branching.turns=[1]")


def test_reset_options_the_env_cannot_replay_are_refused_before_the_first_play():
    import pickle

    from agentgym.envs.toy.calculator import CalculatorEnv
    from agentgym.train.collectors.branching import check_replayable

    class ForgetsTheFormat(CalculatorEnv):
        def snapshot(self) -> bytes:
            return pickle.dumps({name: getattr(self, name) for name in (*self.snapshot_fields, "_last_obs")})

        def restore(self, data: bytes) -> None:
            for name, value in pickle.loads(data).items():
                setattr(self, name, value)

    agentgym.register("test/ForgetsTheFormat-v0", ForgetsTheFormat, max_turns=6, override=True)
    with pytest.raises(ConfigError, match=r"replays plays reset with .*mistral.*does not restore them.*mode=off"):
        check_replayable(_section("test/ForgetsTheFormat-v0"), {"tool_format": "mistral", **OPTIONS})
    check_replayable(_section("test/ForgetsTheFormat-v0"), {"tool_format": "hermes", **OPTIONS})  # its default: fine


@pytest.mark.slow
def test_branches_restore_a_swe_workspace():
    """SWE snapshots its workspace's files: a branch from turn 1 that sends the play's own next action gets the
    play's answer from its restored sandbox (check_restored compares them), and solves the task as the play did."""
    from agentgym.tools.sandbox import backend_problem

    if backend_problem("bwrap"):
        pytest.skip(f"bwrap sandbox unavailable: {backend_problem('bwrap')}")
    ls = '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>'
    # `ls` on the task statement (only reset's info has "task"), then the oracle's fix
    policy = ScriptedPolicy(lambda ctx: ls if "task" in ctx.info else ctx.env.oracle_action(), ChatFormat.simple())
    config, kwargs = RolloutConfig(max_turns=6, executor="thread"), {"backend": "bwrap"}
    plays = rollout("agentgym/SWE-Mini-v0", policy, None, [0], 1, config, kwargs, 0, reset_options=OPTIONS)
    assert plays[0].success and len(plays[0].turns) >= 3
    branches = grow_branches("agentgym/SWE-Mini-v0", policy, None, [(plays[0], 1)], 2, config, kwargs, 1, OPTIONS)
    for b in branches:
        assert b.error is None and b.success and b.shared_prefix == 1
        assert [t.action for t in b.turns] == [t.action for t in plays[0].turns]
        assert [t.observation for t in b.turns] == [t.observation for t in plays[0].turns]
