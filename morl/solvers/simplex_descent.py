"""Accelerated projected gradient on the simplex with a masked line search (no host sync).

One routine serves every convex K-dimensional problem of the aggregators (MGDA's min-norm,
its ρ-regularised form, CAGrad's dual). It is FISTA (Beck & Teboulle 2009) with

* backtracking done by masks: a rejected trial step halves the step and leaves the iterate
  where it was, an accepted one grows the step by ``GROW`` (so no Lipschitz constant is needed);
* function-value restart (O'Donoghue & Candès 2015): momentum is dropped when the objective goes up;
* a tolerance on the Frank–Wolfe gap xᵀ∇f(x) − min_i ∇f(x)_i, after which a batch entry
  freezes; an entry also freezes when two consecutive windows of ``CHECK_EVERY`` iterations
  lowered the objective by less than ``STALL`` (relative), i.e. it is at rounding level. On
  flat, ill-conditioned problems the objective reaches machine precision long before the gap
  reaches a tight ``tol``.

Everything is batched over leading dims. On CUDA the loop always runs ``max_iter`` times (an
early exit would need a device→host read); on CPU, where reading a flag costs nothing, it
stops once every entry has converged.
"""

from __future__ import annotations

from typing import Callable

import torch

from morl.host_reads import reads_are_free
from morl.solvers.simplex import project_simplex

GROW = 1.2
CHECK_EVERY = 5
STALL = 1e-14

#: fun(x) -> (value [...], gradient [..., K])
Objective = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def fw_gap(x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """Frank–Wolfe duality gap xᵀg − min_i g_i (≥ 0 on the simplex; 0 iff x is optimal)."""
    return (x * grad).sum(-1) - grad.amin(-1)


def minimize_on_simplex(
    fun: Objective,
    x0: torch.Tensor,
    step0: torch.Tensor,
    max_iter: int = 500,
    tol: float = 1e-12,
    return_converged: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Minimise the convex ``fun`` over the simplex starting from ``x0`` ([..., K]).

    ``step0`` ([...] or scalar) is the first trial step; ``tol`` is the Frank–Wolfe gap, in the
    units of ``fun``, at which an entry stops moving. Returns the final iterate, and with
    ``return_converged`` also a [...] bool: the entry reached ``tol`` or stalled at rounding
    level (False: ``max_iter`` ran out first).
    """
    x = project_simplex(x0)
    fx, gx = fun(x)
    y, fy, gy = x, fx, gx
    t = torch.ones_like(fx)
    eta = torch.as_tensor(step0, dtype=x.dtype, device=x.device).expand_as(fx).clone()
    done = fw_gap(x, gx) <= tol
    f_window = fx
    stalled_once = torch.zeros_like(done)
    for it in range(max_iter):
        z = project_simplex(y - eta.unsqueeze(-1) * gy)
        fz, gz = fun(z)
        diff = z - y
        model = fy + (gy * diff).sum(-1) + (diff * diff).sum(-1) / (2 * eta)
        ok = (fz <= model + 1e-13 * fy.abs()) & ~done
        better = ok & (fz <= fx)
        restart = ok & ~better
        # accepted and descending: take the FISTA step
        t_new = 0.5 * (1 + torch.sqrt(1 + 4 * t * t))
        y_acc = z + ((t - 1) / t_new).unsqueeze(-1) * (z - x)
        fy_acc, gy_acc = fun(y_acc)
        b = better.unsqueeze(-1)
        x = torch.where(b, z, x)
        fx = torch.where(better, fz, fx)
        gx = torch.where(b, gz, gx)
        # restart (objective went up): momentum off, next step from x
        r = restart.unsqueeze(-1)
        y = torch.where(b, y_acc, torch.where(r, x, y))
        fy = torch.where(better, fy_acc, torch.where(restart, fx, fy))
        gy = torch.where(b, gy_acc, torch.where(r, gx, gy))
        t = torch.where(better, t_new, torch.where(restart, torch.ones_like(t), t))
        eta = torch.where(ok, eta * GROW, torch.where(done, eta, eta * 0.5))
        done = done | (fw_gap(x, gx) <= tol)
        if (it + 1) % CHECK_EVERY == 0:
            stalled = f_window - fx <= STALL * (f_window.abs() + 1e-300)
            done = done | (stalled & stalled_once)
            stalled_once, f_window = stalled, fx
            if reads_are_free(x) and bool(done.all()):
                break
    return (x, done) if return_converged else x
