"""The two-objective toy of CAGrad (Liu et al. 2021; the authors' code, ``CAGrad/toy.py``) used for
MoCo's Figs. 1–3 (Fernando et al., ICLR 2023, arXiv:2210.12624, App. K.1).

With x = (x1, x2) and LOWER = 5e-6:

    h1 = log(max(|0.5(−x1−7) − tanh(−x2)|, LOWER)) + 6     g1 = ((−x1+7)² + 0.1(−x2−8)²)/10 − 20
    h2 = log(max(|0.5(−x1+3) + tanh(−x2) + 2|, LOWER)) + 6  g2 = ((−x1−7)² + 0.1(−x2−8)²)/10 − 20
    c1 = max(tanh(0.5 x2), 0)    c2 = max(tanh(−0.5 x2), 0)
    f1 = f1_scale · (c1 h1 + c2 g1)    f2 = c1 h2 + c2 g2

``f1_scale`` is 1 in CAGrad and 2 in the MoCo authors' toy script. Gradients follow torch
autograd's conventions, which matter here: clamp passes the gradient where
input ≥ min, so ∇f(0, 0) ≠ 0, and abs′(0) = 0. The Pareto front is the segment
x1 ∈ [−7, 7], x2 = PARETO_X2. Everything is batched over leading dims of ``x`` ([..., 2]).

:func:`simulate` runs MGDA (exact gradients), SMG and MoCo (gradients plus N(0, σ²) noise on
every Jacobian entry) from many starts at once, as one batch of 2-D points; MoCo is the
registry's aggregator, vectorised over the points by :class:`PerPoint`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from morl.solvers.min_norm import min_norm_2, min_norm_solve

LOWER = 5e-6
#: x2 of the Pareto-front segment drawn in the reference plots
PARETO_X2 = -8.3552
#: starts of the paper's Fig. 2 (Fig. 1 uses the first three)
INITS_PAPER = ((-8.5, 7.5), (-8.5, 5.0), (10.0, -8.0), (0.0, 0.0), (9.0, 9.0))
#: starts of the authors' code (and CAGrad): (−8.5, −5) instead of the paper's (−8.5, 5)
INITS_CODE = ((-8.5, 7.5), (-8.5, -5.0), (9.0, 9.0), (0.0, 0.0), (10.0, -8.0))
#: the union: all six starts (the paper's five and the code's (−8.5, −5))
INITS_ALL = ((-8.5, 7.5), (-8.5, 5.0), (-8.5, -5.0), (10.0, -8.0), (0.0, 0.0), (9.0, 9.0))
METHODS = ("mgda", "smg", "moco")


def objectives(x: torch.Tensor, f1_scale: float = 1.0) -> torch.Tensor:
    """F(x) = (f1, f2) of shape ``[..., 2]``."""
    x1, x2 = x[..., 0], x[..., 1]
    h1 = torch.clamp(torch.abs(0.5 * (-x1 - 7) - torch.tanh(-x2)), LOWER).log() + 6
    h2 = torch.clamp(torch.abs(0.5 * (-x1 + 3) + torch.tanh(-x2) + 2), LOWER).log() + 6
    g1 = ((-x1 + 7) ** 2 + 0.1 * (-x2 - 8) ** 2) / 10 - 20
    g2 = ((-x1 - 7) ** 2 + 0.1 * (-x2 - 8) ** 2) / 10 - 20
    c1 = torch.clamp(torch.tanh(0.5 * x2), 0)
    c2 = torch.clamp(torch.tanh(-0.5 * x2), 0)
    return torch.stack([f1_scale * (c1 * h1 + c2 * g1), c1 * h2 + c2 * g2], dim=-1)


def jacobian(x: torch.Tensor, f1_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(F [..., 2], J [..., 2, 2]) with J[..., m, :] = ∇f_m, in closed form.

    The derivative follows torch autograd's conventions exactly (checked against
    :func:`jacobian_autograd` in the tests): clamp(u, min) passes the gradient where u ≥ min,
    abs′(0) = 0. About 3x cheaper than autograd, which matters for 70k-step runs.
    """
    x1, x2 = x[..., 0], x[..., 1]
    t2 = torch.tanh(x2)
    sech2 = 1 - t2 * t2
    th = torch.tanh(0.5 * x2)
    dth = 0.5 * (1 - th * th)
    a1 = -0.5 * x1 - 3.5 + t2
    a2 = -0.5 * x1 + 3.5 - t2
    abs1, abs2 = a1.abs(), a2.abs()
    h1 = torch.clamp(abs1, LOWER).log() + 6
    h2 = torch.clamp(abs2, LOWER).log() + 6
    # d log(clamp(|a|)) / da = sign(a)/|a| where |a| >= LOWER, else 0
    dh1 = torch.where(abs1 >= LOWER, torch.sign(a1) / torch.clamp(abs1, LOWER), torch.zeros_like(a1))
    dh2 = torch.where(abs2 >= LOWER, torch.sign(a2) / torch.clamp(abs2, LOWER), torch.zeros_like(a2))
    q = 0.1 * (x2 + 8) ** 2
    g1 = ((7 - x1) ** 2 + q) / 10 - 20
    g2 = ((x1 + 7) ** 2 + q) / 10 - 20
    c1, c2 = torch.clamp(th, 0), torch.clamp(-th, 0)
    dc1 = torch.where(th >= 0, dth, torch.zeros_like(dth))
    dc2 = torch.where(-th >= 0, -dth, torch.zeros_like(dth))
    dg_x2 = 0.02 * (x2 + 8)
    f1x1 = c1 * dh1 * -0.5 + c2 * (x1 - 7) / 5
    f1x2 = c1 * dh1 * sech2 + h1 * dc1 + c2 * dg_x2 + g1 * dc2
    f2x1 = c1 * dh2 * -0.5 + c2 * (x1 + 7) / 5
    f2x2 = -c1 * dh2 * sech2 + h2 * dc1 + c2 * dg_x2 + g2 * dc2
    f = torch.stack([f1_scale * (c1 * h1 + c2 * g1), c1 * h2 + c2 * g2], dim=-1)
    jac = torch.stack([torch.stack([f1_scale * f1x1, f1_scale * f1x2], -1), torch.stack([f2x1, f2x2], -1)], -2)
    return f, jac


