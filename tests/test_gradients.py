"""Per-objective gradients (batched and looped), morl.backward, and writing into .grad.

References: K separate forward/backward passes with plain autograd, and closed-form Jacobians
(L_k = c_k·a + d_k‖a‖² + e_k·b: ∂L_k/∂a = c_k + 2 d_k a, ∂L_k/∂b = e_k). Also pinned: every
accepted form of ``params``, when the autograd graph is freed, how many backward passes each
path makes, and the non-finite rule of morl.backward.
"""

import pytest
import torch
from torch.func import functional_call
from torch.utils.flop_counter import FlopCounterMode

import morl
import morl.gradients
from morl.aggregators import GramianAggregator, aggregator_class, available, build
from morl.gradients import (
    TaskFeatures,
    backward,
    batched_task_grads,
    flatten,
    per_task_grads,
    task_features,
    unflatten,
    write_grads,
)
from morl.gramian_tape import GramianTape

K, B, N_IN, N_OUT = 4, 6, 5, 3


def mlp(gen_seed: int = 0, dtype=torch.float64) -> torch.nn.Module:
    torch.manual_seed(gen_seed)
    return torch.nn.Sequential(
        torch.nn.Linear(N_IN, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, N_OUT)
    ).to(dtype)


def task_data(gen, dtype=torch.float64):
    x = torch.randn(K, B, N_IN, generator=gen, dtype=dtype)
    y = torch.randn(K, B, N_OUT, generator=gen, dtype=dtype)
    scale = torch.rand(K, N_OUT, generator=gen, dtype=dtype) + 0.5  # a per-task "critic"
    return x, y, scale


def slice_loss(out, y, scale):
    return ((out - y) ** 2 * scale).mean()


def reference_rows(model, x, y, scale) -> torch.Tensor:
    """K separate forward + backward passes, one per task slice: the plain-autograd reference."""
    rows = []
    for k in range(K):
        model.zero_grad()
        slice_loss(model(x[k]), y[k], scale[k]).backward()
        rows.append(flatten(p.grad for p in model.parameters()))
    model.zero_grad()
    return torch.stack(rows)


