"""Evaluation: suites, metrics (success with a Wilson interval, unbiased pass@k), reports and plots.

Light at import time: the runner, the policies and matplotlib load only when used.

    agentgym eval --policy oracle --suite toy --episodes 20 --out runs/eval-oracle
    agentgym plot runs/train-a runs/train-b --out curves.png
"""
from agentgym.eval.metrics import Metrics, compute_metrics, pass_at_k, wilson_interval
from agentgym.eval.suites import load_suite_file, resolve_envs


def run_eval(config, **kwargs):
    """Run an evaluation (see `agentgym.eval.runner.run_eval`)."""
    from agentgym.eval.runner import run_eval as _run

    return _run(config, **kwargs)


__all__ = ["Metrics", "compute_metrics", "load_suite_file", "pass_at_k", "resolve_envs", "run_eval",
           "wilson_interval"]
