"""MoCo (Fernando et al., ICLR 2023, arXiv 2210.12624, Algorithm 1): stochastic multi-objective gradient correction.

    (6)  Y_{k+1} = Π_L(Y_k − β_k (Y_k − G_k))          tracked gradients
    (9)  λ_{k+1} = map(λ_k − γ_k s (Y Yᵀ + ρI) λ_k)    map ∈ {proj, softmax}
    (10) d       = out_scale · λᵀ Y

β_k = beta0 / (k + k0)^beta_pow, γ_k likewise. ``order="code"`` (the authors' code) uses Y_{k+1},
λ_{k+1} in (9)-(10), ``"paper"`` uses Y_k, λ_k. Presets and the paper/code differences: docs/aggregators/weights.md.
"""

from collections.abc import Sequence

import torch

from morl.aggregators._checks import build_base, check_choice, check_number
from morl.aggregators._counters import CallCounters
from morl.aggregators._preference import on_device
from morl.aggregators.base import Aggregator
from morl.solvers.gramian import gram_scale
from morl.solvers.min_norm import min_norm_solve
from morl.solvers.simplex import project_simplex, softmax_map

CHOICES = dict(
    lambda_map=("proj", "softmax", "exact"),
    order=("paper", "code"),
    grad_norm=("none", "l2", "loss", "l2_loss"),
    schedule=("call", "epoch"),
    beta_clip=(True, False),
    lambda_gram=("raw", "normalized"),
)
#: Used for every option left at None and not set by the preset.
DEFAULTS = dict(
    beta0=0.5,
    beta_pow=0.5,
    gamma0=0.1,
    gamma_pow=0.5,
    rho=0.0,
    k0=1,
    lambda_map="proj",
    order="code",
    grad_norm="none",
    lam_grad_scale=1.0,
    schedule="call",
    beta_clip=False,
    out_scale=1.0,
    lambda_gram="raw",
)
#: Per-experiment settings from the authors' code (the paper's Table 10 is missing).
PRESETS = {
    "toy": dict(beta0=5.0, beta_pow=0.5, lambda_map="exact", rho=0.0),  # toy script: exact min-norm on Y
    # CAGrad/utils.py::tracking: decay index = epoch, softmax λ, direction × M (M=2)
    "cityscapes": dict(
        beta0=0.05, beta_pow=0.5, gamma0=0.1, gamma_pow=0.5, lambda_map="softmax", schedule="epoch", out_scale=2.0
    ),
    # run_moco.sh: constant β, γ; g/‖g‖·loss before tracking; softmax λ; × M (M=3)
    "nyuv2": dict(
        beta0=0.99, beta_pow=0.0, gamma0=0.1, gamma_pow=0.0, lambda_map="softmax", grad_norm="l2_loss", out_scale=3.0
    ),
    # LibMTL Tracking.py: counter from 1, sort projection, the gradient of ‖Yλ‖² (factor 2)
    "office": dict(beta0=0.5, beta_pow=0.5, gamma0=0.1, gamma_pow=0.5, lambda_map="proj", lam_grad_scale=2.0),
    # RL (our choice): the λ step on Y Yᵀ / max diag, so λ ignores the gradients' drifting scale
    "rl": dict(beta0=0.5, beta_pow=0.5, gamma0=0.1, gamma_pow=0.5, lambda_map="proj", lambda_gram="normalized"),
}


