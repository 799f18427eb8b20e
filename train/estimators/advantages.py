"""Advantage estimators: pure, vectorised numpy functions over a flat `TurnTable`.

Every function takes the turn table (rows sorted by trajectory, then turn) and returns one float64
advantage per row (per turn); the trainer broadcasts a turn's advantage to that turn's action tokens.
No Python loop runs over turns: groups are found with one stable sort, sums with `np.add.reduceat`,
and discounted sums run backwards one *position* at a time, vectorised over all trajectories.

Conventions (written down once, tested in tests/train/test_advantages.py):
- std is the unbiased sample std (ddof=1), as `torch.std` in the reference implementations;
  a group of one member, or a group whose values are all equal, gets advantage exactly 0.
- `eps` is added to the std: A = (x - mean) / (std + eps).
- `invalid_penalty` p subtracts p from the reward of every turn whose action was invalid, before any
  return is computed (so it lowers the episode return and the step returns alike).
- `TurnTable.shared` rows (a branch's copies of its trunk's turns, agentgym/engine/branching.py) are trained
  and counted once, in the trunk: they get advantage exactly 0 and enter no mean, std, return or group
  size. A branch's episode return counts from its branch turn (its group's G branches share the prefix, so
  this moves their returns by one constant, which no group-normalised figure sees), and a discounted return
  from a branch turn on reads later turns only; so each trained row's advantage is what the estimator gives
  the same episodes played out by hand from the restored state (tests/train/test_branching_training.py).
"""
from __future__ import annotations

import difflib
from typing import Literal, Sequence

import numpy as np

from agentgym.trajectory import TurnTable

Mode = Literal["mean_std", "mean"]
EpisodeStats = Literal["trajectory", "turn"]


# ---------------------------------------------------------------------------------------------
# building blocks
# ---------------------------------------------------------------------------------------------

def group_normalize(x: np.ndarray, key: np.ndarray, mode: Mode = "mean_std", eps: float = 1e-6,
                    keep: np.ndarray | None = None) -> np.ndarray:
    """(x - mean_g) / (std_g + eps) within groups of equal `key` (or x - mean_g when mode="mean").

    Groups of one and groups of equal values give exactly 0 (the mean is taken as the group's
    minimum there, so the subtraction is exact, not float noise). With `keep` (a row mask), only kept
    rows enter the statistics and the rest get exactly 0.
    """
    if mode not in ("mean_std", "mean"):
        raise ValueError(f"mode must be 'mean_std' or 'mean', got {mode!r}")
    if keep is not None and not np.all(keep):
        out = np.zeros(len(x))                                                # [n]
        out[keep] = group_normalize(np.asarray(x)[keep], np.asarray(key)[keep], mode, eps)
        return out
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    if n == 0:
        return np.zeros(0)
    order = np.argsort(key, kind="stable")              # [n] rows sorted by group key
    ks, xs = np.asarray(key)[order], x[order]           # [n], [n]
    is_start = np.empty(n, dtype=bool)                  # [n] True at each group's first sorted row
    is_start[0] = True
    np.not_equal(ks[1:], ks[:-1], out=is_start[1:])
    starts = np.flatnonzero(is_start)                   # [G] first sorted row of each group
    gid = np.cumsum(is_start) - 1                       # [n] group index of each sorted row
    counts = np.diff(np.append(starts, n))              # [G]
    mean = np.add.reduceat(xs, starts) / counts         # [G]
    lo, hi = np.minimum.reduceat(xs, starts), np.maximum.reduceat(xs, starts)
    constant = lo == hi
    mean = np.where(constant, lo, mean)                # exact mean for constant groups
    centred = xs - mean[gid]                           # [n]
    if mode == "mean_std":
        ss = np.add.reduceat(centred * centred, starts)
        std = np.sqrt(ss / np.maximum(counts - 1, 1))
        degenerate = constant | (counts < 2)
        scale = np.where(degenerate, 0.0, 1.0 / np.where(degenerate, 1.0, std + eps))
        centred = centred * scale[gid]
    out = np.empty(n)
    out[order] = centred
    return out