def stacked_losses(model, x, y, scale) -> torch.Tensor:
    out = model(x.reshape(K * B, N_IN)).reshape(K, B, N_OUT)
    return ((out - y) ** 2 * scale[:, None, :]).mean(dim=(1, 2))


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize("batched", [True, False])
def test_per_task_grads_match_k_backward_passes(gen, dtype, tol, batched):
    model, (x, y, scale) = mlp(dtype=dtype), task_data(gen, dtype)
    ref = reference_rows(model, x, y, scale)
    rows = per_task_grads(stacked_losses(model, x, y, scale), model.parameters(), batched=batched)
    assert rows.shape == (K, sum(p.numel() for p in model.parameters()))
    assert torch.allclose(rows, ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_batched_task_grads_match_k_backward_passes(gen, dtype, tol):
    model, (x, y, scale) = mlp(dtype=dtype), task_data(gen, dtype)
    ref = reference_rows(model, x, y, scale)
    params = dict(model.named_parameters())

    def loss_fn(p, xk, yk):
        return slice_loss(functional_call(model, {n: p[n] for n in params}, (xk,)), yk, p["critic_scale"])

    losses, rows = batched_task_grads(loss_fn, params, x, y, per_task_params={"critic_scale": scale})
    assert torch.allclose(rows, ref, atol=tol, rtol=tol)
    assert torch.allclose(losses, stacked_losses(model, x, y, scale).detach(), atol=tol, rtol=tol)
    assert not losses.requires_grad and not rows.requires_grad
    assert all(p.grad is None for p in model.parameters())  # nothing written as a side effect
    chunked = batched_task_grads(loss_fn, params, x, y, per_task_params={"critic_scale": scale}, chunk_size=3)[1]
    assert torch.allclose(chunked, rows, atol=tol, rtol=tol)


def test_batched_task_grads_return_aux_stacked_over_tasks(gen):
    model, (x, y, scale) = mlp(dtype=torch.float64), task_data(gen, torch.float64)
    params = dict(model.named_parameters())

    def loss_fn(p, xk, yk):
        out = functional_call(model, {n: p[n] for n in params}, (xk,))
        return slice_loss(out, yk, p["critic_scale"]), {"out": out, "first": out[0]}

    losses, rows, aux = batched_task_grads(loss_fn, params, x, y, per_task_params={"critic_scale": scale}, has_aux=True)
    assert torch.allclose(rows, reference_rows(model, x, y, scale), atol=1e-12, rtol=1e-12)
    assert torch.allclose(aux["out"], model(x).detach(), atol=1e-12)  # [K, B/K, out], task by task
    assert aux["first"].shape == (x.shape[0], *model(x).shape[2:])
    with pytest.raises(ValueError, match=r"return \(loss, aux\)"):
        batched_task_grads(
            lambda p, a: (p["w"] * a).sum(), {"w": torch.ones(3, requires_grad=True)}, torch.ones(2, 3), has_aux=True
        )


def test_unused_parameters_get_zero_rows(gen):
    a = torch.randn(3, generator=gen, requires_grad=True)
    unused = torch.randn(2, 2, generator=gen, requires_grad=True)
    losses = torch.stack([a[0] ** 2, a.sum(), 3 * a[2]])
    rows = per_task_grads(losses, [a, unused])
    expected = torch.zeros(3, 7)
    expected[0, 0] = 2 * a[0].detach()
    expected[1, :3] = 1.0
    expected[2, 2] = 3.0
    assert torch.allclose(rows, expected)


def test_fallback_to_k_passes_when_batched_backward_fails(gen, monkeypatch):
    """An op without a batching rule: the K-pass loop gives the same rows and honours
    retain_graph too."""
    model, (x, y, scale) = mlp(), task_data(gen)
    ref = reference_rows(model, x, y, scale)
    real_grad = torch.autograd.grad

    def no_batching(*args, **kwargs):
        if kwargs.get("is_grads_batched"):
            raise RuntimeError("Batching rule not implemented for aten::something")
        return real_grad(*args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", no_batching)
    losses = stacked_losses(model, x, y, scale)
    assert torch.allclose(per_task_grads(losses, model.parameters(), retain_graph=True), ref, atol=1e-12)
    losses.sum().backward()  # the graph is still there
    assert torch.allclose(flatten(p.grad for p in model.parameters()), ref.sum(0), atol=1e-12)


def test_backward_plus_sgd_equals_manual_step(gen):
    model, (x, y, scale) = mlp(), task_data(gen)
    manual = mlp()
    ref = reference_rows(manual, x, y, scale)
    expected = [p.detach() - 0.1 * g for p, g in zip(manual.parameters(), unflatten(ref.mean(0), manual.parameters()))]

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.zero_grad()
    direction = morl.backward(stacked_losses(model, x, y, scale), model.parameters(), build("mean"))
    opt.step()
    assert torch.allclose(direction, ref.mean(0), atol=1e-12)
    for p, e in zip(model.parameters(), expected):
        assert torch.allclose(p.detach(), e, atol=1e-12)


def test_backward_accumulates_and_takes_plain_callables(gen):
    w = torch.randn(5, generator=gen, requires_grad=True)
    w.grad = torch.ones(5)
    losses = torch.stack([(w**2).sum(), w.sum()])
    direction = morl.backward(losses, [w], lambda g: g.sum(0))
    assert torch.allclose(direction, 2 * w.detach() + 1)
    assert torch.allclose(w.grad, 2 * w.detach() + 2)


@pytest.mark.parametrize("name", available() + ["moco+cagrad"])
def test_backward_works_with_every_aggregator(gen, name, monkeypatch):
    """The direction written is the aggregator's on the K-pass rows; an aggregator with
    ``needs_grads`` False (the loss weightings) gets there with ONE backward and never the
    per-task Jacobian, every other one with one call of per_task_grads."""
    model, (x, y, scale) = mlp(), task_data(gen)
    agg, ref_agg = (
        (build("moco", base="cagrad"), build("moco", base="cagrad"))
        if name == "moco+cagrad"
        else (build(name), build(name))
    )
    losses = stacked_losses(model, x, y, scale)
    rows = reference_rows(model, x, y, scale)
    calls, real = [], morl.gradients.per_task_grads
    monkeypatch.setattr(morl.gradients, "per_task_grads", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    direction = morl.backward(losses, model.parameters(), agg)
    assert len(calls) == int(agg.needs_grads)
    expected = ref_agg(rows, losses.detach())
    # Iterative solvers (CAGrad, MGDA) amplify last-bit differences between the two gradient
    # computations, hence a tolerance well above float64 rounding but far below the entries.
    assert torch.isfinite(direction).all() and float(expected.abs().max()) > 1e-3
    assert torch.allclose(direction, expected, atol=1e-7, rtol=1e-6)
    assert torch.allclose(flatten(p.grad for p in model.parameters()), direction, atol=1e-15, rtol=0)


def test_flatten_unflatten_write_grads_round_trip(gen):
    params = [torch.randn(2, 3, generator=gen, requires_grad=True), torch.randn(4, generator=gen, requires_grad=True)]
    flat = torch.arange(10.0)
    parts = unflatten(flat, params)
    assert [p.shape for p in parts] == [torch.Size([2, 3]), torch.Size([4])]
    assert torch.equal(flatten(parts), flat)
    write_grads(params, flat)
    write_grads(params, flat)
    assert torch.equal(flatten(p.grad for p in params), 2 * flat)
    write_grads(params, flat, accumulate=False)
    assert torch.equal(flatten(p.grad for p in params), flat)
    with pytest.raises(ValueError, match="10 entries"):
        unflatten(torch.zeros(9), params)


def test_bad_inputs_raise_clear_errors(gen):
    w = torch.randn(3, generator=gen, requires_grad=True)
    with pytest.raises(ValueError, match="does not require grad"):
        per_task_grads(torch.ones(2), [w])
    with pytest.raises(ValueError, match="1-D"):
        per_task_grads((w * w).reshape(3, 1), [w])
    with pytest.raises(ValueError, match="empty"):
        per_task_grads(w * 2, [])
    with pytest.raises(ValueError, match="do not require grad"):
        per_task_grads(w * 2, [w, torch.ones(2)])
    params = {"w": w}
    with pytest.raises(ValueError, match="same leading task dimension"):
        batched_task_grads(lambda p, a, b: (p["w"] * a).sum() + b.sum(), params, torch.ones(2, 3), torch.ones(3, 3))
    with pytest.raises(ValueError, match="both params and per_task_params"):
        batched_task_grads(
            lambda p, a: (p["w"] * a).sum(), params, torch.ones(2, 3), per_task_params={"w": torch.ones(2, 3)}
        )
    with pytest.raises(ValueError, match="scalar per task"):
        batched_task_grads(lambda p, a: p["w"] * a, params, torch.ones(2, 3))


# -- closed-form Jacobians and the contracts the numbers alone do not show ----------------------------
def quadratic(k: int = 3, seed: int = 0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(2, generator=gen, dtype=dtype, requires_grad=True)
    b = torch.randn(3, generator=gen, dtype=dtype, requires_grad=True)
    c, d, e = (torch.randn(k, n, generator=gen, dtype=dtype) for n in (2, 1, 3))
    losses = c @ a + d[:, 0] * (a @ a) + e @ b
    jac = torch.cat([c + 2 * d * a.detach(), e], dim=1)  # the hand formula above
    return a, b, losses, jac


class Pair(torch.nn.Module):
    def __init__(self, a, b):
        super().__init__()
        self.a, self.b = torch.nn.Parameter(a.detach().clone()), torch.nn.Parameter(b.detach().clone())


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_rows_equal_the_closed_form_jacobian(k, batched):
    a, b, losses, jac = quadratic(k)
    rows = per_task_grads(losses, [a, b], batched=batched)
    torch.testing.assert_close(rows, jac, rtol=0, atol=1e-12)


def test_every_params_form_gives_the_same_rows():
    a, b, _, _ = quadratic()
    module = Pair(a, b)
    gen = torch.Generator().manual_seed(1)
    c, e = torch.randn(3, 2, generator=gen, dtype=torch.float64), torch.randn(3, 3, generator=gen, dtype=torch.float64)

    def losses():
        return c @ module.a + e @ module.b

    expected = torch.cat([c, e], dim=1)
    for params in (module, dict(module.named_parameters()), [module.a, module.b]):
        torch.testing.assert_close(per_task_grads(losses(), params), expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(per_task_grads(losses(), module.a), c, rtol=0, atol=1e-12)


def test_unreached_parameter_gets_zero_columns_of_its_own_dtype():
    # The only listed parameter is unused: the zero block must carry its float64 dtype, not
    # torch's float32 default, and a warning names the objectives that do not reach it.
    w = torch.randn(3, dtype=torch.float64, requires_grad=True)
    unused = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    for batched in (True, False):
        with pytest.warns(UserWarning, match=r"objectives \[0, 1\] do not reach the parameters"):
            rows = per_task_grads(torch.stack([w.sum(), (w * w).sum()]), [unused], batched=batched)
        assert rows.dtype == torch.float64 and torch.equal(rows, torch.zeros(2, 4, dtype=torch.float64))


@pytest.mark.parametrize("batched", [True, False])
def test_graph_is_freed_by_default_and_kept_on_request(batched):
    a, b, losses, _ = quadratic()
    per_task_grads(losses, [a, b], batched=batched)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        losses.sum().backward()
    a, b, losses, jac = quadratic()
    per_task_grads(losses, [a, b], batched=batched, retain_graph=True)
    losses.sum().backward()  # the graph is still there
    torch.testing.assert_close(torch.cat([a.grad, b.grad]), jac.sum(0), rtol=0, atol=1e-12)


def test_backward_frees_or_keeps_the_graph_like_autograd():
    a, b, losses, _ = quadratic()
    backward(losses, [a, b], lambda g: g.mean(0))
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        losses.sum().backward()
    a, b, losses, jac = quadratic()
    backward(losses, [a, b], lambda g: g.mean(0), retain_graph=True)
    losses.sum().backward()
    # .grad = mean row (from backward) + sum of rows (from the second pass)
    torch.testing.assert_close(torch.cat([a.grad, b.grad]), jac.mean(0) + jac.sum(0), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "k,batched,calls", [(1, True, 1), (2, True, 1), (3, True, 1), (3, None, 1), (2, False, 2), (3, False, 3)]
)
def test_one_batched_backward_or_k_passes(monkeypatch, k, batched, calls):
    # The batched path's promise is ONE vmapped backward for all K rows (also by default,
    # batched=None here); batched=False makes K. A batched call that silently fell back to the
    # loop would still give the right numbers.
    seen = []
    real_grad = torch.autograd.grad

    def counting_grad(*args, **kwargs):
        seen.append(kwargs.get("is_grads_batched", False))
        return real_grad(*args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", counting_grad)
    a, b, losses, jac = quadratic(k)
    kwargs = {} if batched is None else {"batched": batched}
    torch.testing.assert_close(per_task_grads(losses, [a, b], **kwargs), jac, rtol=0, atol=1e-12)
    assert len(seen) == calls
    batched = True if batched is None else batched
    assert all(seen) if (batched and k > 1) else not any(seen)


def test_write_grads_casts_to_the_parameter_dtype():
    p = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    direction = torch.arange(6, dtype=torch.float32)
    write_grads([p], direction)
    assert p.grad.dtype == torch.float64
    torch.testing.assert_close(p.grad, torch.arange(6, dtype=torch.float64).reshape(2, 3), rtol=0, atol=0)


def test_backward_rejects_a_direction_of_the_wrong_length():
    a, b, losses, _ = quadratic()
    with pytest.raises(ValueError, match=r"aggregator must return a \[D\]=5 tensor"):
        backward(losses, [a, b], lambda g: g.sum())  # a scalar, not [D]
    a, b, losses, _ = quadratic()
    with pytest.raises(ValueError, match=r"aggregator must return a \[D\]=5 tensor"):
        backward(losses, [a, b], lambda g: torch.zeros(6, dtype=g.dtype))


def _linear_loss(params, x):
    return (x @ params["w"]).sum()


def test_batched_task_grads_closed_form_with_one_dimensional_per_task_params():
    # loss_k = Σ_b x_kb·w + s_k ⋅ ‖w‖²: ∂/∂w = Σ_b x_kb + 2 s_k w. s is [K], one scalar a task.
    gen = torch.Generator().manual_seed(2)
    w = torch.randn(3, generator=gen, dtype=torch.float64)
    x = torch.randn(4, 5, 3, generator=gen, dtype=torch.float64)
    s = torch.rand(4, generator=gen, dtype=torch.float64)

    def loss_fn(params, xk):
        return (xk @ params["w"]).sum() + params["s"] * (params["w"] @ params["w"])

    losses, grads = batched_task_grads(loss_fn, {"w": w}, x, per_task_params={"s": s})
    torch.testing.assert_close(grads, x.sum(1) + 2 * s[:, None] * w, rtol=0, atol=1e-12)
    torch.testing.assert_close(losses, x.sum(1) @ w + s * (w @ w), rtol=0, atol=1e-12)


def test_batched_task_grads_input_errors_name_the_culprit():
    w = {"w": torch.randn(3, dtype=torch.float64)}
    x = torch.randn(4, 5, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="non-empty dict"):
        batched_task_grads(_linear_loss, [w["w"]], x)
    with pytest.raises(ValueError, match=r"inputs\[1\] must be a tensor with a leading task dimension"):
        batched_task_grads(_linear_loss, w, x, torch.tensor(1.0))
    with pytest.raises(ValueError, match=r"per_task_params\['s'\] must be a tensor"):
        batched_task_grads(_linear_loss, w, x, per_task_params={"s": torch.tensor(1.0)})
    with pytest.raises(ValueError, match=r"scalar per task .*got \(5,\)"):
        batched_task_grads(lambda p, xk: xk @ p["w"], w, x)
    with pytest.raises(ValueError, match="scalar per task .*got float"):
        batched_task_grads(lambda p, xk: 1.0, w, x)


def test_batched_task_grads_accepts_one_number_per_task():
    # inputs of shape [K] (one scalar per task) are valid: loss_k = t_k ‖w‖², ∂/∂w = 2 t_k w.
    w = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    t = torch.tensor([0.5, 1.0, 3.0, -1.0], dtype=torch.float64)
    losses, grads = batched_task_grads(lambda p, tk: tk * (p["w"] @ p["w"]), {"w": w}, t)
    torch.testing.assert_close(grads, 2 * t[:, None] * w, rtol=0, atol=1e-12)
    torch.testing.assert_close(losses, t * 5.25, rtol=0, atol=1e-12)


# -- the non-finite rule of morl.backward ----------------------------------------------------------
def _three_task_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def _three_losses(model, poison=None, how="loss", inputs=None):
    """Three squared-output losses; objective ``poison`` made non-finite: ``how="loss"`` divides
    it by zero (the loss is inf), ``how="grad"`` adds sqrt(0·Σ out) (the loss stays finite, its
    gradient is sqrt'(0) · 0 = inf · 0 = NaN). ``inputs=task_features(z, 3)``: loss k reads view k."""
    x = torch.linspace(-1.0, 1.0, 24).reshape(6, 4) if inputs is None else inputs
    outs = [model(v) for v in x] if isinstance(x, TaskFeatures) else [model(x)] * 3  # views: loss k reads x[k]
    parts = [(outs[k][:, k] ** 2).mean() + 0.1 for k in range(3)]
    if poison is not None:
        zero = outs[poison][:, poison].sum() * 0.0
        parts[poison] = parts[poison] / zero.abs() if how == "loss" else parts[poison] + torch.sqrt(zero.abs())
    return torch.stack(parts)


@pytest.mark.parametrize("mode", ["raise", "skip", "off"])
@pytest.mark.parametrize("name", available())
def test_no_nan_reaches_the_parameters_under_any_check_finite_mode(name, mode):
    """A call with a NaN gradient (finite loss) and one with an inf loss leave the parameters
    exactly as they were after an SGD step, under every mode: "raise" raises before .grad is
    written, "skip" and "off" write a zero direction; "skip" counts each bad call once and a
    finite call not at all. The finite call then moves the parameters, except under "off",
    where a stateful method's state may hold the NaN it was given (zeroed again here)."""
    model = _three_task_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    agg = build(name, check_finite=mode)
    start = [p.detach().clone() for p in model.parameters()]
    for culprit, how in ((1, "grad"), (2, "loss")):
        opt.zero_grad()
        if mode == "raise":
            with pytest.raises(ValueError, match="non-finite"):
                morl.backward(_three_losses(model, culprit, how), model.parameters(), agg)
        else:
            morl.backward(_three_losses(model, culprit, how), model.parameters(), agg)
        opt.step()
        for p, p0 in zip(model.parameters(), start):
            assert torch.equal(p.detach(), p0), (culprit, how)
    if mode == "skip":
        assert int(agg.nonfinite_steps) == 2
    opt.zero_grad()
    morl.backward(_three_losses(model), model.parameters(), agg)
    opt.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())
    if mode != "off":
        assert any(not torch.equal(p.detach(), p0) for p, p0 in zip(model.parameters(), start))
    if mode == "skip":
        assert int(agg.nonfinite_steps) == 2


@pytest.mark.parametrize("name", ["mean", "upgrad", "uw"])
@pytest.mark.parametrize("culprit", [1, 2])
def test_raise_names_the_objective_whose_loss_went_non_finite(name, culprit):
    """Objective ``culprit``'s loss is divided by zero: every row of the batched backward is NaN
    (0 · inf on the other rows), the error names ``culprit``, not objective 0."""
    model = _three_task_net()
    with pytest.raises(ValueError, match=rf"^objective {culprit} has a non-finite loss"):
        morl.backward(_three_losses(model, culprit, "loss"), model.parameters(), build(name))


@pytest.mark.parametrize("name", ["mean", "upgrad", "uw"])
@pytest.mark.parametrize("culprit", [1, 2])
def test_raise_names_the_objective_whose_own_gradient_is_non_finite(name, culprit):
    """A finite loss with a NaN gradient: with the graph kept, each row is recomputed on its own
    and the error names ``culprit``; with the graph freed, it lists the objectives whose rows
    are non-finite (every one: the batched backward spreads NaN) and says how to name it."""
    model = _three_task_net()
    with pytest.raises(ValueError, match=rf"^objective {culprit} has a non-finite gradient"):
        morl.backward(_three_losses(model, culprit, "grad"), model.parameters(), build(name), retain_graph=True)
    with pytest.raises(ValueError, match=r"retain_graph=True"):
        morl.backward(_three_losses(model, culprit, "grad"), model.parameters(), build(name))


@pytest.mark.parametrize("name", ["mean", "upgrad", "uw"])
def test_losses_that_do_not_reach_the_parameters_warn(name):
    """Losses built from other tensors than ``params``: autograd finds no path, the direction is
    zero, and one UserWarning names the objectives."""
    w = torch.randn(3, requires_grad=True)
    unrelated = torch.nn.Linear(2, 2)
    with pytest.warns(UserWarning, match=r"objectives \[0, 1\] do not reach the parameters") as record:
        direction = morl.backward(torch.stack([w.sum(), (w * w).sum()]), unrelated, build(name))
    assert len([r for r in record if "do not reach" in str(r.message)]) == 1
    assert torch.equal(direction, torch.zeros(6))


def test_a_plain_callable_that_returns_nan_from_finite_rows_is_refused():
    """A plain callable counts as check_finite="raise": its NaN is not written, and the error
    says the rows were finite (the callable is at fault, not an objective)."""
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(ValueError, match="returned a non-finite direction from finite gradients"):
        backward(torch.stack([x.sum(), (x * x).sum()]), [x], lambda g: g.sum(0) * float("nan"))
    assert x.grad is None


# -- gramian=: the exact direction of a Gramian method without the [K, D] matrix ------------------
GRAMIAN_METHODS = sorted(n for n in available() if issubclass(aggregator_class(n), GramianAggregator))


def _trunk_heads(seed: int = 0, dtype=torch.float64):
    torch.manual_seed(seed)
    trunk = torch.nn.Sequential(torch.nn.Linear(N_IN, 12), torch.nn.Tanh(), torch.nn.Linear(12, 8), torch.nn.ReLU())
    heads = torch.nn.ModuleList(torch.nn.Linear(8, 1) for _ in range(K))
    return trunk.to(dtype), heads.to(dtype)


def _head_losses(trunk, heads, x, y):
    z = trunk(x)
    return torch.stack([((h(z)[:, 0] - y[:, k]) ** 2).mean() for k, h in enumerate(heads)]), z


@pytest.mark.parametrize("use_tape", [False, True])
@pytest.mark.parametrize("name", GRAMIAN_METHODS)
def test_gramian_path_gives_the_rows_path_direction(gen, name, use_tape, monkeypatch):
    """For every Gramian method the direction and .grad of gramian=True / gramian=tape equal
    the [K, D] path's to float64 rounding, and per_task_grads (the [K, D] matrix) is never called."""
    x, y = torch.randn(2 * B, N_IN, generator=gen, dtype=torch.float64), torch.randn(2 * B, K, generator=gen)
    trunk, heads = _trunk_heads()
    expected = morl.backward(_head_losses(trunk, heads, x, y)[0], trunk, build(name))
    trunk.zero_grad(set_to_none=True)
    calls, real = [], morl.gradients.per_task_grads
    monkeypatch.setattr(morl.gradients, "per_task_grads", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    tape = GramianTape(trunk)
    with tape:
        losses = _head_losses(trunk, heads, x, y)[0]
    direction = morl.backward(losses, trunk, build(name), gramian=tape if use_tape else True)
    assert not calls and float(expected.abs().max()) > 1e-3
    torch.testing.assert_close(direction, expected, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(flatten(p.grad for p in trunk.parameters()), expected, rtol=1e-6, atol=1e-9)


def test_gramian_path_keeps_the_aggregator_state_and_options(gen):
    """Two steps of a stateful method (Nash-MTL's warm weights, PCGrad's seeded draws) give the
    same directions on either path: the state advances once per call."""
    x, y = torch.randn(B, N_IN, generator=gen, dtype=torch.float64), torch.randn(B, K, generator=gen)
    for name in ("nash_mtl", "pcgrad"):
        directions = []
        for gramian in (False, True):
            trunk, heads = _trunk_heads()
            agg = build(name)
            directions.append(
                [morl.backward(_head_losses(trunk, heads, x, y)[0], trunk, agg, gramian=gramian) for _ in (1, 2)]
            )
        for a, b in zip(*directions):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9)


class _LargestTensor(torch.utils._python_dispatch.TorchDispatchMode):
    """The largest number of entries of any tensor an operation created."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.untyped_storage().nbytes() // t.element_size())
        return out


@pytest.mark.parametrize("k", [4, 16])
def test_gramian_path_never_allocates_a_per_task_weight_block(k):
    """Memory, counted as the largest tensor autograd and morl allocate in the call: the rows path
    allocates the [K, D] matrix, gramian=True one [K, p] block of the largest weight at a time,
    gramian=tape nothing bigger than the flat [D] direction or a layer's [K, B, out] output
    gradients (every layer is recorded)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, k)
    )
    x, d = torch.randn(8, 20), sum(p.numel() for p in model.parameters())
    largest = {}
    for how in ("rows", "blocks", "tape"):
        tape = GramianTape(model)
        with tape:
            losses = (model(x) ** 2).mean(0)
        with _LargestTensor() as seen:
            morl.backward(losses, model, build("upgrad"), gramian={"rows": False, "blocks": True, "tape": tape}[how])
        largest[how] = seen.largest
    assert largest["rows"] >= k * d
    assert largest["blocks"] == k * 64 * 64  # the [K, 64, 64] block of the middle weight
    assert largest["tape"] == max(d, k * 8 * 64)  # the direction, or the [K, B, 64] output gradients


@pytest.mark.parametrize("mode", ["raise", "skip", "off"])
@pytest.mark.parametrize("path", ["gramian", "features", "views"])
@pytest.mark.parametrize("name", ["upgrad", "mgda", "pcgrad", "mean", "graddrop"])
def test_no_nan_reaches_the_parameters_on_the_gramian_and_features_paths(name, path, mode):
    """The rule of test_no_nan_reaches_the_parameters_under_any_check_finite_mode, on the
    gramian= path (Gramian methods only) and the features= path with a shared z and with
    task_features views; the heads (task_params) are held to it too."""
    if path == "gramian" and not issubclass(aggregator_class(name), GramianAggregator):
        pytest.skip("gramian= takes Gramian methods only")
    model = _three_task_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    agg = build(name, check_finite=mode)
    start = [p.detach().clone() for p in model.parameters()]

    def call(culprit=None, how="loss"):
        z = model[1](model[0](torch.linspace(-1.0, 1.0, 24).reshape(6, 4)))
        zs = task_features(z, 3) if path == "views" else z
        losses = _three_losses(model[2], culprit, how, inputs=zs)
        extra = {"gramian": True} if path == "gramian" else {"features": zs}
        morl.backward(losses, model[:2], agg, task_params=model[2].parameters(), **extra)

    for culprit, how in ((1, "grad"), (2, "loss")):
        opt.zero_grad()
        if mode == "raise":
            with pytest.raises(ValueError, match="non-finite"):
                call(culprit, how)
        else:
            call(culprit, how)
        opt.step()
        for p, p0 in zip(model.parameters(), start):
            assert torch.equal(p.detach(), p0), (culprit, how)
    if mode == "skip":
        assert int(agg.nonfinite_steps) == 2
    opt.zero_grad()
    call()
    opt.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert all(not torch.equal(p.detach(), p0) for p, p0 in zip(model.parameters(), start))


def test_gramian_raise_names_the_culprit_like_the_rows_path():
    model = _three_task_net()
    with pytest.raises(ValueError, match=r"^objective 2 has a non-finite loss"):
        morl.backward(_three_losses(model, 2, "loss"), model.parameters(), build("upgrad"), gramian=True)
    with pytest.raises(ValueError, match=r"^objective 1 has a non-finite gradient"):
        morl.backward(_three_losses(model, 1, "grad"), model.parameters(), build("upgrad"), gramian=True)


def test_option_errors_name_what_is_allowed():
    model = _three_task_net()
    with pytest.raises(ValueError, match="needs a Gramian method .* leave gramian=False"):
        morl.backward(_three_losses(model), model, build("graddrop"), gramian=True)
    with pytest.raises(ValueError, match="gramian must be False, True or a GramianTape"):
        morl.backward(_three_losses(model), model, build("mgda"), gramian="streamed")
    with pytest.raises(ValueError, match="pass one of them"):
        morl.backward(
            _three_losses(model), model, build("mgda"), gramian=True, features=torch.ones(2, requires_grad=True)
        )
    with pytest.raises(ValueError, match="features must be a tensor that requires grad"):
        morl.backward(_three_losses(model), model, build("mgda"), features=torch.ones(2))
    with pytest.raises(ValueError, match="task_params and params overlap"):
        morl.backward(_three_losses(model), model, build("mgda"), task_params=model[2].parameters())


# -- features=: MGDA-UB's representation gradients ------------------------------------------------
def _mgda_two(g1: torch.Tensor, g2: torch.Tensor) -> torch.Tensor:
    """Min-norm point of the segment [g1, g2] (arXiv 1810.04650, Algorithm 2), in closed form."""
    alpha = ((g2 - g1) @ g2 / ((g1 - g2) @ (g1 - g2))).clamp(0.0, 1.0)
    return alpha * g1 + (1 - alpha) * g2


def test_features_path_equals_the_hand_computed_mgda_ub_step():
    """Linear trunk z = x W [B, d], linear heads v_k, L_k = (1/B) Σ_b (z_b·v_k − y_kb)²:
    ∇_{z_b} L_k = (2/B) r_kb v_k; MGDA on the two flattened [B·d] rows in closed form gives D_z;
    W gets xᵀ D_z, head k gets ∇_{v_k} L_k = (2/B) Σ_b r_kb z_b (the summed loss's gradient)."""
    gen = torch.Generator().manual_seed(3)
    b, n, d = 5, 4, 3
    x, y = torch.randn(b, n, generator=gen, dtype=torch.float64), torch.randn(2, b, generator=gen, dtype=torch.float64)
    w = torch.randn(n, d, generator=gen, dtype=torch.float64, requires_grad=True)
    v = [torch.randn(d, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    z = x @ w
    losses = torch.stack([((z @ v[k] - y[k]) ** 2).mean() for k in range(2)])
    direction = morl.backward(losses, [w], build("mgda"), features=z, task_params=v)

    zd = (x @ w).detach()
    r = [zd @ v[k].detach() - y[k] for k in range(2)]
    rows = [(2 / b) * r[k][:, None] * v[k].detach()[None, :] for k in range(2)]  # [B, d] each
    dz = _mgda_two(rows[0].reshape(-1), rows[1].reshape(-1)).reshape(b, d)
    torch.testing.assert_close(w.grad, x.T @ dz, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(direction, (x.T @ dz).reshape(-1), rtol=1e-10, atol=1e-12)
    for k in range(2):
        torch.testing.assert_close(v[k].grad, (2 / b) * (r[k][:, None] * zd).sum(0), rtol=1e-10, atol=1e-12)


def test_features_path_differs_from_the_exact_direction_but_descends_for_every_task(gen):
    """MGDA-UB solves MGDA on ∇_z L_k, not on the parameters' rows: another direction, which for
    a trunk with full-rank ∂z/∂θ still decreases every loss (Theorem 1). Both measured here on a
    small trunk; docs/gradients.md quotes the cosine."""
    x, y = torch.randn(B, N_IN, generator=gen, dtype=torch.float64), torch.randn(B, K, generator=gen)
    trunk, heads = _trunk_heads(seed=1)
    losses, z = _head_losses(trunk, heads, x, y)
    rows = per_task_grads(losses, trunk.parameters(), retain_graph=True)
    exact = build("mgda")(rows)
    rep = morl.backward(losses, trunk, build("mgda"), features=z)
    cosine = float(rep @ exact / (rep.norm() * exact.norm()))
    assert 0.5 < cosine < 1 - 1e-6
    assert bool((rows @ rep > 0).all())


def test_features_path_takes_any_aggregator_and_one_batched_backward_through_the_heads(gen, monkeypatch):
    """The [K, B·d] rows come from per_task_grads on z (one call), any aggregator (here GradDrop,
    which needs rows) combines them, and the shared parameters get the vector-Jacobian product
    of that one gradient of z."""
    x, y = torch.randn(B, N_IN, generator=gen, dtype=torch.float64), torch.randn(B, K, generator=gen)
    trunk, heads = _trunk_heads()
    losses, z = _head_losses(trunk, heads, x, y)
    rows = per_task_grads(losses, [z], retain_graph=True)
    dz = build("graddrop")(rows, losses.detach())
    (expected,) = [flatten(torch.autograd.grad(z, list(trunk.parameters()), dz.view_as(z), retain_graph=True))]
    calls, real = [], morl.gradients.per_task_grads
    monkeypatch.setattr(morl.gradients, "per_task_grads", lambda *a, **kw: calls.append(a[1]) or real(*a, **kw))
    direction = morl.backward(losses, trunk, build("graddrop"), features=z)
    assert len(calls) == 1 and calls[0][0] is z
    torch.testing.assert_close(direction, expected, rtol=1e-10, atol=1e-12)


# -- features=task_features(z, K): the per-task views ---------------------------------------------
def _view_losses(trunk, heads, x, y, views: bool):
    """The head losses with head k fed view k of z (``views``) or z itself."""
    z = trunk(x)
    zs = task_features(z, len(heads)) if views else [z] * len(heads)
    losses = torch.stack([((h(zs[k])[:, 0] - y[:, k]) ** 2).mean() for k, h in enumerate(heads)])
    return losses, z, (zs if views else z)


@pytest.mark.parametrize("name", ["mgda", "upgrad", "pcgrad", "cagrad", "mean", "nash_mtl", "trimmed_mean"])
def test_task_features_give_the_shared_z_direction_and_the_per_task_reference(gen, name):
    """Head k fed view k: the direction and every .grad equal the shared-z path's and a reference
    from K separate backward passes to z (the aggregator on those rows, one vector-Jacobian
    product into the trunk; heads: the summed loss's gradient)."""
    x, y = torch.randn(B, N_IN, generator=gen, dtype=torch.float64), torch.randn(B, K, generator=gen)
    trunk, heads = _trunk_heads(seed=2)
    losses, z, _ = _view_losses(trunk, heads, x, y, views=False)
    rows = torch.stack([torch.autograd.grad(losses[k], z, retain_graph=True)[0].reshape(-1) for k in range(K)])
    dz = build(name)(rows, losses.detach()).view_as(z)
    expected = flatten(torch.autograd.grad(z, list(trunk.parameters()), dz, retain_graph=True))
    expected_heads = flatten(torch.autograd.grad(losses.sum(), list(heads.parameters())))
    got = {}
    for views in (False, True):
        trunk.zero_grad(set_to_none=True), heads.zero_grad(set_to_none=True)
        losses, _, feats = _view_losses(trunk, heads, x, y, views)
        direction = morl.backward(losses, trunk, build(name), features=feats, task_params=heads.parameters())
        got[views] = direction.clone(), flatten(p.grad for p in heads.parameters())
        assert float(direction.abs().max()) > 1e-3
        torch.testing.assert_close(direction, expected, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(flatten(p.grad for p in trunk.parameters()), expected, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(got[views][1], expected_heads, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(got[True][0], got[False][0], rtol=1e-12, atol=1e-14)


def test_task_features_backpropagate_each_head_once(gen):
    """The cost claim, in multiply-adds counted by torch's FlopCounterMode: the rows w.r.t. the
    views take K head backwards (head k: ∂L_k/∂z = g_k w_kᵀ, 2·B·d flops), the shared z's
    batched backward K² (every one-hot row through every head)."""
    x, y = torch.randn(B, N_IN, generator=gen, dtype=torch.float64), torch.randn(B, K, generator=gen)
    trunk, heads = _trunk_heads()
    d = heads[0].in_features
    flops = {}
    for views in (False, True):
        losses, z, feats = _view_losses(trunk, heads, x, y, views)
        with FlopCounterMode(display=False) as counter:
            rows = per_task_grads(losses, feats if views else [z])
        flops[views] = counter.get_total_flops()
        assert rows.shape == (K, B * d)
    assert flops == {True: K * 2 * B * d, False: K * K * 2 * B * d}


def test_task_features_plain_backward_gives_z_the_summed_gradient(gen):
    x, y = torch.randn(B, N_IN, generator=gen, dtype=torch.float64), torch.randn(B, K, generator=gen)
    trunk, heads = _trunk_heads()
    grads = []
    for views in (False, True):
        trunk.zero_grad(set_to_none=True)
        _view_losses(trunk, heads, x, y, views)[0].sum().backward()
        grads.append(flatten(p.grad for p in trunk.parameters()))
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-12, atol=1e-14)


def test_task_features_misuse_gives_one_clear_error(gen):
    """Loss k must read z through view k only: a swapped view is named per objective when the
    losses are a torch.stack, a view no loss reads otherwise; z read directly, a view count
    other than K and a bad k are refused."""
    x, y = torch.randn(B, N_IN, generator=gen, dtype=torch.float64), torch.randn(B, K, generator=gen)
    trunk, heads = _trunk_heads()

    def losses_from(pick, stack=True):
        z = trunk(x)
        zs = task_features(z, K)
        parts = [((h(pick(zs, z, k))[:, 0] - y[:, k]) ** 2).mean() for k, h in enumerate(heads)]
        return (torch.stack(parts) if stack else torch.stack(parts) * 1.0), zs

    cases = [
        (lambda zs, z, k: zs[(k + 1) % K], True, r"objective 0 reads views \[1\]; loss k must read view k only"),
        (lambda zs, z, k: zs[0], False, r"views \[1, 2, 3\] get no gradient"),
        (lambda zs, z, k: z if k == 2 else zs[k], True, "a loss reads z itself, not through a view"),
        (lambda zs, z, k: z if k == 2 else zs[k], False, "a loss reads z itself, not through a view"),
    ]
    for pick, stack, message in cases:
        losses, zs = losses_from(pick, stack)
        with pytest.raises(ValueError, match=message):
            morl.backward(losses, trunk, build("mgda"), features=zs)
        assert all(p.grad is None for p in trunk.parameters())
    losses, _ = losses_from(lambda zs, z, k: zs[k])
    with pytest.raises(ValueError, match=r"task_features\(z, 3\) for 4 losses; pass k = K"):
        per_task_grads(losses, task_features(trunk(x), 3))
    with pytest.raises(ValueError, match="k must be the number of tasks, an int >= 1, got 0"):
        task_features(trunk(x), 0)
    with pytest.raises(ValueError, match="z must be a tensor that requires grad"):
        task_features(x, K)


@pytest.mark.parametrize("culprit", [1, 2])
def test_task_features_raise_names_the_culprit(culprit):
    """Under "raise" the error names the objective whose loss or gradient is non-finite."""
    model = _three_task_net()
    for how, what in (("loss", "loss"), ("grad", "gradient")):
        zs = task_features(model[1](model[0](torch.linspace(-1.0, 1.0, 24).reshape(6, 4))), 3)
        with pytest.raises(ValueError, match=rf"^objective {culprit} has a non-finite {what}"):
            morl.backward(_three_losses(model[2], culprit, how, inputs=zs), model[:2], build("upgrad"), features=zs)
