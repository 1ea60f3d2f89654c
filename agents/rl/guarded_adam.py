"""Guarded Adam: an optimizer step that never leaves a NaN/inf behind, decided on the device.

``guarded_step(opt, params, max_norm)`` clips the gradients, then steps unless the step could
leave a non-finite value in the gradients, Adam's moments or the parameters; a refused step is
refused entirely (parameters, moments and step count stay as they were). Nothing is read back
to the host: the decision is a device boolean, which the caller counts.
"""

from __future__ import annotations

import math

import torch


def make_adam(params, lr: float) -> torch.optim.Adam:
    """Adam with the fused kernel where the device/dtype has it (it honours ``found_inf``), else foreach."""
    # The fused kernel skips the whole step (moments and step count included) on found_inf, without a sync.
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, ValueError):  # a device/dtype without the fused kernel
        return torch.optim.Adam(params, lr=lr, foreach=True)


@torch.no_grad()  # the bound below is carried from step to step: with grad it would chain a graph forever
def guarded_step(
    opt: torch.optim.Adam, params: list[torch.Tensor], max_norm: float | None, ok: torch.Tensor | None = None
) -> torch.Tensor:
    """Clip, then step unless the step could leave a NaN/inf behind (or ``ok`` is False).

    Returns ``ok`` on the device; no host sync. A skipped step is skipped entirely: the
    parameters, Adam's moments and its step count stay exactly as they were (a step on zeroed
    gradients would still move the parameters through the momentum and decay the moments).
    The parameters after the step are checked without computing them: finite gradients with a
    finite squared norm keep the moments finite, and a running upper bound on max|θ| plus the
    largest possible Adam step (:func:`adam_step_bound`) must stay finite. That bound costs O(1)
    per step: it is measured at the first step (and the first after the caller resets
    ``opt.param_bound`` to None) and raised by the step bound, rounded up, after every taken
    step. It only refuses steps after about fmax / (2 lr bound) taken steps: never for a sane
    learning rate, after ~20 steps for lr = 1e36.
    """
    finite, _ = guard_and_clip([p.grad for p in params], max_norm, zero_bad=False)
    ok = finite if ok is None else finite & ok
    reach = 2.0 * opt.param_groups[0]["lr"] * adam_step_bound(opt)  # 2: rounding margin
    if not reach < torch.finfo(params[0].dtype).max:
        return ok & False  # known on the host: even the optimizer's own scalars would overflow
    bound = getattr(opt, "param_bound", None)
    if bound is None:
        bound = torch.stack(torch._foreach_norm(params, math.inf)).amax()
    after = torch.nextafter(bound + reach, torch.full_like(bound, math.inf))  # rounded up: still a bound
    ok = ok & torch.isfinite(after)
    if opt.defaults.get("fused"):
        opt.found_inf = (~ok).to(torch.float32)  # the fused kernel skips everything, step count included
        opt.step()
    else:
        ok = step_or_restore(opt, params, ok)
    opt.param_bound = torch.where(ok, after, bound)
    return ok


def adam_step_bound(opt: torch.optim.Adam) -> float:
    """The least upper bound on ``|Δθ| / lr`` of an Adam step, for every coordinate and step count.

    Zero-initialised moments over the taken steps' gradients g_1..g_t and Cauchy-Schwarz give
    |m_t| <= (1-β1) sqrt((1-r^t)/(1-r)) sqrt(v_t/(1-β2)) with r = β1²/β2, so Adam's step
    lr |m_t|/(1-β1^t) / (sqrt(v_t/(1-β2^t)) + ε) is at most
    lr (1-β1)/sqrt((1-β2)(1-r)) · sqrt((1-r^t)(1-β2^t))/(1-β1^t), and the last factor is <= 1
    because r^t + β2^t >= 2 β1^t (AM-GM). Equality is approached for g_i ∝ (β2/β1)^i and large t:
    about 7.27 lr for the default betas. Without β1² < β2 there is no bound (inf).
    """
    b1, b2 = opt.defaults["betas"]
    if not b1 * b1 < b2 < 1:
        return math.inf
    return (1.0 - b1) / math.sqrt((1.0 - b2) * (1.0 - b1 * b1 / b2))


@torch.no_grad()
def step_or_restore(opt: torch.optim.Optimizer, params: list[torch.Tensor], ok: torch.Tensor) -> torch.Tensor:
    """Step, then put parameters and optimizer state back wherever ``ok`` (or the result) is not finite.

    For optimizers without the fused kernel's ``found_inf`` (a device/dtype without it): this
    path copies the parameters and the state, which the fused path avoids. State created by
    this very step (Adam's first step) is restored to zeros, which is how Adam starts.
    """
    saved = [p.detach().clone() for p in params]
    state_before = [{k: v.clone() for k, v in opt.state[p].items() if torch.is_tensor(v)} for p in params]
    for g in (p.grad for p in params):  # no NaN inside the optimizer even when the step is thrown away
        torch.where(ok, g, torch.zeros((), dtype=g.dtype, device=g.device), out=g)
    opt.step()
    state_after = [{k: v for k, v in opt.state[p].items() if torch.is_tensor(v)} for p in params]
    tensors = [*params, *(v for st in state_after for v in st.values())]
    ok = ok & torch.isfinite(torch.stack(torch._foreach_norm(tensors, math.inf)).amax())
    for p, old in zip(params, saved):
        p.copy_(torch.where(ok, p, old))
    for before, after in zip(state_before, state_after):
        for key, new in after.items():
            new.copy_(torch.where(ok, new, before.get(key, torch.zeros_like(new))))
    return ok


def guard_and_clip(
    grads: list[torch.Tensor], max_norm: float | None, zero_bad: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Whether all gradients are finite, and their total norm; clips to ``max_norm``; no host sync.

    ``ok`` also requires the squared norm of the (clipped) gradient to be finite: then every
    g² is finite and so is Adam's second moment (a finite norm alone can hide an overflowing
    g² when the norm is accumulated in higher precision). With ``zero_bad`` non-finite
    gradients are replaced by zeros (for optimizers that cannot skip).
    """
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    post = norm
    if max_norm is not None:
        coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
        post = norm * coef
    ok = torch.isfinite(norm) & torch.isfinite(post * post)
    if zero_bad:
        for g in grads:
            torch.where(ok, g, torch.zeros((), dtype=g.dtype, device=g.device), out=g)
    if max_norm is not None:
        torch._foreach_mul_(grads, torch.where(ok, coef, torch.zeros_like(coef)))
    return ok, norm