def scale_negatives(advantages: np.ndarray, scale: float) -> np.ndarray:
    """Negative advantages times `scale` (positive ones unchanged): 1 is the estimator's own, 0 trains only on
    actions that beat their baseline. With few episodes a batch's failures are long and their turns outnumber
    the successes', so pushing their actions down (toward every other action) can outweigh the pull toward
    what worked."""
    return advantages if scale == 1.0 else np.where(advantages < 0, advantages * scale, advantages)


def trained(table: TurnTable) -> np.ndarray:
    """[n] rows an estimator trains and counts: all but a branch's copies of its trunk's turns."""
    return np.ones(len(table), dtype=bool) if table.shared is None else ~table.shared


def _sorted_table(table: TurnTable) -> np.ndarray | None:
    """The permutation that sorts rows by (traj, turn), or None when already sorted."""
    t, k = table.traj, table.turn
    if len(t) < 2:
        return None
    ok = (t[1:] > t[:-1]) | ((t[1:] == t[:-1]) & (k[1:] > k[:-1]))
    return None if ok.all() else np.lexsort((k, t))


def backward_recurrence(x: np.ndarray, coef: np.ndarray, same_next: np.ndarray) -> np.ndarray:
    """y_i = x_i + coef_i * y_{i+1} where `same_next[i]` (row i+1 continues row i's segment), else x_i.

    Runs one vectorised step per position-from-the-end, so the cost is O(rows) numpy work plus one
    Python iteration per position of the longest segment (turns per trajectory, not rows).
    """
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    y = x.copy()
    if n == 0:
        return y
    link = np.asarray(same_next, dtype=bool).copy()
    link[-1] = False
    # position from the end of the segment: 0 at the last row of each segment
    seg_end = ~link
    end_idx = np.flatnonzero(seg_end)
    seg_of_row = np.searchsorted(end_idx, np.arange(n))
    pos_from_end = end_idx[seg_of_row] - np.arange(n)
    order = np.argsort(pos_from_end, kind="stable")
    bounds = np.searchsorted(pos_from_end[order], np.arange(pos_from_end.max() + 2))
    c = np.broadcast_to(np.asarray(coef, dtype=np.float64), (n,))
    for d in range(1, len(bounds) - 1):
        rows = order[bounds[d]:bounds[d + 1]]
        y[rows] = x[rows] + c[rows] * y[rows + 1]
    return y


def _same_traj_next(traj: np.ndarray) -> np.ndarray:
    out = np.zeros(len(traj), dtype=bool)
    out[:-1] = traj[1:] == traj[:-1]
    return out


def penalised_rewards(table: TurnTable, invalid_penalty: float = 0.0) -> np.ndarray:
    """Turn rewards minus `invalid_penalty` for each invalid action."""
    r = table.reward.astype(np.float64)
    return r - invalid_penalty * (~table.valid) if invalid_penalty else r


def discounted_returns(table: TurnTable, gamma: float, invalid_penalty: float = 0.0) -> np.ndarray:
    """R_t = r_t + γ R_{t+1} within each trajectory (R after the last turn is 0)."""
    return _on_sorted(table, lambda tb: backward_recurrence(
        penalised_rewards(tb, invalid_penalty), gamma, _same_traj_next(tb.traj)))


