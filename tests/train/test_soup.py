"""train.soup_runs: K runs of one config from one start, with their own seeds, played as processes side by side
and averaged into the run's checkpoint; the maths is exact, a finished soup is not redone, an earlier run is
not mixed in, and what a soup cannot average is refused."""
from __future__ import annotations

import json

import pytest

from agentgym.errors import ConfigError
from agentgym.train.config import config_from_dict, load_config
from agentgym.train.soup import SoupError, average, mean_rows, member_overrides, member_threads

torch = pytest.importorskip("torch")
SMALL = ["rollout.groups=2", "rollout.group_size=2", "rollout.max_new_tokens=4", "eval.every=0",
         "logging.progress=false", "optim.lr=1e-3"]


def test_average_is_the_uniform_mean_and_leaves_shared_tensors_bit_for_bit():
    a = {"w": torch.tensor([1.0, 2.0]), "frozen": torch.tensor([0.1, 0.3]), "ids": torch.tensor([3, 4])}
    b = {"w": torch.tensor([3.0, -2.0]), "frozen": torch.tensor([0.1, 0.3]), "ids": torch.tensor([3, 4])}
    c = {"w": torch.tensor([2.0, 3.0]), "frozen": torch.tensor([0.1, 0.3]), "ids": torch.tensor([3, 4])}
    out = average([a, b, c])
    assert torch.equal(out["w"], torch.tensor([2.0, 1.0]))
    assert torch.equal(out["frozen"], a["frozen"]) and out["frozen"].dtype == torch.float32
    assert torch.equal(out["ids"], a["ids"]) and out["ids"].dtype == torch.int64
    half = average([{"h": torch.tensor([1.0], dtype=torch.bfloat16)}, {"h": torch.tensor([2.0], dtype=torch.bfloat16)}])
    assert half["h"].dtype == torch.bfloat16 and half["h"].item() == 1.5
    with pytest.raises(SoupError, match="other tensors"):
        average([a, {"w": b["w"]}])
    with pytest.raises(SoupError, match="at least one"):
        average([])


def test_mean_rows_averages_each_iteration_the_members_reached():
    m0 = [{"iteration": 0, "success": 1.0, "time/update": 10.0, "note": "x"},
          {"iteration": 1, "success": 0.5, "time/update": 12.0, "note": "x"}]
    m1 = [{"iteration": 0, "success": 0.0, "time/update": 14.0, "note": "y"}]
    rows = mean_rows([m0, m1])
    assert rows == [{"soup_members": 2, "iteration": 0, "success": 0.5, "time/update": 12.0}]


def test_members_get_their_own_seeds_dirs_and_a_share_of_the_threads(tmp_path):
    cfg = load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.seed=3", "rollout.seed_start=300000"])
    zero, one = member_overrides(cfg, 0, 1), member_overrides(cfg, 1, 1)
    assert zero["train"]["seed"] == 3 and zero["rollout"]["seed_start"] == 300000  # member 0: the plain run
    assert one["train"]["seed"] == 1003 and one["rollout"]["seed_start"] == 100_300_000
    assert zero["train"]["run_dir"] != one["train"]["run_dir"] and one["train"]["soup_runs"] == 1
    assert one["sft"] == {"enabled": False}
    assert member_threads(2, 2, 16) == 1 and member_threads(0, 2, 8) == 4 and member_threads(1, 3, 2) == 1


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "model" / "model.safetensors"))