class MoCo(CallCounters, Aggregator):
    """State: ``y`` [K, D], ``lam`` [K], counter ``k``. Options (None: from ``preset``, else ``DEFAULTS``):
    ``preset`` (None): a key of ``PRESETS``. ``beta0``, ``beta_pow``, ``gamma0``, ``gamma_pow``, ``k0``: the schedules.
    ``rho`` (0): ρ of (9). ``lambda_map`` ("proj"): "proj" | "softmax" | "exact" (min-norm weights of Y).
    ``lam_grad_scale`` (1): s of (9). ``lambda_gram`` ("raw"): "normalized" runs (9) on Y Yᵀ / max diag.
    ``order`` ("code") | "paper". ``grad_norm`` ("none") | "l2" | "loss" | "l2_loss": applied to G first.
    ``schedule`` ("call") | "epoch" (k advances on :meth:`next_epoch`). ``beta_clip`` (False): β_k ≤ 1.
    ``out_scale`` (1): multiplies d. ``y_radius`` (None): Π_L of (6), 1 or K radii.
    ``base`` / ``base_options`` (None): an aggregator applied to Y in place of the λ step.
    """

    _COUNTED = {"k": "k"}
    _STATE = ("y", "lam")
    _UNIFORM = ("lam",)  # what a skipped first call leaves
    direction_is_weighted = False  # d is λ·Y, not weights @ grads

    def __init__(  # None: from the preset, else DEFAULTS
        self,
        preset: str | None = None,
        beta0: float | None = None,
        beta_pow: float | None = None,
        gamma0: float | None = None,
        gamma_pow: float | None = None,
        k0: int | None = None,
        rho: float | None = None,
        lambda_map: str | None = None,
        lam_grad_scale: float | None = None,
        lambda_gram: str | None = None,
        order: str | None = None,
        grad_norm: str | None = None,
        schedule: str | None = None,
        beta_clip: bool | None = None,
        out_scale: float | None = None,
        y_radius: float | Sequence[float] | None = None,
        base: str | None = None,
        base_options: dict | None = None,
        check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        if preset is not None:
            check_choice("MoCo", "preset", preset, tuple(PRESETS))
        given = {k: v for k, v in locals().items() if k in DEFAULTS and v is not None}  # the options set explicitly
        self.options = opts = {**DEFAULTS, **PRESETS.get(preset, {}), **given}
        for name in ("beta0", "out_scale", "gamma0", "beta_pow", "gamma_pow", "rho", "lam_grad_scale", "k0"):
            check_number("MoCo", name, opts[name], strict=name in ("beta0", "out_scale"), integer=name == "k0")
        for name, allowed in CHOICES.items():
            check_choice("MoCo", name, opts[name], allowed)
        if opts["k0"] == 0 and (opts["beta_pow"] > 0 or opts["gamma_pow"] > 0):
            raise ValueError(
                "MoCo option k0=0 is not valid with a decaying schedule (β_0 = beta0/0^pow); allowed: k0 >= 1"
            )
        self.preset = preset
        for key, value in self.options.items():
            setattr(self, key, value)
        self.y_radius = None if y_radius is None else check_number("MoCo", "y_radius", y_radius, strict=True, many=True)
        if base is None and base_options:
            raise ValueError("MoCo option base_options needs base=<aggregator name>")
        self.base_name = base
        self.base = None if base is None else build_base("MoCo", base, base_options)
        self.needs_losses = self.grad_norm in ("loss", "l2_loss") or bool(
            self.base is not None and self.base.needs_losses
        )
        self.k, self._radii_on = 0, {}

    def step_sizes(self) -> tuple[float, float]:
        """(β_k, γ_k) for the current counter, as Python floats (no device traffic)."""
        t = self.k + self.k0
        beta, gamma = self.beta0 / t**self.beta_pow, self.gamma0 / t**self.gamma_pow
        return (min(beta, 1.0) if self.beta_clip else beta), gamma

    def next_epoch(self) -> None:
        """Advance k when ``schedule="epoch"`` (the Cityscapes code decays per epoch)."""
        if self.schedule != "epoch":
            raise ValueError('MoCo.next_epoch() needs schedule="epoch"; with schedule="call" every call advances k')
        self.k += 1

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        g = grads
        if self.grad_norm in ("l2", "l2_loss"):
            g = g / (g.norm(dim=1, keepdim=True) + 1e-8)  # the reference code's guard
        if self.grad_norm in ("loss", "l2_loss"):
            g = g * losses.detach().unsqueeze(1)
        self._ensure_state(g)
        beta, gamma = self.step_sizes()
        y_new = torch.lerp(self.y, g, beta)  # Y − β(Y − G) in one pass over [K, D]
        if self.y_radius is not None:
            y_new = y_new * torch.clamp(
                self._radius_on(y_new) / y_new.norm(dim=1, keepdim=True).clamp_min(torch.finfo(g.dtype).tiny), max=1.0
            )
        y = y_new if self.order == "code" else self.y
        if self.base is not None:
            direction, lam_new = self.base(y, losses), self.lam
            self.weights = None if self.base.weights is None else self.out_scale * self.base.weights
        else:
            lam_new = self._lambda_step(y, gamma)
            lam_used = lam_new if self.order == "code" else self.lam  # Gauss–Seidel or Jacobi
            direction, self.weights = lam_used @ y, self.out_scale * lam_used
        self.y, self.lam = y_new, lam_new
        if self.schedule == "call":
            self.k += 1
        return self.out_scale * direction

    def _lambda_step(self, y: torch.Tensor, gamma: float) -> torch.Tensor:
        gram = y @ y.T
        if self.lambda_gram == "normalized":
            gram = gram / gram_scale(gram)
        if self.lambda_map == "exact":
            lam, converged = min_norm_solve(gram, rho=self.rho)
            self._count_not_converged(converged)
            return lam
        v = self.lam - (gamma * self.lam_grad_scale) * (gram @ self.lam + self.rho * self.lam)
        return project_simplex(v) if self.lambda_map == "proj" else softmax_map(v)

    def _radius_on(self, like: torch.Tensor) -> torch.Tensor:
        """The radii as a [K or 1, 1] tensor, made once per device and dtype (no copy per call)."""
        return on_device(self._radii_on, [[r] for r in self.y_radius], like)

    def _ensure_state(self, g: torch.Tensor) -> None:
        k = g.shape[0]
        if self.y is None:
            if self.y_radius is not None and len(self.y_radius) not in (1, k):
                raise ValueError(f"MoCo option y_radius has {len(self.y_radius)} radii; allowed: 1 or K={k}")
            self.y, self.lam = torch.zeros_like(g), self._initial_state("lam", g[:, 0])
        elif (self.y.shape, self.y.dtype, self.y.device) != (g.shape, g.dtype, g.device):
            raise ValueError(
                f"MoCo holds tracked gradients of shape {tuple(self.y.shape)} ({self.y.dtype}, {self.y.device}) "
                f"but got {tuple(g.shape)} ({g.dtype}, {g.device}); call reset() to start over"
            )

    def __repr__(self) -> str:
        extra = f", base={self.base!r}" if self.base is not None else ""
        return f"MoCo(preset={self.preset!r}, {', '.join(f'{k}={v!r}' for k, v in self.options.items())}{extra})"
