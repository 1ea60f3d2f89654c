"""The input checks and the ``check_finite`` policies of ``Aggregator.forward``
(morl/aggregators/base.py) in the cases the contract suite does not reach: a non-finite loss with finite gradients, a non-finite
direction from finite gradients (float32 overflow), the first clean call on the CPU fast path,
nested state (a stateful base inside MoCo), and the counters, which a skipped call never rolls
back. References are hand values or the same calls under ``check_finite="off"``; no seed."""

import pytest
import torch

from morl.aggregators import build

FINITE = torch.tensor([[1.0, 0.5, 0.0], [0.0, 2.0, 1.0]], dtype=torch.float64)


def test_a_non_finite_loss_zeroes_the_step_and_the_weights():
    """Mean ignores the losses, so its direction stays finite: only the loss check can skip it."""
    agg = build("mean", check_finite="skip")
    out = agg(FINITE, torch.tensor([1.0, float("nan")], dtype=torch.float64))
    assert torch.equal(out, torch.zeros(3, dtype=torch.float64))
    assert torch.equal(agg.weights, torch.zeros(2, dtype=torch.float64))
    assert agg.stats["nonfinite_steps"].item() == 1


@pytest.mark.parametrize("columns", [2, 1])
@pytest.mark.parametrize("name", ["mean", "cagrad"])
def test_an_overflowing_direction_from_finite_rows_is_zeroed(name, columns):
    """float32 rows of 3e38: each is finite, their sum is not (max float32 is 3.4e38). CAGrad is a
    Gramian method (its input check passes on the host), Mean is not (a device flag)."""
    rows = torch.tensor([[3e38, 1.0], [3e38, 1.0]], dtype=torch.float32)[:, :columns]
    assert not torch.isfinite(build(name, check_finite="off")(rows)).all()  # the case is real
    agg = build(name, check_finite="skip")
    assert torch.equal(agg(rows), torch.zeros(columns))
    assert agg.stats["nonfinite_steps"].item() == 1


def test_a_clean_call_on_the_host_path_starts_the_counter_at_zero():
    """MGDA on a CPU Gramian: both checks pass on the host; the counter still exists, an int64 0-d 0."""
    agg = build("mgda", check_finite="skip")
    out = agg(FINITE)
    torch.testing.assert_close(out, build("mgda", check_finite="off")(FINITE), rtol=0, atol=0)
    counter = agg.stats["nonfinite_steps"]
    assert counter.dtype == torch.int64 and counter.shape == () and counter.item() == 0


def test_a_skipped_call_restores_the_state_of_a_nested_base():
    """MoCo(base=EPO-AL): MoCo's λ is unchanged by the base path, EPO-AL's buffer p comes after
    it; every persistent buffer must be as after the last finite call."""
    losses = torch.tensor([0.3, 1.2], dtype=torch.float64)
    agg = build("moco", base="epo_al", check_finite="skip")
    agg(FINITE, losses)
    saved = {k: v.clone() for k, v in agg.state_dict().items() if isinstance(v, torch.Tensor)}  # buffers
    bad = FINITE.clone()
    bad[1, 2] = float("nan")
    assert torch.equal(agg(bad, losses), torch.zeros(3, dtype=torch.float64))
    after = agg.state_dict()
    assert any(key.startswith("base.") for key in saved)  # EPO-AL's p is in the state
    for key, value in saved.items():
        if "nonfinite_steps" not in key:
            assert torch.equal(after[key], value), key


def test_a_skipped_call_keeps_the_not_converged_count():
    """The counters are never rolled back: MGDA warm-started with one FISTA step on a K = 8 NaN
    Gramian counts the unconverged solve, as the same calls with the check off do."""
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(8, 20, generator=gen, dtype=torch.float64)
    calls = [base + 0.1 * torch.randn(8, 20, generator=gen, dtype=torch.float64) for _ in range(3)]
    bad = base.clone()
    bad[0, 0] = float("nan")
    skip = build("mgda", warm_start=True, max_iter=1, check_finite="skip")
    off = build("mgda", warm_start=True, max_iter=1, check_finite="off")
    for j in [*calls, bad]:
        skip(j)
        off(j)
    assert off.stats["not_converged"].item() >= 1  # the NaN solve is counted
    assert skip.stats["not_converged"].item() == off.stats["not_converged"].item()


@pytest.mark.parametrize("mode", ["raise", "skip"])
def test_no_columns_give_an_empty_direction(mode):
    """D = 0 (a model with no shared parameters): nothing to check, an empty direction, no error."""
    agg = build("mean", check_finite=mode)
    out = agg(torch.zeros(3, 0, dtype=torch.float64), torch.ones(3, dtype=torch.float64))
    assert out.shape == (0,)
    if mode == "skip":
        assert agg.stats["nonfinite_steps"].item() == 0


