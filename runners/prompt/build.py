"""What a prompt config builds: the text data, the frozen encoder (both checked here, one UserError
line each), the tokenised splits, and the mixture of prompts with its trainer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from morl.runners.errors import UserError

if TYPE_CHECKING:
    from morl.runners.prompt.config import PromptConfig


def load_data(cfg: PromptConfig):
    from morl.envs.data.text import load_text_data

    try:
        data = load_text_data(cfg.data.name, **({"seed": cfg.seed} | cfg.data.options))
    except (ValueError, TypeError) as exc:
        raise UserError(f"data: {exc}") from None
    if cfg.batch_size > len(data.texts["train"]):
        raise UserError(f"batch_size={cfg.batch_size} exceeds the {len(data.texts['train'])} training instances")
    return data


def load_encoder(cfg: PromptConfig):
    """``(encoder, tokenizer)``, cut to ``encoder_layers`` transformer layers when given."""
    from morl.agents.prompts.encoder import load_encoder as load

    try:
        encoder, tokenizer = load(cfg.encoder, seed=cfg.seed)
    except ValueError as exc:
        raise UserError(f"encoder: {exc}") from None
    if cfg.encoder_layers is not None:
        layers = getattr(getattr(encoder, "encoder", None), "layer", None)
        if layers is None or not 1 <= cfg.encoder_layers <= len(layers):
            raise UserError(
                f"encoder_layers must be in 1..{len(layers) if layers is not None else '?'} for this encoder "
                f"(BERT-style encoders only), got {cfg.encoder_layers}"
            )
        del layers[cfg.encoder_layers :]
    return encoder, tokenizer


def tokenized_splits(cfg: PromptConfig, data, tokenizer, device):
    """``({split: (input_ids, attention_mask)}, {split: labels})`` on ``device``, tokenised once."""
    import torch

    from morl.agents.prompts.encoder import tokenize

    ids = {s: tuple(t.to(device) for t in tokenize(tokenizer, data.texts[s], cfg.max_length)) for s in data.texts}
    labels = {s: torch.tensor(data.labels[s], device=device) for s in data.labels}
    return ids, labels


def build_trainer(cfg: PromptConfig, num_classes: int, encoder, device):
    """``(mixture, trainer)``; the trainer's generator draws the batches and the linearisation weights."""
    import torch

    from morl.agents.prompts.soft_prompts import PromptMixture
    from morl.agents.prompts.trainer import MixtureTrainer
    from morl.most import CurriculumSchedule, MosT

    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    encoder.to(device)
    mixture = PromptMixture(encoder, cfg.prompts.num, cfg.prompts.length, num_classes, gen, cfg.prompts.shared_head)
    opt = torch.optim.Adam(mixture.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
    most = None
    if cfg.method == "most":
        curriculum = (
            None
            if cfg.most.curriculum == "none"
            else CurriculumSchedule(cfg.most.curriculum, decay=cfg.most.curriculum_decay)
        )
        try:
            # Each step sees different instances, so the previous plan is no warm start.
            most = MosT(
                cfg.prompts.num,
                tau=cfg.most.tau,
                solver=cfg.most.solver,
                gamma_scale=cfg.most.gamma_scale,
                update=cfg.most.update,
                curriculum=curriculum,
                warm_start=False,
            )
        except ValueError as exc:
            raise UserError(f"most: {exc}") from None
    return mixture, MixtureTrainer(mixture, cfg.method, opt, most, cfg.inner_steps, gen)