@pytest.mark.slow  # two tiny runs as processes
def test_a_soup_of_two_runs_averages_their_final_weights_and_is_not_redone(tmp_path, capsys):
    from agentgym.train.checkpoint import checkpoint_problem
    from agentgym.train.trainer import train
    from agentgym.policies.registry import checkpoint_model_dir

    run = tmp_path / "run"
    overrides = [f"train.run_dir={run}", *SMALL, "train.iterations=2", "train.soup_runs=2", "train.torch_threads=2"]
    assert train(load_config("toy_learning", overrides)) == run
    members = [run / "soup" / f"run-{k}" for k in range(2)]
    finals = [_weights(m / "ckpt-2") for m in members]
    moved = [n for n in finals[0] if not torch.equal(finals[0][n], finals[1][n])]
    assert moved  # the members learnt different things (their own seeds)
    souped = _weights(run / "ckpt-2")
    for name in finals[0]:
        assert torch.equal(souped[name], ((finals[0][name].double() + finals[1][name].double()) / 2).float())
    assert checkpoint_problem(run / "ckpt-2") is None and (run / "latest").read_text() == "ckpt-2"
    assert checkpoint_model_dir(str(run)) == str(run / "ckpt-2" / "model")
    seeds = [{json.loads(line)["seed"] for line in (m / "rollouts.jsonl").read_text().splitlines()} for m in members]
    assert seeds[0] and not seeds[0] & seeds[1]  # no task played by both
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1] and all(r["soup_members"] == 2 for r in rows)
    # member 0 is the plain run of the same config (one thread, as the member had)
    plain = tmp_path / "plain"
    train(load_config("toy_learning", [f"train.run_dir={plain}", *SMALL, "train.iterations=2", "train.torch_threads=1"]))
    assert all(torch.equal(w, finals[0][n]) for n, w in _weights(plain / "ckpt-2").items())
    # a finished soup returns at once with resume; without it, the earlier run is not mixed in
    capsys.readouterr()
    train(load_config("toy_learning", [*overrides, "checkpoint.resume=auto"]))
    assert "already averages 2 runs" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="already holds a run"):
        train(load_config("toy_learning", overrides))
    with pytest.raises(ConfigError, match="averages a soup's runs"):  # no optimizer state to train on from
        train(load_config("toy_learning", [*overrides[:-2], "checkpoint.resume=auto"]))


def test_an_earlier_run_in_a_member_dir_is_refused_before_any_member_starts(tmp_path):
    from agentgym.train.trainer import train

    run = tmp_path / "run"
    member = run / "soup" / "run-1"
    member.mkdir(parents=True)
    (member / "metrics.jsonl").write_text('{"iteration": 0}\n')  # an earlier run there: refused up front
    with pytest.raises(ConfigError, match="run-1"):
        train(load_config("toy_learning", [f"train.run_dir={run}", *SMALL, "train.soup_runs=2"]))


def test_a_member_that_fails_is_named_with_its_log(tmp_path):
    from agentgym.train.trainer import train

    run = tmp_path / "run"
    cfg = load_config("toy_learning", [f"train.run_dir={run}", *SMALL, "train.soup_runs=2",
                                       f"model.policy=checkpoint:{tmp_path / 'no-such-checkpoint'}"])
    with pytest.raises(SoupError, match=r"soup member 0 failed \(exit code 2\): .*no-such-checkpoint.*run-0.log"):
        train(cfg)
    assert not (run / "latest").exists()  # nothing averaged


@pytest.mark.parametrize("override,message", [
    ({"train": {"soup_runs": 0}}, ">= 1"),
    ({"train": {"soup_runs": 2}, "model": {"lora": {"enabled": True}}}, "model.lora.enabled=false"),
    ({"train": {"soup_runs": 2, "distributed": "ddp"}}, "train.distributed=none"),
])
def test_a_soup_the_runs_cannot_make_is_refused(override, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict(override)
    config_from_dict({"train": {"soup_runs": 2}})


@pytest.mark.slow  # two tiny runs as processes
def test_the_soup_throughput_benchmark_counts_every_members_episodes(monkeypatch, capsys, tmp_path):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import soup_throughput

    assert soup_throughput.main(["--quick", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "one run, 2 threads" in printed and "soup / one run, episodes a minute:" in printed
    one, soup = soup_throughput.episodes_trained(tmp_path / "one-run-0"), soup_throughput.episodes_trained(tmp_path / "soup-0")
    assert one == 2 * 4 and soup == 2 * one  # 2 iterations of 2 x 2 episodes; the soup's two members each as many
    with pytest.raises(SystemExit):
        soup_throughput.main(["--threads", "1", "--quick"])