def jacobian_autograd(x: torch.Tensor, f1_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(F, J) by batched autograd: the gradient of Σ_points f_m is every point's ∇f_m."""
    with torch.enable_grad():
        xg = x.detach().requires_grad_(True)
        f = objectives(xg, f1_scale)
        rows = [torch.autograd.grad(f[..., m].sum(), xg, retain_graph=m == 0)[0] for m in range(2)]
    return f.detach(), torch.stack(rows, dim=-2)


def front(n: int = 201, f1_scale: float = 1.0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Objective values ``[n, 2]`` along the Pareto-front segment."""
    x1 = torch.linspace(-7.0, 7.0, n, dtype=dtype)
    return objectives(torch.stack([x1, torch.full_like(x1, PARETO_X2)], -1), f1_scale)


def dominated_margin(values: torch.Tensor, f1_scale: float = 1.0) -> torch.Tensor:
    """How far each point F ([..., 2]) is dominated by the front: max over front points p of
    min_m (F_m − p_m). Positive = strictly dominated by that margin in both objectives."""
    p = front(f1_scale=f1_scale, dtype=values.dtype)
    return (values.unsqueeze(-2) - p).amin(-1).amax(-1)


def mgda_norm(x: torch.Tensor, f1_scale: float = 1.0) -> torch.Tensor:
    """‖d(x)‖ of exact MGDA: 0 iff x is Pareto stationary (the measure of the paper's Thm 2)."""
    _, jac = jacobian(x, f1_scale)
    lam = min_norm_2(jac @ jac.transpose(-1, -2))
    return (lam.unsqueeze(-1) * jac).sum(-2).norm(dim=-1)


@dataclass
class ToyConfig:
    """Fig. 2 defaults (MoCo paper, App. K.1; σ = 1 from the MoCo authors' toy script):
    Adam lr0·(k+1)^-lr_pow, σ = 1, β_k = beta0/(k+1)^beta_pow."""

    iters: int = 70_000
    lr0: float = 0.0025
    lr_pow: float = 0.05
    sigma: float = 1.0
    beta0: float = 5.0
    beta_pow: float = 0.5
    f1_scale: float = 1.0
    seed: int = 0


def simulate(inits: Sequence[Sequence[float]], methods: Sequence[str], cfg: ToyConfig) -> torch.Tensor:
    """Final points ``[len(methods), len(inits), 2]`` of every method from every start.

    MGDA sees the exact Jacobian, SMG and MoCo the Jacobian plus N(0, σ²) noise on every entry,
    drawn afresh each step. MoCo is the registry's aggregator (``build("moco", preset="toy")``
    with ``cfg``'s β schedule) run on every point on its own (:class:`PerPoint`); MGDA and SMG
    are stateless and take the min-norm weights of the same solver their aggregators call,
    batched over the points. The x-update is Adam with the gradient set to the direction, as
    in the reference script.
    """
    from morl.aggregators import build

    for m in methods:
        if m not in METHODS:
            raise ValueError(f"toy method {m!r} is not valid; allowed: {', '.join(METHODS)}")
    n_i = len(inits)
    x = torch.tensor(inits, dtype=torch.float64).repeat(len(methods), 1)  # [n_m * n_i, 2]
    moco = PerPoint(build("moco", preset="toy", beta0=cfg.beta0, beta_pow=cfg.beta_pow, check_finite="off"))
    aggs = [moco if m == "moco" else _min_norm for m in methods]
    gen = torch.Generator().manual_seed(cfg.seed)
    adam = _Adam(x)
    for k in range(cfg.iters):
        _, jac = jacobian(x, cfg.f1_scale)
        noisy = jac + cfg.sigma * torch.randn(jac.shape, generator=gen, dtype=jac.dtype)
        directions = []
        for i, (m, agg) in enumerate(zip(methods, aggs)):
            rows = slice(i * n_i, (i + 1) * n_i)
            directions.append(agg(jac[rows] if m == "mgda" else noisy[rows]))
        x = adam.step(x, torch.cat(directions), cfg.lr0 / (k + 1) ** cfg.lr_pow)
    return x.view(len(methods), n_i, 2)


def _min_norm(jac: torch.Tensor) -> torch.Tensor:
    """MGDA's direction for a batch of [B, 2, 2] Jacobians (as the MGDA aggregator: no guard)."""
    lam, _ = min_norm_solve(jac @ jac.transpose(-1, -2), eps_2=0.0)
    return (lam.unsqueeze(-1) * jac).sum(-2)


class PerPoint:
    """One aggregator run independently on each of B points: ``[B, K, D] -> [B, D]``.

    ``torch.func.vmap`` over the aggregator's own call, with its per-point state (the tensors
    its persistent buffers, e.g. MoCo's tracked Y and λ) carried here as ``[B, ...]``
    tensors; integer counters advance once per call, as for B separate instances. One batched
    call costs about as much as two single ones (1.3 ms each on CPU), which is what makes the
    toy's thousands of steps on ~100 points affordable with the real aggregator.
    """

    def __init__(self, aggregator) -> None:
        self.agg = aggregator
        self.keys: list[str] = []  # the tensor state, known after the first call
        self.state: tuple[torch.Tensor, ...] = ()
        self._vmapped = torch.func.vmap(self._one)

    def _one(self, grads: torch.Tensor, *state: torch.Tensor):
        buffers = self.agg._buffers
        for key, value in zip(self.keys, state):
            buffers[key] = value
        direction = self.agg(grads)
        if not self.keys:
            self.keys = [
                k
                for k, v in buffers.items()
                if v is not None and k not in self.agg._non_persistent_buffers_set and k not in self.agg._COUNTERS
            ]
        return (direction, *(buffers[k] for k in self.keys))

    def __call__(self, grads: torch.Tensor) -> torch.Tensor:
        before = [(m, dict(m._buffers)) for m in self.agg.modules()]
        direction, *state = self._vmapped(grads, *self.state)
        self.state = tuple(state)
        # Tensors the call left in the aggregator's buffers (weights, counters, state) belong to
        # the finished vmap and are unusable outside it: put the previous values back.
        for module, buffers in before:
            module._buffers.clear()
            module._buffers.update(buffers)
        return direction


class _Adam:
    """torch.optim.Adam's update (betas 0.9/0.999, eps 1e-8), written out: the toy calls it
    70k times on a [B, 2] tensor, where the optimizer machinery dominates the cost."""

    def __init__(self, x: torch.Tensor) -> None:
        self.m = torch.zeros_like(x)
        self.v = torch.zeros_like(x)
        self.t = 0

    def step(self, x: torch.Tensor, grad: torch.Tensor, lr: float) -> torch.Tensor:
        self.t += 1
        self.m = 0.9 * self.m + 0.1 * grad
        self.v = 0.999 * self.v + 0.001 * grad * grad
        denom = self.v.sqrt() / (1 - 0.999**self.t) ** 0.5 + 1e-8
        return x - (lr / (1 - 0.9**self.t)) * self.m / denom
