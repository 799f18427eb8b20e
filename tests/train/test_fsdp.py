"""FSDP2 and a data-parallel critic for real: torchrun, 2 processes, gloo on the CPU, the tiny model on the
toy env, compared with the 1-process run on the same batch (loss, gradient norms, weights after a step)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.errors import ConfigError  # noqa: E402
from agentgym.train import distributed as D  # noqa: E402
from agentgym.train.config import load_config  # noqa: E402
from agentgym.train.metrics import read_metrics  # noqa: E402
from agentgym.train.trainer import train  # noqa: E402

# reading a dcp/ directory back in this (non-distributed) process is meant, not a mistake
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

SMALL = ["rollout.groups=2", "rollout.group_size=4", "eval.every=0", "train.mini_batches=2",
         "train.micro_batch_size=16", "train.torch_threads=1", "logging.progress=false"]
# 3 mini-batches of 2-sample micro-batches: 64 samples split 22/21/21, so in two of them one rank has a
# micro-batch fewer than the other and must run a zero-loss filler to join FSDP's collectives
FILLERS = ["train.mini_batches=3", "train.micro_batch_size=2"]
KL = ["algorithm.regularisers.kl_coef=0.05"]  # a frozen reference copy, sharded like the model under fsdp
GAE = ["algorithm.estimator=turn_gae"]


def _overrides(run_dir: Path, *extra: str) -> list[str]:
    return [f"train.run_dir={run_dir}", *SMALL, *extra]


def _one_process(run_dir: Path, *extra: str) -> Path:
    return train(load_config("toy_learning", _overrides(run_dir, *extra)))


def _torchrun(run_dir: Path, *extra: str, timeout: float = 150, nproc: int = 2) -> Path:
    """`torchrun --standalone --nproc_per_node 2` (its store binds a free port itself); a hang kills the
    whole process group, so no rank outlives the test."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
           "-m", "agentgym.train", "toy_learning", *_overrides(run_dir, *extra)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        pytest.fail(f"torchrun ran past {timeout} s: {err[-3000:]}")
    assert proc.returncode == 0, err[-3000:]
    return run_dir


def _safetensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        state.update(load_file(str(f)))
    return state


def _dcp_part(shards: Path, prefix: str) -> dict[str, torch.Tensor]:
    """The tensors under `prefix.` of a torch.distributed.checkpoint directory, read back whole."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    meta = dcp.FileSystemReader(str(shards)).read_metadata().state_dict_metadata
    keys = [k for k, m in meta.items() if k.startswith(prefix + ".") and isinstance(m, TensorStorageMetadata)]
    state = {prefix: {k[len(prefix) + 1:]: torch.empty(meta[k].size) for k in keys}}
    dcp.load(state, checkpoint_id=str(shards), no_dist=True)
    return state[prefix]


def _critic(ckpt: Path) -> dict[str, torch.Tensor]:
    """The critic's weights: trainer.pt for 1 process and ddp, the sharded dcp/ state for fsdp."""
    saved = torch.load(ckpt / "trainer.pt", weights_only=False)["critic"]
    return saved if saved is not None else _dcp_part(ckpt / "dcp", "critic")


def _assert_same_weights(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], at_least: int) -> None:
    common = sorted(set(got) & set(want))
    assert len(common) >= at_least, (sorted(got)[:4], sorted(want)[:4])
    for k in common:  # Adam moves a weight by ~lr*sign(g) = 3e-3 where g is tiny, so float noise in
        # such a g shows up to ~1e-4 in an odd element (ddp alike); a wrong clip or scale moves many by 1e-3
        torch.testing.assert_close(got[k], want[k], rtol=1e-4, atol=2e-4, msg=k)
        assert float((got[k] - want[k]).abs().mean()) < 1e-6, k


def _assert_same_step(one: dict, two: dict, keys=("policy_loss", "grad_norm")) -> None:
    """(The entropy metric is a mean of micro-batch means, so it depends on how the ranks cut them.)"""
    assert one["samples"] == two["samples"] > 0
    # fp32 sums in another order (two ranks' micro-batches, a reduce across ranks): on this machine's torch and
    # transformers the policy loss of the two-rank step differs by 1.08e-5 relative (1.6e-7 of -0.0151); a
    # wrong shard or a missed micro-batch moves it by orders of magnitude more
    for key in keys:
        assert two[key] == pytest.approx(one[key], rel=3e-5, abs=1e-7), key


