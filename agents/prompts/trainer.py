"""The training step of a mixture of prompts: MosT, and the MGDA and linearisation baselines.

One step on ``n`` sampled training instances (the ``n`` objectives ``L_i = l_i``):

1. one batched forward of all ``m`` prompts -> losses ``[m, n]`` and pooled features;
2. per-prompt weights ``w [m, n]`` over the instances:

   * ``most`` — transport plan ``Γ [n, m]`` from :class:`morl.most.MosT` on the losses (Eq. 5),
     then the Γ-weighted min-norm weights on each column's support (Eq. 7–8) from the head
     Gramians (:func:`~morl.agents.prompts.soft_prompts.head_gramian`);
   * ``mgda`` — each prompt runs MGDA over all ``n`` instances (min-norm weights, Γ ignored);
   * ``linear`` — each prompt minimises ``Σ_i w_ji l_i`` with ``w_j ~ Dir(1_n)`` redrawn every
     step (the official code's linearisation redraws its weights every round);

3. one backward of ``Σ_j Σ_i w_ji l_ji`` gives every prompt ``j`` its direction
   ``Σ_i w_ji ∇l_i(θ_j)`` (prompt and head) at once; the optimizer descends it.
"""

from __future__ import annotations

import torch

from morl.agents.prompts.soft_prompts import PromptMixture, head_gramian, per_instance_losses
from morl.most import MosT
from morl.solvers.min_norm import min_norm

METHODS = ("most", "mgda", "linear")


class MixtureTrainer:
    """Trains a :class:`PromptMixture` with ``method`` in ``most | mgda | linear``.

    ``most`` must be a :class:`morl.most.MosT` for ``method="most"``. ``inner_steps`` repeats the
    update with the plan Γ held fixed (Algorithm 1's ``K``). Weights are normalised to sum 1 per
    prompt before the backward, so the step size does not depend on Γ's scale or on ``n``.
    """

    def __init__(
        self,
        mixture: PromptMixture,
        method: str,
        optimizer: torch.optim.Optimizer,
        most: MosT | None = None,
        inner_steps: int = 1,
        generator: torch.Generator | None = None,
    ) -> None:
        if method not in METHODS:
            raise ValueError(f"method={method!r} is not valid; allowed: {', '.join(METHODS)}")
        if method == "most" and most is None:
            raise ValueError("method 'most' needs a morl.most.MosT instance")
        if inner_steps < 1:
            raise ValueError(f"inner_steps must be >= 1, got {inner_steps}")
        self.mixture, self.method, self.optimizer = mixture, method, optimizer
        self.most, self.inner_steps = most, inner_steps
        self.generator = generator if generator is not None else torch.Generator().manual_seed(0)

    def weights(
        self,
        losses: torch.Tensor,
        feats: torch.Tensor,
        logits: torch.Tensor,
        labels: torch.Tensor,
        gamma: torch.Tensor | None,
    ) -> torch.Tensor:
        """Per-prompt instance weights ``[m, n]`` (rows sum to 1) for the current step."""
        m, n = losses.shape
        if self.method == "linear":
            w = -torch.rand(m, n, generator=self.generator).log()  # Exp(1) draws normalise to Dir(1)
            return (w / w.sum(-1, keepdim=True)).to(losses)
        gram = head_gramian(feats, logits, labels)
        if self.method == "mgda":
            w = min_norm(gram.double()).to(losses)
        else:
            w = self.most.weights_from_gramians(gram.double(), gamma.double()).to(losses)
        return w / w.sum(-1, keepdim=True).clamp_min(torch.finfo(w.dtype).tiny)

    def step(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """One outer step (``inner_steps`` updates); returns losses ``[m, n]``, weights, and Γ (most)."""
        gamma = None
        for k in range(self.inner_steps):
            logits, feats = self.mixture(input_ids, attention_mask)
            losses = per_instance_losses(logits, labels)
            if not bool(torch.isfinite(losses).all()):
                raise FloatingPointError("non-finite training loss; lower optim.lr (the parameters were not updated)")
            if k == 0:
                first = losses.detach()
                if self.method == "most":
                    gamma = self.most.assign(first)
            w = self.weights(losses.detach(), feats, logits, labels, gamma)
            self.optimizer.zero_grad(set_to_none=True)
            (w * losses).sum().backward()
            self.optimizer.step()
        if self.most is not None and self.method == "most":
            self.most.step_curriculum()
        return {"losses": first, "weights": w, "gamma": gamma}

    def state_dict(self) -> dict:
        """What a resumed run needs besides its config: prompts and heads, the optimizer, MosT's
        last plan and curriculum, and the generator (batch order and linearisation draws)."""
        most = None if self.most is None else self.most.state_dict()
        return {
            "mixture": self.mixture.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "most": most,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (the trainer must be built with the same config)."""
        self.mixture.load_state_dict(state["mixture"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.most is not None and state.get("most") is not None:
            self.most.load_state_dict(state["most"])
        self.generator.set_state(state["generator"].cpu())  # a generator state must be a CPU ByteTensor
