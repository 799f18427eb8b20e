"""Data-parallel training for real: torchrun, 2 processes, gloo on the CPU, the tiny model on the toy env."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.errors import ConfigError  # noqa: E402
from agentgym.train.config import load_config  # noqa: E402
from agentgym.train.metrics import read_metrics  # noqa: E402
from agentgym.train.trainer import train  # noqa: E402

SMALL = ["rollout.groups=2", "rollout.group_size=4", "eval.every=0", "train.mini_batches=2",
         "train.micro_batch_size=16", "train.torch_threads=1"]


def _overrides(run_dir: Path, *extra: str) -> list[str]:
    return [f"train.run_dir={run_dir}", *SMALL, *extra]


def _torchrun(run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    # --standalone: the rendezvous store binds a free port itself (a port picked beforehand can be taken
    # by another test in between, and the ranks then wait on a stranger's store)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "agentgym.train", "toy_learning", *_overrides(run_dir, *extra)]
    # 300 s: under the full two-worker suite one 3-iteration run printed its last line and was still exiting at 180 s
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _weights(ckpt: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for f in sorted((ckpt / "model").glob("*.safetensors")):
        state.update(load_file(str(f)))
    return state


def test_two_gloo_ranks_equal_one_process_after_one_step(tmp_path: Path):
    one = train(load_config("toy_learning", _overrides(tmp_path / "one", "train.iterations=1")))
    _torchrun(tmp_path / "two", "train.iterations=1", "train.distributed=ddp")
    m1, m2 = read_metrics(one)[0], read_metrics(tmp_path / "two")[0]
    assert m1["samples"] == m2["samples"] > 0
    assert m2["policy_loss"] == pytest.approx(m1["policy_loss"], rel=1e-5, abs=1e-7)
    assert m2["grad_norm"] == pytest.approx(m1["grad_norm"], rel=1e-5)
    w1, w2 = _weights(one / "ckpt-1"), _weights(tmp_path / "two" / "ckpt-1")
    assert w1.keys() == w2.keys()
    init = _weights_initial(tmp_path)
    moved = 0
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=1e-4, atol=1e-5)  # Adam: ~lr*sign(g) on tiny g
        moved += int(not torch.equal(w1[k], init[k]))
    assert moved > 0  # the step really changed weights, on both runs alike


def _weights_initial(tmp_path: Path) -> dict[str, torch.Tensor]:
    """The tiny model's initial weights (the same seed the runs start from)."""
    from agentgym.train.trainer import Trainer

    t = Trainer(load_config("toy_learning", _overrides(tmp_path / "init", "train.iterations=1")))
    try:
        return {k: v.detach().clone() for k, v in t.model.state_dict().items()}
    finally:
        t.close()


def test_kill_and_resume_with_two_ranks(tmp_path: Path):
    full, part = tmp_path / "full", tmp_path / "part"
    _torchrun(full, "train.iterations=3")  # under torchrun "none" means ddp
    _torchrun(part, "train.iterations=2")
    assert (part / "latest").read_text() == "ckpt-2"
    _torchrun(part, "train.iterations=3", "checkpoint.resume=auto")
    a, b = read_metrics(full), read_metrics(part)
    assert [m["iteration"] for m in b] == [0, 1, 2]
    for key in ("success", "return", "policy_loss", "grad_norm"):
        assert b[2][key] == pytest.approx(a[2][key], rel=1e-5, abs=1e-7), key
    wa, wb = _weights(full / "ckpt-3"), _weights(part / "ckpt-3")
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-4, atol=1e-5)  # Adam: ~lr*sign(g) on tiny g


def test_ddp_without_torchrun_says_how_to_launch(tmp_path: Path):
    with pytest.raises(ConfigError, match="torchrun"):
        train(load_config("toy_learning", _overrides(tmp_path, "train.iterations=1", "train.distributed=ddp")))


def test_unknown_mode_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="distributed"):
        load_config("toy_learning", _overrides(tmp_path, "train.distributed=mpi"))


def test_two_ranks_write_sharded_state_that_restores(tmp_path: Path):
    """The 2-rank checkpoint holds torch.distributed.checkpoint files from both ranks (dcp/), which a
    1-process reader loads back into the same weights as the HF copy."""
    import torch.distributed.checkpoint as dcp

    run = tmp_path / "run"
    _torchrun(run, "train.iterations=1")
    shards = run / "ckpt-1" / "dcp"
    assert (shards / ".metadata").exists() and len(list(shards.glob("*.distcp"))) == 2
    hf = _weights(run / "ckpt-1")
    meta = dcp.FileSystemReader(str(shards)).read_metadata()
    keys = [k for k in meta.state_dict_metadata if k.startswith("model.")]
    assert keys and any(k.startswith("optim.state.") for k in meta.state_dict_metadata)
    state = {"model": {k[len("model."):]: torch.empty(meta.state_dict_metadata[k].size) for k in keys}}
    dcp.load(state, checkpoint_id=str(shards))
    common = [name for name in state["model"] if name in hf]
    assert len(common) >= len(hf) - 1  # all but a tied lm_head
    for name in common:
        torch.testing.assert_close(state["model"][name], hf[name])
