"""Training through the gateway from a config alone (issue 54): gateway.harness (a Python callable) or
gateway.command (a program) selects the gateway collector, which starts its own gateway in front of the
trainer's policy; what it cannot run with (async among them) is refused at load with the reason."""
from __future__ import annotations

import json

import pytest

from agentgym.errors import ConfigError

pytest.importorskip("transformers")
RUN = ["eval.every=0", "rollout.layout=trajectory", "train.verify_tokens=false", "rollout.groups=2",
       "rollout.group_size=4", "logging.progress=false", "train.mini_batches=2", "train.micro_batch_size=16"]


def load(tmp_path, *extra: str):
    from agentgym.train.config import load_config

    return load_config("toy_learning", [f"train.run_dir={tmp_path / 'run'}", *RUN, *extra])


def test_the_config_selects_the_gateway_collector_only_when_it_names_a_harness(tmp_path):
    from agentgym.train.collectors import collector_name

    assert collector_name(load(tmp_path), False) == "sync"
    assert collector_name(load(tmp_path, "gateway.harness=harness_keydoor:run"), False) == "gateway"
    assert collector_name(load(tmp_path, "gateway.command=python3 agent.py"), False) == "gateway"


@pytest.mark.parametrize("extra, message", [
    (["train.mode=async", "algorithm.loss.tis_cap=2"], "train.mode=async keeps rollout workers playing"),
    (["train.verify_tokens=true"], "set train.verify_tokens=false"),
    (["eval.every=2"], "set eval.every=0"),
    (["algorithm.dynamic_sampling=true"], "set algorithm.dynamic_sampling=false"),
    (["gateway.command=python3 agent.py"], "set one of them"),
    (["gateway.tasks=no_colon"], "must be \"module:function\""),
    (["gateway.workers=0"], "gateway.workers must be >= 1"),
])
def test_what_the_gateway_cannot_run_with_is_refused_at_load(tmp_path, extra, message):
    with pytest.raises(ConfigError) as refused:
        load(tmp_path, "gateway.harness=harness_keydoor:run", *extra)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_an_unimportable_harness_is_refused_at_load(tmp_path):
    with pytest.raises(ConfigError, match="cannot import no_such_module_here"):
        load(tmp_path, "gateway.harness=no_such_module_here:run")
    with pytest.raises(ConfigError, match="harness_keydoor has no nothing"):
        load(tmp_path, "gateway.harness=harness_keydoor:nothing")


@pytest.mark.slow
def test_agentgym_train_runs_a_harness_the_config_names_and_resumes(tmp_path):
    """Two iterations of the trainer's own loop (checkpoints and all) on the example harness; a resume goes on
    with fresh tasks. ~15 s."""
    pytest.importorskip("openai")
    from agentgym.train.metrics import read_metrics
    from agentgym.train.trainer import train

    names = ["gateway.harness=harness_keydoor:run", "gateway.tasks=harness_keydoor:tasks", "gateway.workers=4"]
    run = train(load(tmp_path, "train.iterations=1", *names))
    [m] = read_metrics(run)
    assert m["gateway/sessions"] == 8 and m["gateway/failed_sessions"] == 0 and m["gateway/lost_calls"] == 0
    assert m["episodes_trained"] == 8 and m["logprob_diff"] < 1e-3 and "grad_norm" in m
    assert (run / "latest").exists()
    run = train(load(tmp_path, "train.iterations=2", "checkpoint.resume=auto", *names))
    rows = read_metrics(run)
    assert len(rows) == 2 and rows[1]["gateway/sessions"] == 8
    rollouts = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]  # 4 per iteration
    first_task = {r["iteration"]: r["seed"] for r in rollouts if r["group"] == r["seed"]}
    assert first_task == {0: 0, 1: 2}, rollouts  # the resume played fresh tasks (seeds 2, 3), not 0 and 1 again


@pytest.mark.slow
def test_the_harness_as_a_program_named_by_the_config(tmp_path):
    """gateway.command: the example harness run as a program once per session. ~20 s."""
    pytest.importorskip("openai")
    from pathlib import Path

    from agentgym.train.metrics import read_metrics
    from agentgym.train.trainer import train

    program = Path(__file__).parent / "harness_keydoor.py"
    run = train(load(tmp_path, "train.iterations=1", f"gateway.command=python3 {program}", "gateway.workers=4"))
    [m] = read_metrics(run)
    assert m["gateway/sessions"] == 8 and m["gateway/failed_sessions"] == 0 and m["episodes_trained"] == 8
