"""MoCo (Fernando et al., ICLR 2023): stochastic multi-objective gradient correction.

Per call k, with stochastic gradients G_k (rows h_{k,m}):

    (6)  Y_{k+1} = Π_{L}( Y_k − β_k (Y_k − G_k) )                 tracked gradients
    (9)  λ_{k+1} = map( λ_k − γ_k s (Y Yᵀ + ρ I) λ_k )             λ step, map ∈ {proj, softmax}
    (10) d       = out_scale · Σ_m λ_m y_m                          direction to descend

with β_k = beta0 / (k + k0)^beta_pow and γ_k = gamma0 / (k + k0)^gamma_pow. ``order="code"``
(Gauss–Seidel, every author implementation) uses Y_{k+1} in (9) and Y_{k+1}, λ_{k+1} in (10);
``order="paper"`` (Jacobi, Algorithm 1 as printed) uses Y_k, λ_k in both. ``lambda_map="exact"``
replaces (9) by the exact min-norm (ρ-regularised) weights of Y, as in the authors' toy.
With ``base=<aggregator name>`` the λ step is skipped and the direction is that aggregator
applied to the tracked Y ("CAGrad + MoCo", App. K.2 of the paper). See docs/aggregators.md for the
per-experiment presets and every difference between the paper and the code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from morl.aggregators._checks import check_choice, check_number
from morl.aggregators._counters import CallCounters
from morl.aggregators.base import Aggregator
from morl.solvers.gramian import gram_scale
from morl.solvers.min_norm import min_norm_solve
from morl.solvers.simplex import project_simplex, softmax_map

LAMBDA_MAPS = ("proj", "softmax", "exact")
ORDERS = ("paper", "code")
GRAD_NORMS = ("none", "l2", "loss", "l2_loss")
SCHEDULES = ("call", "epoch")
LAMBDA_GRAMS = ("raw", "normalized")
PRESETS_NAMES = ("toy", "cityscapes", "nyuv2", "office", "rl")

#: Used for every option left at None and not set by the preset.
DEFAULTS: dict[str, Any] = dict(
    beta0=0.5, beta_pow=0.5, gamma0=0.1, gamma_pow=0.5, rho=0.0, k0=1, lambda_map="proj", order="code",
    grad_norm="none", lam_grad_scale=1.0, schedule="call", beta_clip=False, out_scale=1.0, lambda_gram="raw",
)
#: Per-experiment settings reconstructed from the authors' code (the paper's Table 10 is missing).
PRESETS: dict[str, dict[str, Any]] = {
    # authors' toy script: β_k = 5/(k+1)^0.5 (>1 for k < 24, kept), exact 2-task min-norm on Y
    "toy": dict(beta0=5.0, beta_pow=0.5, lambda_map="exact", rho=0.0),
    # CAGrad/utils.py::tracking: decay index = epoch, softmax λ, ρ = 0, shared grad × M (M=2)
    "cityscapes": dict(beta0=0.05, beta_pow=0.5, gamma0=0.1, gamma_pow=0.5, lambda_map="softmax", schedule="epoch", out_scale=2.0),
    # run_moco.sh: constant β, γ; g/‖g‖·loss before tracking; softmax λ; × M (M=3)
    "nyuv2": dict(beta0=0.99, beta_pow=0.0, gamma0=0.1, gamma_pow=0.0, lambda_map="softmax", grad_norm="l2_loss", out_scale=3.0),
    # official LibMTL Tracking.py: per-iteration counter from 1, sort projection, factor 2
    "office": dict(beta0=0.5, beta_pow=0.5, gamma0=0.1, gamma_pow=0.5, lambda_map="proj", lam_grad_scale=2.0),
    # RL (our choice; the paper's MT10 settings, Table 10, are missing): the λ step on Y Yᵀ divided
    # by its largest diagonal entry, so λ does not depend on the gradients' absolute scale (SAC's
    # actor gradients under raw Meta-World rewards are large and drift over training)
    "rl": dict(beta0=0.5, beta_pow=0.5, gamma0=0.1, gamma_pow=0.5, lambda_map="proj", lambda_gram="normalized"),
}
NORM_EPS = 1e-8  # the reference code's guard in g/(‖g‖ + eps)


class MoCo(CallCounters, Aggregator):
    """Stateful MoCo aggregator (state: tracked gradients ``y`` [K, D], ``lam`` [K], counter ``k``).

    Options (None = take it from ``preset``, else from ``DEFAULTS``):
    ``preset`` None|"toy"|"cityscapes"|"nyuv2"|"office"; ``beta0``, ``beta_pow``, ``gamma0``,
    ``gamma_pow``, ``k0`` (schedule offset; 1 = the code's (k+1)); ``rho`` (ρ ≥ 0 of (8)/(9));
    ``lambda_map`` "proj"|"softmax"|"exact"; ``lambda_gram`` "raw" (eq. (9): the step on Y Yᵀ,
    which grows with the square of the gradients' scale) | "normalized" (Y Yᵀ divided by its
    largest diagonal entry: the λ iterates do not depend on a global gradient scale); ``lam_grad_scale`` (1 = eq. (9) literally, 2 = the
    gradient of ‖Yλ‖² as in Tracking.py); ``order`` "code"|"paper"; ``grad_norm``
    "none"|"l2"|"loss"|"l2_loss" (applied to G before tracking; loss variants need ``losses``);
    ``schedule`` "call" (k = number of calls) | "epoch" (k advances on :meth:`next_epoch`);
    ``beta_clip`` (cap β_k at 1); ``y_radius`` (Π_L of (6): a radius or K radii; None = off, as
    in all code); ``out_scale`` (multiplies the direction; the code uses M); ``base`` /
    ``base_options`` (an aggregator name from the registry applied to Y instead of λ).
    """

    _COUNTED = {"k": "k"}  # extra-state key -> counter (CallCounters)

    #: d is λ·Y (tracked gradients), not ``weights @ grads``: no CR-MOGM around it
    direction_is_weighted = False

    def __init__(
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
            check_choice("MoCo", "preset", preset, PRESETS_NAMES)
        given = dict(beta0=beta0, beta_pow=beta_pow, gamma0=gamma0, gamma_pow=gamma_pow, k0=k0, rho=rho,
                     lambda_map=lambda_map, lam_grad_scale=lam_grad_scale, lambda_gram=lambda_gram, order=order, grad_norm=grad_norm,
                     schedule=schedule, beta_clip=beta_clip, out_scale=out_scale)
        opts = {**DEFAULTS, **PRESETS.get(preset, {}), **{k: v for k, v in given.items() if v is not None}}
        self._validate(opts)
        self.preset = preset
        self.options = opts
        for key, value in opts.items():
            setattr(self, key, value)
        self.y_radius = _validate_radius(y_radius)
        self.base_name = base
        self.base = _build_base(base, base_options)
        self.needs_losses = self.grad_norm in ("loss", "l2_loss") or bool(self.base is not None and self.base.needs_losses)
        self.register_buffer("y", None)
        self.register_buffer("lam", None)
        self.k = 0

    @staticmethod
    def _validate(o: dict[str, Any]) -> None:
        for name in ("beta0", "gamma0", "beta_pow", "gamma_pow", "rho", "lam_grad_scale"):
            check_number("MoCo", name, o[name])
        check_number("MoCo", "beta0", o["beta0"], strict=True)
        check_number("MoCo", "out_scale", o["out_scale"], strict=True)
        check_number("MoCo", "k0", o["k0"], integer=True)
        check_choice("MoCo", "lambda_map", o["lambda_map"], LAMBDA_MAPS)
        check_choice("MoCo", "lambda_gram", o["lambda_gram"], LAMBDA_GRAMS)
        check_choice("MoCo", "order", o["order"], ORDERS)
        check_choice("MoCo", "grad_norm", o["grad_norm"], GRAD_NORMS)
        check_choice("MoCo", "schedule", o["schedule"], SCHEDULES)
        check_choice("MoCo", "beta_clip", o["beta_clip"], (True, False))
        if o["k0"] == 0 and (o["beta_pow"] > 0 or o["gamma_pow"] > 0):
            raise ValueError("MoCo option k0=0 is not valid with a decaying schedule (β_0 = beta0/0^pow); allowed: k0 >= 1")

    # -- schedules ------------------------------------------------------------------------
    def step_sizes(self) -> tuple[float, float]:
        """(β_k, γ_k) for the current counter (plain Python floats: no device traffic)."""
        t = self.k + self.k0
        beta = self.beta0 / t**self.beta_pow if self.beta_pow else self.beta0
        gamma = self.gamma0 / t**self.gamma_pow if self.gamma_pow else self.gamma0
        return (min(beta, 1.0) if self.beta_clip else beta), gamma

    def next_epoch(self) -> None:
        """Advance the decay counter when ``schedule="epoch"`` (Cityscapes code: k = epoch)."""
        if self.schedule != "epoch":
            raise ValueError('MoCo.next_epoch() needs schedule="epoch"; with schedule="call" every call advances k')
        self.k += 1

    # -- the call -------------------------------------------------------------------------
    def _initial_state(self, name: str, like: torch.Tensor) -> torch.Tensor:
        # a skipped first call leaves the state MoCo starts from: Y = 0, uniform λ
        return torch.full_like(like, 1.0 / like.shape[0]) if name == "lam" else super()._initial_state(name, like)

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        g = self._normalise(grads, losses)
        self._ensure_state(g)
        beta, gamma = self.step_sizes()
        y_new = self._project_rows(self.y - beta * (self.y - g))
        if self.order == "code":
            direction, lam_new = self._direct(y_new, self.lam, gamma, losses, new_lambda_first=True)
        else:
            direction, lam_new = self._direct(self.y, self.lam, gamma, losses, new_lambda_first=False)
        self.y, self.lam = y_new, lam_new
        if self.schedule == "call":
            self.k += 1
        return self.out_scale * direction

    def _direct(self, y, lam, gamma, losses, new_lambda_first: bool):
        """Direction from (y, λ) and the next λ; Gauss–Seidel uses the new λ, Jacobi the old."""
        if self.base is not None:
            direction = self.base(y, losses)
            self.weights = self.out_scale * self.base.weights if self.base.weights is not None else None
            return direction, lam
        lam_next = self._lambda_step(y, lam, gamma)
        lam_used = lam_next if new_lambda_first else lam
        self.weights = self.out_scale * lam_used
        return lam_used @ y, lam_next

    def _lambda_step(self, y: torch.Tensor, lam: torch.Tensor, gamma: float) -> torch.Tensor:
        gram = y @ y.T
        if self.lambda_gram == "normalized":
            gram = gram / gram_scale(gram)
        if self.lambda_map == "exact":
            lam, converged = min_norm_solve(gram, rho=self.rho, max_iter=100, tol=1e-8)
            self._count_not_converged(converged)
            return lam
        grad = gram @ lam + self.rho * lam
        v = lam - (gamma * self.lam_grad_scale) * grad
        return project_simplex(v) if self.lambda_map == "proj" else softmax_map(v)

    def _normalise(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        g = grads
        if self.grad_norm in ("l2", "l2_loss"):
            g = g / (g.norm(dim=1, keepdim=True) + NORM_EPS)
        if self.grad_norm in ("loss", "l2_loss"):
            g = g * losses.detach().unsqueeze(1)
        return g

    def _project_rows(self, y: torch.Tensor) -> torch.Tensor:
        if self.y_radius is None:
            return y
        radius = self._radius_on(y)
        norm = y.norm(dim=1, keepdim=True)
        return y * torch.clamp(radius / torch.clamp(norm, min=torch.finfo(y.dtype).tiny), max=1.0)

    def _radius_on(self, like: torch.Tensor) -> torch.Tensor:
        """The radii as a [K or 1, 1] tensor on ``like``'s device, made once per device/dtype
        (building it from the Python floats every call is a host→device copy on CUDA)."""
        key = (like.device, like.dtype)
        if getattr(self, "_radius_cache", (None, None))[0] != key:
            radius = torch.as_tensor(self.y_radius, dtype=like.dtype, device=like.device).reshape(-1, 1)
            self._radius_cache = (key, radius)
        return self._radius_cache[1]

    def _ensure_state(self, g: torch.Tensor) -> None:
        if self.y is None:
            k = g.shape[0]
            if self.y_radius is not None and len(self.y_radius) not in (1, k):
                raise ValueError(f"MoCo option y_radius has {len(self.y_radius)} radii; allowed: 1 or K={k}")
            self.y = torch.zeros_like(g)
            self.lam = torch.full((k,), 1.0 / k, dtype=g.dtype, device=g.device)
        elif self.y.shape != g.shape or self.y.dtype != g.dtype or self.y.device != g.device:
            raise ValueError(
                f"MoCo holds tracked gradients of shape {tuple(self.y.shape)} ({self.y.dtype}, {self.y.device}) "
                f"but got {tuple(g.shape)} ({g.dtype}, {g.device}); call reset() to start over"
            )

    # -- state ----------------------------------------------------------------------------
    def __repr__(self) -> str:
        extra = f", base={self.base!r}" if self.base is not None else ""
        return f"MoCo(preset={self.preset!r}, {', '.join(f'{k}={v!r}' for k, v in self.options.items())}{extra})"


def _validate_radius(y_radius) -> tuple[float, ...] | None:
    if y_radius is None:
        return None
    values = (y_radius,) if isinstance(y_radius, (int, float)) else tuple(y_radius)
    for v in values:
        check_number("MoCo", "y_radius", v, strict=True)
    return tuple(float(v) for v in values)


def _build_base(base: str | None, base_options: dict | None) -> Aggregator | None:
    from morl.aggregators import available, build

    if base is None:
        if base_options:
            raise ValueError("MoCo option base_options needs base=<aggregator name>; allowed bases: " + ", ".join(available()))
        return None
    if not isinstance(base, str) or base not in available():
        raise ValueError(f"MoCo option base={base!r} is not valid; allowed: {', '.join(available())}")
    if base_options is not None and not isinstance(base_options, dict):
        raise ValueError(f"MoCo option base_options must be a dict of options for {base!r}, got {type(base_options).__name__}")
    options = {"check_finite": "off", **(base_options or {})}  # Y is finite whenever G is
    try:
        return build(base, **options)
    except ValueError as err:
        raise ValueError(f"MoCo option base_options: {err}") from None