def test_a_non_finite_one_column_row_is_named():
    """D = 1: objective 1's gradient is named, not a non-finite direction (Mean checks only its
    direction and traces a non-finite one back to its row)."""
    grads = torch.tensor([[1.0], [float("inf")], [2.0]], dtype=torch.float64)
    with pytest.raises(ValueError, match=r"objective 1 has a non-finite \(NaN/inf\) gradient"):
        build("mean")(grads)


@pytest.mark.parametrize("name", ["mean", "mgda"])
def test_raise_mode_names_a_non_finite_loss(name):
    """Finite rows, a NaN loss: MGDA's rows are known finite on the host, the loss is still read."""
    losses = torch.tensor([0.5, float("nan")], dtype=torch.float64)
    with pytest.raises(ValueError, match=r"objective 1 has a non-finite \(NaN/inf\) loss"):
        build(name)(FINITE, losses)


def test_not_converged_adds_up_the_unconverged_solves():
    """MGDA at K = 8: the cold solve and a warm start at its own optimum converge (0); one FISTA
    step from there on a NaN Gramian cannot reach the tolerance (1); a K = 3 call is solved
    exactly by enumeration and adds nothing: the count stays 1."""
    base = torch.randn(8, 20, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    bad = base.clone()
    bad[0, 0] = float("nan")
    agg = build("mgda", warm_start=True, max_iter=1, check_finite="off")
    counts = []
    for j in (base, base, bad, base[:3]):
        agg(j)
        counts.append(agg.stats["not_converged"].item())
    assert counts == [0, 0, 1, 1]


def test_a_skipped_first_call_leaves_the_uniform_warm_start():
    """WarmStartSolver: the state a skipped first call puts back is λ = 1/K (not zeros)."""
    bad = torch.ones(4, 5, dtype=torch.float64)
    bad[2, 1] = float("nan")
    agg = build("mgda", warm_start=True, check_finite="skip")
    agg(bad)
    assert torch.equal(agg.w_prev, torch.full((4,), 0.25, dtype=torch.float64))


def test_a_warm_start_is_dropped_when_k_changes():
    """MGDA warm-started at K = 8, then called with 7 rows: a cold solve, the same as a new MGDA's."""
    gen = torch.Generator().manual_seed(1)
    j8 = torch.randn(8, 20, generator=gen, dtype=torch.float64)
    agg = build("mgda", warm_start=True)
    agg(j8)
    torch.testing.assert_close(agg(j8[:7]), build("mgda")(j8[:7]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("max_iter", [0, 2.5, True])
def test_max_iter_must_be_a_positive_int(max_iter):
    with pytest.raises(ValueError, match="max_iter"):
        build("mgda", max_iter=max_iter)


def test_raise_mode_refuses_an_overflowing_direction():
    rows = torch.tensor([[3e38, 1.0], [3e38, 1.0]], dtype=torch.float32)
    with pytest.raises(ValueError, match="non-finite direction"):
        build("mean")(rows)


@pytest.mark.parametrize("shape", [(3,), (2, 3, 4)])
def test_grads_must_be_a_matrix(shape):
    with pytest.raises(ValueError, match=r"shape \[K, D\]"):
        build("mean")(torch.ones(shape))


def test_losses_given_as_a_list_are_taken_in_the_gradients_dtype():
    """MoCo with grad_norm="loss" and β = 1 tracks g_m · f_m: 0.1 as a float64 (through float32
    it would be 0.1 + 1.5e-9), exactly as the tensor product."""
    g = torch.tensor([[1.0, 2.0], [3.0, -1.0]], dtype=torch.float64)
    agg = build("moco", grad_norm="loss", beta0=1.0, beta_pow=0.0)
    agg(g, [0.1, 0.3])
    assert torch.equal(agg.y, g * torch.tensor([[0.1], [0.3]], dtype=torch.float64))


def test_losses_of_another_dtype_are_cast_to_the_gradients():
    """float64 losses with float32 gradients: MoCo's tracked Y (g·f with β = 1) stays float32."""
    g = torch.tensor([[1.0, 2.0], [3.0, -1.0]])
    agg = build("moco", grad_norm="loss", beta0=1.0, beta_pow=0.0)
    agg(g, torch.tensor([0.5, 2.0], dtype=torch.float64))
    assert agg.y.dtype == torch.float32
    assert torch.equal(agg.y, torch.tensor([[0.5, 1.0], [6.0, -2.0]]))


def _non_gramian_methods() -> list[str]:
    from morl.aggregators import available
    from morl.aggregators.base import GramianAggregator

    return [n for n in available() if build(n).needs_grads and not isinstance(build(n), GramianAggregator)]


@pytest.mark.parametrize("name", _non_gramian_methods())
def test_every_non_gramian_method_names_the_row_with_a_nan_or_inf(name):
    """Methods without a Gramian check the whole matrix in one min/max pass (Mean: its direction
    only) and name the row only after that fails: NaN, +inf and -inf in any column of row 2,
    and +inf / -inf in one column of rows 1 and 3 (Mean's column sum is then NaN, the first named)."""
    gen = torch.Generator().manual_seed(1)
    losses = torch.tensor([0.4, 0.9, 1.3, 0.7], dtype=torch.float64)
    agg = build(name)
    needs = agg.needs_losses
    for bad_value in (float("nan"), float("inf"), -float("inf")):
        for column in (0, 3, 6):
            grads = torch.randn(4, 7, generator=gen, dtype=torch.float64)
            grads[2, column] = bad_value
            with pytest.raises(ValueError, match=r"objective 2 has a non-finite \(NaN/inf\) gradient"):
                agg(grads, losses) if needs else agg(grads)
    grads = torch.randn(4, 7, generator=gen, dtype=torch.float64)
    grads[1, 4], grads[3, 4] = float("inf"), -float("inf")
    with pytest.raises(ValueError, match=r"objective 1 has a non-finite \(NaN/inf\) gradient"):
        agg(grads, losses) if needs else agg(grads)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_mean_makes_no_pass_over_the_input_to_check_it(reduction, monkeypatch):
    """Mean's check reads only the [D] direction (a NaN/inf input entry makes its column's sum
    NaN/inf), under both policies; an overflow of finite rows is still reported as such."""
    import morl.aggregators.base as base

    seen = []
    real = base._all_finite
    monkeypatch.setattr(base, "_all_finite", lambda x: seen.append(x.dim()) or real(x))
    monkeypatch.setattr(base, "_finite_rows", lambda g: pytest.fail("a per-row pass over finite rows"))
    for mode in ("raise", "skip"):
        out = build("mean", reduction=reduction, check_finite=mode)(FINITE)
        torch.testing.assert_close(out, FINITE.mean(0) if reduction == "mean" else FINITE.sum(0), rtol=0, atol=0)
    assert seen == [1, 1]


def test_an_overflow_of_finite_rows_is_not_blamed_on_a_row():
    """Mean, float32 rows of 3e38 summed: every row is finite, so the error says the direction is
    non-finite, not that an objective is."""
    rows = torch.tensor([[3e38, 1.0], [3e38, 1.0]], dtype=torch.float32)
    with pytest.raises(ValueError, match="Mean produced a non-finite direction from finite gradients"):
        build("mean", reduction="sum")(rows)


def test_tracing_finite_input_raises_nothing():
    """The tracer after a failed whole-matrix test: finite rows and losses name nothing (an
    overflowed Gramian off the CPU lets the method run; the output check then decides)."""
    from morl.aggregators.base import _raise_nonfinite_input

    assert _raise_nonfinite_input(FINITE, torch.ones(2, dtype=torch.float64)) is None
    assert _raise_nonfinite_input(FINITE, None) is None
    with pytest.raises(ValueError, match=r"objective 0 has a non-finite \(NaN/inf\) loss"):
        _raise_nonfinite_input(FINITE, torch.tensor([float("inf"), 1.0], dtype=torch.float64))


@pytest.mark.parametrize("name", ["mean", "epo_al", "mgda"])
def test_finite_input_never_takes_the_per_row_pass(name, monkeypatch):
    """With finite gradients and losses the rows are never examined one by one (that pass only
    names the bad row once the whole-matrix, Gramian or direction test has failed)."""
    import morl.aggregators.base as base

    monkeypatch.setattr(base, "_finite_rows", lambda g: pytest.fail("a per-row pass over finite rows"))
    build(name)(FINITE, torch.tensor([0.5, 1.5], dtype=torch.float64))


@pytest.mark.parametrize("name", ["mean", "epo_al"])
def test_no_columns_and_a_nan_loss_name_the_loss(name):
    """D = 0 (nothing to reduce over the rows) with a NaN loss: the loss is named."""
    losses = torch.tensor([1.0, float("nan"), 2.0], dtype=torch.float64)
    with pytest.raises(ValueError, match=r"objective 1 has a non-finite \(NaN/inf\) loss"):
        build(name)(torch.zeros(3, 0, dtype=torch.float64), losses)
