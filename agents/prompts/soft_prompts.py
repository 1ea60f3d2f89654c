"""``m`` soft prompts on one frozen encoder, all evaluated in a single batched forward.

For instances with token ids ``[B, L]`` the word embeddings ``E [B, L, d]`` are repeated ``m``
times and prompt ``j`` (``P_j [k, d]``) is inserted right after the ``[CLS]`` position:
``[CLS, P_j, tokens...]``. The ``m·B`` sequences go through the frozen encoder as
``inputs_embeds`` in one call; the mean over valid positions is the pooled feature ``h_ji``
(MiniLM's own pooling), and a per-prompt linear head gives logits ``W_j h_ji + b_j``.

Solution ``j`` of MosT is therefore ``θ_j = (P_j, W_j, b_j)``: the encoder is shared and
frozen, each prompt has its own head (heads are tiny: ``d·C + C`` parameters), so the ``m``
solutions do not interact and MosT's per-model directions apply to them independently.
"""

from __future__ import annotations

import torch
from torch import nn


class PromptMixture(nn.Module):
    """Soft prompts ``[m, k, d]`` and per-prompt heads ``[m, d, C]`` over a frozen encoder.

    ``shared_head=True`` uses one head for all prompts (only the prompts differ between the
    solutions, as in the paper, where T5's output layer is shared and frozen). The encoder is held outside the module tree, so ``state_dict`` holds only the trainable
    prompts and heads. Prompts start from the embeddings of random vocabulary tokens (a
    different draw per prompt, the paper's "different inits per model").
    """

    def __init__(
        self,
        encoder: nn.Module,
        num_prompts: int,
        length: int,
        num_classes: int,
        generator: torch.Generator | None = None,
        shared_head: bool = False,
    ) -> None:
        super().__init__()
        if num_prompts < 1 or length < 1 or num_classes < 2:
            raise ValueError(
                f"need num_prompts >= 1, length >= 1, num_classes >= 2; got {num_prompts}, {length}, {num_classes}"
            )
        self.__dict__["encoder"] = encoder  # frozen, not a registered submodule
        table = encoder.get_input_embeddings().weight
        vocab, d = table.shape
        rows = torch.randint(1000 if vocab > 2000 else 0, vocab, (num_prompts * length,), generator=generator)
        self.prompts = nn.Parameter(table.detach()[rows.to(table.device)].reshape(num_prompts, length, d).clone())
        heads = 1 if shared_head else num_prompts
        w = torch.randn(heads, d, num_classes, generator=generator) / d**0.5
        self.head_weight = nn.Parameter(w.to(table))
        self.head_bias = nn.Parameter(torch.zeros(heads, num_classes, dtype=table.dtype, device=table.device))

    @property
    def num_prompts(self) -> int:
        return self.prompts.shape[0]

    def features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Pooled features ``[m, B, d]`` of every instance under every prompt (one forward)."""
        m, k, d = self.prompts.shape
        b, length = input_ids.shape
        emb = self.encoder.get_input_embeddings()(input_ids)  # [B, L, d]
        emb = emb.unsqueeze(0).expand(m, b, length, d)
        prompts = self.prompts.unsqueeze(1).expand(m, b, k, d)
        x = torch.cat([emb[:, :, :1], prompts, emb[:, :, 1:]], dim=2).reshape(m * b, k + length, d)
        mask = attention_mask.to(x.dtype)
        mask = torch.cat([mask[:, :1], torch.ones(b, k, dtype=x.dtype, device=x.device), mask[:, 1:]], dim=1)
        mask = mask.unsqueeze(0).expand(m, b, k + length).reshape(m * b, k + length)
        hidden = self.encoder(inputs_embeds=x, attention_mask=mask).last_hidden_state
        pooled = (hidden * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
        return pooled.reshape(m, b, d)

    def head(self, feats: torch.Tensor) -> torch.Tensor:
        """Logits ``[m, B, C]`` from features ``[m, B, d]``."""
        m = feats.shape[0]
        w = self.head_weight.expand(m, -1, -1)  # a shared head [1, d, C] serves every prompt
        return torch.einsum("mbd,mdc->mbc", feats, w) + self.head_bias.expand(m, -1).unsqueeze(1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits [m, B, C], features [m, B, d])``."""
        feats = self.features(input_ids, attention_mask)
        return self.head(feats), feats

    @torch.no_grad()
    def prompt_embeddings(self) -> torch.Tensor:
        """Each prompt encoded alone by the frozen encoder, mean-pooled: ``[m, d]`` (dispatcher keys)."""
        return self.encoder(inputs_embeds=self.prompts).last_hidden_state.mean(1)


@torch.no_grad()
def instance_embeddings(
    encoder: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, chunk: int = 256
) -> torch.Tensor:
    """Frozen-encoder mean-pooled embeddings ``[N, d]`` of the instances without any prompt."""
    out = []
    for s in range(0, input_ids.shape[0], chunk):
        ids, mask = input_ids[s : s + chunk], attention_mask[s : s + chunk]
        hidden = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        mk = mask.unsqueeze(-1).to(hidden.dtype)
        out.append((hidden * mk).sum(1) / mk.sum(1))
    return torch.cat(out)


def per_instance_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy ``[m, B]`` of logits ``[m, B, C]`` against labels ``[B]``."""
    m, b, c = logits.shape
    return nn.functional.cross_entropy(logits.reshape(m * b, c), labels.repeat(m), reduction="none").reshape(m, b)


def head_gramian(feats: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Gramians ``[m, n, n]`` of the per-instance gradients w.r.t. each prompt's head, in closed form.

    For cross-entropy on ``z = W h + b`` the gradient of instance ``i`` is ``(h_i ⊗ e_i, e_i)``
    with ``e_i = softmax(z_i) − onehot(y_i)``, so ``⟨g_i, g_l⟩ = (h_i·h_l + 1)(e_i·e_l)``. This is
    the MosT paper's efficiency trick (§6.6 (3)): MGDA weights from a subset of the parameters.
    """
    e = torch.softmax(logits.detach(), -1) - nn.functional.one_hot(labels, logits.shape[-1]).to(logits.dtype)
    h = feats.detach()
    return (h @ h.transpose(1, 2) + 1) * (e @ e.transpose(1, 2))