def _micro_counts(n: int, mini_batches: int, micro: int, world: int) -> list[list[int]]:
    return [[-(-len(part) // micro) for part in np.array_split(np.arange(len(m)), world)]
            for m in np.array_split(np.arange(n), mini_batches)]


@pytest.fixture(scope="module")
def fsdp_step(tmp_path_factory) -> tuple[Path, Path]:
    """(1-process run, 2-rank fsdp run) of one iteration on the same batch, with filler micro-batches and
    a KL penalty (it pulls from the second mini-batch on, once the policy has left the reference)."""
    base = tmp_path_factory.mktemp("fsdp")
    one = _one_process(base / "one", "train.iterations=1", *FILLERS, *KL)
    two = _torchrun(base / "two", "train.iterations=1", "train.distributed=fsdp", *FILLERS, *KL)
    return one, two


def test_fsdp_two_ranks_equal_one_process_after_one_step(fsdp_step):
    one, two = fsdp_step
    m1, m2 = read_metrics(one)[0], read_metrics(two)[0]
    assert any(len(set(c)) > 1 for c in _micro_counts(int(m1["samples"]), 3, 2, 2))  # fillers did run
    _assert_same_step(m1, m2)
    assert m1["kl"] > 0 and m2["kl"] > 0  # the reference did pull
    assert m1["grad_norm"] > 1.0  # above optim.max_grad_norm: the sharded clip was exercised
    w1, w2 = _safetensors(one / "ckpt-1" / "model"), _safetensors(two / "ckpt-1" / "model")
    assert w1.keys() == w2.keys()
    _assert_same_weights(w2, w1, len(w1))
    init = _safetensors(one / "tiny-model")
    assert any(not torch.equal(w1[k], init[k]) for k in w1)  # the step really moved weights
    shards = two / "ckpt-1" / "dcp"
    assert (shards / ".metadata").exists() and len(list(shards.glob("*.distcp"))) == 2
    # the sharded model state (what a torchrun resume loads) holds the same weights as rank 0's HF copy
    _assert_same_weights(_dcp_part(shards, "model"), w1, len(w1) - 1)  # all but a tied lm_head


def test_fsdp_checkpoint_resumed_without_torchrun_says_how(fsdp_step, tmp_path: Path):
    run = tmp_path / "run"
    shutil.copytree(fsdp_step[1], run)
    with pytest.raises(ConfigError, match="torchrun with train.distributed=fsdp"):
        _one_process(run, "train.iterations=2", "checkpoint.resume=auto", *FILLERS, *KL)


def test_fsdp_lora_two_ranks_equal_one_process(tmp_path: Path):
    lora = ["train.iterations=1", "model.lora.enabled=true", "model.lora.r=4"]
    one = _one_process(tmp_path / "one", *lora)
    two = _torchrun(tmp_path / "two", *lora, "train.distributed=fsdp")
    _assert_same_step(read_metrics(one)[0], read_metrics(two)[0])
    a1, a2 = _safetensors(one / "ckpt-1" / "adapter"), _safetensors(two / "ckpt-1" / "adapter")
    assert a1 and a1.keys() == a2.keys()
    _assert_same_weights(a2, a1, len(a1))
    assert any(float(v.abs().max()) > 0 for k, v in a1.items() if "lora_B" in k)  # B starts at 0: it moved
    _assert_same_weights(_safetensors(two / "ckpt-1" / "model"), _safetensors(one / "ckpt-1" / "model"), 10)


@pytest.mark.parametrize("mode, critic", [("ddp", "shared"), ("fsdp", "separate")])
def test_critic_gae_two_ranks_equal_one_process(tmp_path: Path, mode: str, critic: str):
    """Turn-level GAE with a data-parallel critic: the value loss, both gradient norms, the policy's and
    the critic's weights after one step equal the 1-process run."""
    extra = ["train.iterations=1", *GAE, f"model.critic={critic}"]
    one = _one_process(tmp_path / "one", *extra)
    two = _torchrun(tmp_path / "two", *extra, f"train.distributed={mode}")
    m1, m2 = read_metrics(one)[0], read_metrics(two)[0]
    _assert_same_step(m1, m2, ("policy_loss", "value_loss", "grad_norm", "critic_grad_norm"))
    assert m1["value_loss"] > 0 and m1["critic_grad_norm"] > 0
    _assert_same_weights(_safetensors(two / "ckpt-1" / "model"), _safetensors(one / "ckpt-1" / "model"), 10)
    c1, c2 = _critic(one / "ckpt-1"), _critic(two / "ckpt-1")
    _assert_same_weights(c2, c1, len(c1) - 1)  # a separate backbone's tied lm_head is stored once
    assert float(c1["head.proj.weight"].abs().max()) > 0  # the value head starts at 0: it moved


@pytest.mark.slow
def test_fsdp_kill_and_resume_with_a_critic(tmp_path: Path):
    """3 iterations straight vs 2, then a resumed third (fsdp, shared value head): the same losses and
    weights; the value head's weights and optimizer state come back from the sharded checkpoint. The
    straight run's first step also equals the 1-process run (fsdp with a shared critic)."""
    extra = [*GAE, "model.critic=shared", "train.distributed=fsdp"]
    full = _torchrun(tmp_path / "full", "train.iterations=3", "checkpoint.every=1", "checkpoint.keep=3", *extra)
    part = _torchrun(tmp_path / "part", "train.iterations=2", *extra)
    assert (part / "latest").read_text() == "ckpt-2"
    meta = __import__("torch.distributed.checkpoint", fromlist=["x"]).FileSystemReader(
        str(part / "ckpt-2" / "dcp")).read_metadata().state_dict_metadata
    assert any(k.startswith("optim.state.critic.head.") for k in meta)  # Adam's moments of the value head
    _torchrun(part, "train.iterations=3", "checkpoint.resume=auto", *extra)
    a, b = read_metrics(full), read_metrics(part)
    assert [m["iteration"] for m in b] == [0, 1, 2]
    for key in ("success", "return", "policy_loss", "value_loss", "grad_norm", "critic_grad_norm"):
        assert b[2][key] == pytest.approx(a[2][key], rel=1e-5, abs=1e-7), key
    _assert_same_weights(_safetensors(part / "ckpt-3" / "model"), _safetensors(full / "ckpt-3" / "model"), 10)
    _assert_same_weights(_critic(part / "ckpt-3"), _critic(full / "ckpt-3"), 2)
    one = _one_process(tmp_path / "one", "train.iterations=1", *GAE, "model.critic=shared")
    _assert_same_step(read_metrics(one)[0], a[0], ("policy_loss", "value_loss", "grad_norm", "critic_grad_norm"))
    _assert_same_weights(_safetensors(full / "ckpt-1" / "model"), _safetensors(one / "ckpt-1" / "model"), 10)
    _assert_same_weights(_critic(full / "ckpt-1"), _critic(one / "ckpt-1"), 2)


def test_sharded_clip_equals_one_process_clip(tmp_path: Path):
    """`torch.nn.utils.clip_grad_norm_` over FSDP2's DTensor gradients: the same total norm and the
    same clipped gradients as over the 1-process gradients (this file's __main__ runs on 2 ranks), rank 1
    starting from other weights that fsdp setup's broadcast replaces with rank 0's."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CLIP_OUT": str(tmp_path)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", __file__]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, start_new_session=True)
    assert out.returncode == 0, out.stderr[-3000:]
    ref, got = torch.load(tmp_path / "reference.pt"), torch.load(tmp_path / "sharded.pt")
    assert ref["norm"] > 1.0 and got["norm"] == pytest.approx(ref["norm"], rel=1e-5)
    assert ref["grads"].keys() == got["grads"].keys()
    for k, g in ref["grads"].items():
        torch.testing.assert_close(got["grads"][k], g, rtol=1e-4, atol=1e-7, msg=k)
    clipped = torch.sqrt(sum(g.pow(2).sum() for g in got["grads"].values()))
    assert float(clipped) == pytest.approx(0.5, rel=1e-4)  # clipped to max_norm=0.5


def _clip_worker() -> None:
    """Rank r computes the gradient of its half of a batch on the FSDP-sharded tiny model (loss scaled
    by the world size, as the trainer does), clips to 0.5 and writes the whole clipped gradients."""
    import copy

    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from agentgym.train.tiny import build_tiny

    out = Path(os.environ["CLIP_OUT"])
    path = build_tiny(out / "tiny")  # before joining: transformers writes weights on rank 0 only once joined
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    reference = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (4, 12), generator=gen)

    def loss_of(m, rows):
        logits = m(input_ids=ids[rows], use_cache=False).logits[:, :-1]
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[rows, 1:].reshape(-1),
                                                 reduction="sum") / ids[:, 1:].numel()

    loss_of(reference, slice(None)).backward()
    ref_norm = D.clip_grad_norm([p for p in reference.parameters()], 0.5)
    from torch.distributed.device_mesh import init_device_mesh

    if rank == 1:  # a copy that differs (an unseeded init): sharding must start from rank 0's weights
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
    D.broadcast_weights(model)
    D.shard(model, init_device_mesh("cpu", (world,)))
    params = [p for p in model.parameters()]  # before any forward: the sharded (DTensor) parameters
    (loss_of(model, slice(rank * 2, rank * 2 + 2)) * world).backward()
    norm = D.clip_grad_norm(params, 0.5)
    grads = {n: p.grad.full_tensor() for n, p in zip([n for n, _ in model.named_parameters()], params)}
    if rank == 0:
        torch.save({"norm": ref_norm, "grads": {n: p.grad for n, p in reference.named_parameters()}},
                   out / "reference.pt")
        torch.save({"norm": norm, "grads": grads}, out / "sharded.pt")
    dist.destroy_process_group()


def test_filler_micro_batches_even_out_the_ranks():
    """Under fsdp a rank with fewer micro-batches gets empty ones, so every rank runs the same number of
    forwards; ddp needs none (its ranks only meet on the last backward)."""
    samples = [np.zeros(3 + i % 4) for i in range(11)]  # len() is all micro_batches reads
    index = list(range(11))
    for mode in ("fsdp", "ddp"):
        parts = [D.local_micro_batches(D.DistContext(r, 2, mode, None), samples, index, 2) for r in (0, 1)]
        assert sorted(i for p in parts for m in p for i in m) == index  # each sample once
        assert [len(p) for p in parts] == [3, 3]  # 6 vs 5 samples: 3 micro-batches each, no filler
    parts = [D.local_micro_batches(D.DistContext(r, 2, "fsdp", None), samples, index[:9], 2) for r in (0, 1)]
    assert [len(p) for p in parts] == [3, 3] and parts[1][-1] == []  # 5 vs 4 samples: 3 vs 2 + a filler
    ddp = [D.local_micro_batches(D.DistContext(r, 2, "ddp", None), samples, index[:9], 2) for r in (0, 1)]
    assert [len(p) for p in ddp] == [3, 2]


def test_admissible_mode_under_torchrun_is_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    config = load_config("toy_learning", ["rollout.action_mode=admissible"])
    with pytest.raises(ConfigError, match="action_mode"):
        D.setup("fsdp", None, config, make_policy=None, make_optimizer=None)


def test_one_gpu_index_for_every_rank_is_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="model.device=cuda "):
        D.pin_cuda_device("cuda:0")
    D.pin_cuda_device("cpu")  # nothing to pin


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_one_gpu_under_torchrun_equals_one_process(tmp_path: Path, mode: str):
    """nccl on one GPU: `torchrun --nproc_per_node 1` with ddp or fsdp (the KL reference sharded too, the
    sharded clip, the dcp checkpoint) takes the step the plain process takes on that GPU."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    cuda = ["train.iterations=1", "model.device=cuda", *KL]
    one = _one_process(tmp_path / "one", *cuda)
    two = _torchrun(tmp_path / "two", *cuda, f"train.distributed={mode}", nproc=1)
    m1, m2 = read_metrics(one)[0], read_metrics(two)[0]
    _assert_same_step(m1, m2)
    assert m1["kl"] > 0 and m2["gpu/peak_memory_gib"] > 0
    w1 = _safetensors(one / "ckpt-1" / "model")
    _assert_same_weights(_safetensors(two / "ckpt-1" / "model"), w1, len(w1))
    if mode == "fsdp":
        _assert_same_weights(_dcp_part(two / "ckpt-1" / "dcp", "model"), w1, len(w1) - 1)  # all but a tied lm_head


def test_fsdp_without_torchrun_says_how_to_launch(tmp_path: Path):
    with pytest.raises(ConfigError, match="torchrun"):
        _one_process(tmp_path, "train.iterations=1", "train.distributed=fsdp")


if __name__ == "__main__":
    _clip_worker()
