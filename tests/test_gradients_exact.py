"""morl.gradients against closed-form Jacobians, and the contracts the numbers alone don't show.

The losses are L_k = c_k·a + d_k‖a‖² + e_k·b, so ∂L_k/∂a = c_k + 2 d_k a and ∂L_k/∂b = e_k:
a hand formula, independent of autograd's batching. Also pinned: every accepted form of
``params`` (Module, dict, one tensor, list), K = 1, the dtype of what is written or zero-filled,
when the autograd graph is freed, and how many backward passes each path makes.
"""

import pytest
import torch

from morl.gradients import backward, batched_task_grads, per_task_grads, write_grads


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


def test_fallback_loop_keeps_the_graph_when_asked(monkeypatch):
    # When the batched backward fails, the K-pass fallback must honour retain_graph too.
    real_grad = torch.autograd.grad

    def no_batching(*args, **kwargs):
        if kwargs.get("is_grads_batched"):
            raise RuntimeError("Batching rule not implemented for aten::something")
        return real_grad(*args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", no_batching)
    a, b, losses, jac = quadratic()
    torch.testing.assert_close(per_task_grads(losses, [a, b], retain_graph=True), jac, rtol=0, atol=1e-12)
    losses.sum().backward()
    torch.testing.assert_close(torch.cat([a.grad, b.grad]), jac.sum(0), rtol=0, atol=1e-12)


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