def episode_returns(table: TurnTable, invalid_penalty: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(inverse, R): `R[j]` is the undiscounted return of the j-th distinct trajectory (over its trained rows:
    a branch's from its branch turn) and `inverse[i]` the index into R of row i's trajectory."""
    _, inverse = np.unique(table.traj, return_inverse=True)                      # [n] trajectory of each row
    returns = np.bincount(inverse, weights=penalised_rewards(table, invalid_penalty) * trained(table))  # [trajs]
    return inverse, returns


def _traj_groups(table: TurnTable, inverse: np.ndarray, n_traj: int) -> np.ndarray:
    """Group id of each distinct trajectory."""
    groups = np.empty(n_traj, dtype=np.int64)
    groups[inverse] = table.group
    return groups


def _on_sorted(table: TurnTable, fn, *cols: np.ndarray) -> np.ndarray:
    """Apply fn(table, *cols), which needs rows sorted by (traj, turn); return in the table's order."""
    perm = _sorted_table(table)
    if perm is None:
        return fn(table, *cols)
    sub = TurnTable(table.group[perm], table.traj[perm], table.turn[perm], table.anchor[perm],
                    table.reward[perm], table.valid[perm],
                    None if table.terminated is None else table.terminated[perm],
                    None if table.shared is None else table.shared[perm])
    out = np.empty(len(table))
    out[perm] = fn(sub, *(np.asarray(c)[perm] for c in cols))
    return out


def last_rows(table: TurnTable) -> np.ndarray:
    """A mask of each trajectory's last turn (the table sorted or not)."""
    last = np.zeros(len(table), dtype=bool)
    if len(table):
        order = np.lexsort((table.turn, table.traj))
        t = table.traj[order]
        last[order[np.append(t[1:] != t[:-1], True)]] = True
    return last


def _combine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One int key per distinct (a, b) pair."""
    _, ia = np.unique(a, return_inverse=True)
    ub, ib = np.unique(b, return_inverse=True)
    return ia.astype(np.int64) * len(ub) + ib


# ---------------------------------------------------------------------------------------------
# episode-level estimators (one advantage per trajectory, broadcast to its turns)
# ---------------------------------------------------------------------------------------------

def grpo(table: TurnTable, mode: Mode = "mean_std", eps: float = 1e-6, invalid_penalty: float = 0.0,
         episode_stats: EpisodeStats = "trajectory") -> np.ndarray:
    """GRPO: A_i = (R_i - mean_g R) / (std_g R + eps), or R_i - mean_g R in mode "mean".

    R_i = Σ_t r_t is trajectory i's return; g is its group (one task, G rollouts).
    episode_stats="trajectory" weighs each trajectory once in mean/std; "turn" weighs each turn once
    (a trajectory of 5 turns counts 5 times), as trainers that flatten turns into samples do.
    """
    inverse, returns = episode_returns(table, invalid_penalty)  # [turn rows] -> trajectory index; [trajectories] R_i
    keep = trained(table)                                        # [turn rows] not a branch's copied turn
    if episode_stats == "turn":                                  # each trained turn weighs once
        return group_normalize(returns[inverse], table.group, mode, eps, keep)
    if episode_stats != "trajectory":
        raise ValueError(f"episode_stats must be 'trajectory' or 'turn', got {episode_stats!r}")
    groups = _traj_groups(table, inverse, len(returns))          # [trajectories] group of each
    # [turn rows]: A_i on every trained turn of i (a branch always has trained turns: it weighs once too)
    return np.where(keep, group_normalize(returns, groups, mode, eps)[inverse], 0.0)


def rloo(table: TurnTable, invalid_penalty: float = 0.0) -> np.ndarray:
    """RLOO: A_i = R_i - (1/(G-1)) Σ_{j≠i} R_j = G/(G-1) · (R_i - mean_g R); a group of one gets 0."""
    inverse, returns = episode_returns(table, invalid_penalty)
    groups = _traj_groups(table, inverse, len(returns))
    centred = group_normalize(returns, groups, "mean")                        # [trajectories]
    _, g_inv, g_counts = np.unique(groups, return_inverse=True, return_counts=True)
    counts = g_counts[g_inv]                                                  # [trajectories] G of each's group
    scale = np.where(counts > 1, counts / np.maximum(counts - 1, 1), 0.0)
    return np.where(trained(table), (centred * scale)[inverse], 0.0)          # [turn rows]


def reinforce_pp(table: TurnTable, gamma: float = 1.0, baseline: Literal["group", "none"] = "group",
                 eps: float = 1e-6, invalid_penalty: float = 0.0) -> np.ndarray:
    """REINFORCE++ (Hu 2025) at turn level: return-to-go minus a baseline, whitened over the batch.

    x_t = R_t - b_t where R_t = r_t + γ R_{t+1} and b_t = γ^(T-1-t) mean_g(R_episode) ("group", the
    REINFORCE++-baseline variant; the group mean is discounted by the turns left, as an outcome reward
    in R_t is, so a long successful episode's early turns are not pushed below the baseline) or 0
    ("none"); then A_t = (x_t - mean_batch x) / (std_batch x + eps) over all turns of the batch (the
    global normalisation that replaces the critic).
    """
    rtg = discounted_returns(table, gamma, invalid_penalty)
    if baseline == "group":
        inverse, returns = episode_returns(table, invalid_penalty)
        groups = _traj_groups(table, inverse, len(returns))
        mean_g = returns - group_normalize(returns, groups, "mean")
        last_turn = np.bincount(inverse) - 1  # [trajs] turns are numbered 0..T-1 within a trajectory
        x = rtg - mean_g[inverse] * np.power(gamma, (last_turn[inverse] - table.turn).astype(np.float64))
    elif baseline == "none":
        x = rtg
    else:
        raise ValueError(f"baseline must be 'group' or 'none', got {baseline!r}")
    # [turn rows] whitened over the batch's trained turns
    return group_normalize(x, np.zeros(len(x), dtype=np.int64), "mean_std", eps, trained(table))


# ---------------------------------------------------------------------------------------------
# GiGPO
# ---------------------------------------------------------------------------------------------

def similar_anchor_codes(table: TurnTable, anchor_text: Sequence[str], threshold: float) -> np.ndarray:
    """Merge anchors of one group whose texts are similar (difflib ratio >= threshold).

    `anchor_text[c]` is the text of anchor code c. Each group's distinct anchors are clustered
    greedily in order of first appearance (an anchor joins the first cluster whose representative
    it matches). Returns new anchor codes per row. Loops over distinct anchors of a group, not turns.
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"similarity threshold must be in (0, 1], got {threshold}")
    pairs = _combine(table.group, table.anchor)
    _, first = np.unique(pairs, return_index=True)
    rep_of: dict[tuple[int, int], int] = {}
    reps: dict[int, list[int]] = {}
    for row in np.sort(first):
        g, a = int(table.group[row]), int(table.anchor[row])
        text = anchor_text[a]
        target = a
        for r in reps.setdefault(g, []):
            if difflib.SequenceMatcher(None, text, anchor_text[r], autojunk=False).ratio() >= threshold:
                target = r
                break
        else:
            reps[g].append(a)
        rep_of[(g, a)] = target
    return np.fromiter((rep_of[(int(g), int(a))] for g, a in zip(table.group, table.anchor)),
                       dtype=np.int64, count=len(table))


def gigpo_parts(table: TurnTable, gamma: float = 0.95, mode: Mode = "mean_std", eps: float = 1e-6,
                invalid_penalty: float = 0.0, episode_stats: EpisodeStats = "trajectory",
                anchors: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(A_episode, A_step) of GiGPO, one value per turn.

    A_episode = `grpo(table, mode, eps, invalid_penalty, episode_stats)`.
    A_step: each turn's discounted return R_t = r_t + γ R_{t+1} is normalised (same `mode`) within
    its step group, the turns of one group (task) that act from the same anchor state. Step groups
    never cross tasks because the key is (group, anchor). `anchors` replaces `table.anchor`
    (e.g. `similar_anchor_codes(...)`).
    """
    a_episode = grpo(table, mode, eps, invalid_penalty, episode_stats)       # [turn rows]
    step_returns = discounted_returns(table, gamma, invalid_penalty)          # [turn rows] R_t
    key = _combine(table.group, table.anchor if anchors is None else anchors)  # [turn rows] step group
    return a_episode, group_normalize(step_returns, key, mode, eps, trained(table))


def gigpo(table: TurnTable, gamma: float = 0.95, w: float = 1.0, mode: Mode = "mean_std", eps: float = 1e-6,
          invalid_penalty: float = 0.0, episode_stats: EpisodeStats = "trajectory",
          anchor_text: Sequence[str] | None = None, similarity: float | None = None) -> np.ndarray:
    """GiGPO: A_t = A_episode + w · A_step (see `gigpo_parts`).

    With `similarity` (and `anchor_text`, the text of each anchor code), anchors of one group whose
    texts are at least that similar share a step group (the paper's similarity-based grouping).
    """
    anchors = None
    if similarity is not None:
        if anchor_text is None:
            raise ValueError("similarity grouping needs anchor_text (the text of each anchor code)")
        anchors = similar_anchor_codes(table, anchor_text, similarity)
    a_episode, a_step = gigpo_parts(table, gamma, mode, eps, invalid_penalty, episode_stats, anchors)
    return a_episode + w * a_step


# ---------------------------------------------------------------------------------------------
# critic-based: turn-level and bi-level GAE
# ---------------------------------------------------------------------------------------------

def turn_gae(table: TurnTable, values: np.ndarray, gamma: float = 1.0, lam: float = 1.0,
             invalid_penalty: float = 0.0, final_values: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Turn-level GAE. Returns (advantages, returns) per turn.

    V_k is the critic's value at the state turn k acts from. V after a trajectory's last turn is
    `final_values` at that row (the value of the state it was cut off in: bootstrapping a truncated
    episode), or 0 (terminated; also where `final_values` is None):
        δ_k = r_k + γ V_{k+1} − V_k,    A_k = δ_k + γλ A_{k+1},    returns_k = A_k + V_k.
    The discount counts turns, not tokens; A_k goes to every action token of turn k.
    """
    def fn(tb: TurnTable, v: np.ndarray, v_final: np.ndarray) -> np.ndarray:  # [turn rows], trajectory-sorted
        nxt = _same_traj_next(tb.traj)                                   # row k+1 is the same trajectory's next turn
        v_next = np.where(nxt, np.append(v[1:], 0.0), v_final)           # V_{k+1}
        delta = penalised_rewards(tb, invalid_penalty) + gamma * v_next - v  # δ_k
        return backward_recurrence(delta, gamma * lam, nxt)

    values = np.asarray(values, dtype=np.float64)
    final = np.zeros(len(values)) if final_values is None else np.asarray(final_values, dtype=np.float64)
    adv = _on_sorted(table, fn, values, final)
    return adv, adv + values


def bi_level_gae(table: TurnTable, token_row: np.ndarray, token_values: np.ndarray, gamma_turn: float = 1.0,
                 lam_turn: float = 1.0, lam_token: float = 1.0, invalid_penalty: float = 0.0,
                 final_values: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Bi-level GAE over action tokens. Returns (advantages, returns) per token.

    `token_row[j]` is the table row (turn) of action token j and `token_values[j]` the critic's value
    there; tokens are ordered by (trajectory, turn, position) and the table must be sorted.
    Inside turn k (γ_token = 1, no reward):   δ_j = V_{j+1} − V_j,             A_j = δ_j + λ_token A_{j+1}.
    At the last token of turn k:  δ_j = r_k + γ_turn V_{k+1,first} − V_j,       A_j = δ_j + γ_turn λ_turn A_{k+1,first}
    with A after the trajectory's last turn = 0 and V there = `final_values[row]` (bootstrapping a
    truncated episode; 0 when None). With one token per turn this is `turn_gae`.
    """
    if _sorted_table(table) is not None:
        raise ValueError("bi_level_gae needs the turn table sorted by (traj, turn)")
    row = np.asarray(token_row, dtype=np.int64)
    v = np.asarray(token_values, dtype=np.float64)
    n = len(v)
    if n and np.any(np.diff(row) < 0):
        raise ValueError("token_row must be non-decreasing (tokens ordered by trajectory, turn, position)")
    nxt_row = np.append(row[1:], -1)
    same_turn = nxt_row == row
    same_traj = np.zeros(n, dtype=bool)
    same_traj[:-1] = table.traj[row[1:]] == table.traj[row[:-1]]
    last_of_turn = ~same_turn
    v_after = np.zeros(n) if final_values is None else np.asarray(final_values, dtype=np.float64)[row]
    v_next = np.where(same_traj, np.append(v[1:], 0.0), v_after)
    rewards = penalised_rewards(table, invalid_penalty)[row]
    delta = np.where(last_of_turn, rewards + gamma_turn * v_next, v_next) - v
    coef = np.where(last_of_turn, gamma_turn * lam_turn, lam_token)
    adv = backward_recurrence(delta, coef, same_traj)
    return adv, adv + v


# ---------------------------------------------------------------------------------------------
# HGPO: hierarchy of step groups by how much past context agrees
# ---------------------------------------------------------------------------------------------

def history_level_codes(histories: Sequence[Sequence[str]], depth: int) -> np.ndarray:
    """[rows, depth] int codes: column k-1 codes the hash of row's last k turns of context.

    `histories[i]` is `Turn.history` (hashes of the last 1, 2, ... turns, as the rollout records them).
    A turn with fewer than k past turns uses its whole history (its start-of-episode context is then
    part of what must agree), so the code is that of its longest recorded hash, or "" at turn 0.
    """
    codes: dict[str, int] = {}
    out = np.zeros((len(histories), depth), dtype=np.int64)
    for i, h in enumerate(histories):
        for k in range(1, depth + 1):
            key = h[min(k, len(h)) - 1] if h else ""
            out[i, k - 1] = codes.setdefault(key, len(codes))
    return out


def hgpo_step(table: TurnTable, history_codes: np.ndarray, gamma: float = 0.95, mode: Mode = "mean_std",
              eps: float = 1e-6, invalid_penalty: float = 0.0, alpha: float = 1.0,
              anchors: np.ndarray | None = None) -> np.ndarray:
    """HGPO's step advantage (Hierarchy-of-Groups Policy Optimization).

    Level k = 0…K groups the turns of one task that act from the same anchor state AND whose last k
    turns of context agree (level 0 is GiGPO's step group; `history_codes[:, k-1]` keys level k).
    Each level gives A_k = (R_t − mean_{G_k} R) / (std_{G_k} R + eps) of the discounted return R_t
    (or R_t − mean in mode "mean"), and the hierarchy combines them with adaptive weights

        A_step = Σ_k w_k · 1[|G_k| ≥ 2] · A_k / Σ_k w_k · 1[|G_k| ≥ 2],   w_k = (k + 1)^α,

    so levels with more consistent context weigh more and a level whose group holds only this turn
    (no comparison possible) drops out and gives its weight to the others; a turn with no group of two
    gets 0. K = 0 is exactly GiGPO's A_step. (Written from the paper's description: verl-agent's
    recipe/hgpo was not reachable here.)
    """
    history_codes = np.asarray(history_codes, dtype=np.int64).reshape(len(table), -1)  # [n, K]
    returns = discounted_returns(table, gamma, invalid_penalty)                  # [n] R_t
    key = _combine(table.group, table.anchor if anchors is None else anchors)    # [n] level-0 group
    keep = trained(table)                                                        # [n] counted rows
    num = np.zeros(len(table))
    den = np.zeros(len(table))
    for k in range(history_codes.shape[1] + 1):
        if k:
            key = _combine(key, history_codes[:, k - 1])
        _, inv = np.unique(key, return_inverse=True)
        counts = np.bincount(inv, weights=keep.astype(np.float64))              # [groups] trained rows in each
        w = float(k + 1) ** alpha * (counts[inv] >= 2) * keep                   # [n]
        num += w * group_normalize(returns, key, mode, eps, keep)
        den += w
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


def hgpo(table: TurnTable, history_codes: np.ndarray, gamma: float = 0.95, w: float = 1.0,
         mode: Mode = "mean_std", eps: float = 1e-6, invalid_penalty: float = 0.0,
         episode_stats: EpisodeStats = "trajectory", alpha: float = 1.0,
         anchors: np.ndarray | None = None) -> np.ndarray:
    """HGPO: A_t = A_episode + w · A_step, A_episode as GiGPO's, A_step from `hgpo_step`."""
    a_episode = grpo(table, mode, eps, invalid_penalty, episode_stats)
    return a_episode + w * hgpo_step(table, history_codes, gamma, mode, eps, invalid_penalty, alpha, anchors)
