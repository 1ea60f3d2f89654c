"""The Aggregator contract (morl/aggregators/base.py), for EVERY registered method (rows of
tests/aggregator_cases.py): an nn.Module with its state in buffers, forward hooks, one input
check and one non-finite policy ("raise" names the objective, "skip" zeroes the step, keeps
the state and counts the call). No host read on ``meta`` tensors: test_update_no_sync.py. References are hand values,
the same calls under ``check_finite="off"``, or the state before the call."""

from __future__ import annotations

import pytest
import torch
from aggregator_cases import CASES, all_configs
from jacobians import controlled

from morl.aggregators import Aggregator, GramianAggregator, available, build
from morl.solvers.gramian import gramian
from morl.solvers.min_norm import min_norm_solve

CONFIGS = all_configs()
IDS = [f"{n}{'-' + '-'.join(f'{k}={v}' for k, v in o.items()) if o else ''}" for n, o, _ in CONFIGS]
FINITE = torch.tensor([[1.0, 0.5, 0.0], [0.0, 2.0, 1.0]], dtype=torch.float64)


def _call(agg, j, gen=None):
    losses = None
    if agg.needs_losses or not agg.needs_grads:
        g = gen or torch.Generator().manual_seed(1)
        losses = (torch.rand(j.shape[0], generator=g, dtype=torch.float64) + 0.5).to(j.dtype)
    return agg(j, losses)


def test_every_registered_method_has_a_row():
    assert sorted(CASES) == available()


# -- part 1: the module contract ------------------------------------------------------------------
@pytest.mark.parametrize("name, options, case", CONFIGS, ids=IDS)
def test_is_a_module_with_state_in_buffers(name, options, case, gen):
    agg = build(name, **options)
    assert isinstance(agg, torch.nn.Module) and isinstance(agg, Aggregator)
    mats = [controlled(gen, 4, 9, 4) for _ in range(6)]
    for j in mats[:3]:
        _call(agg, j)
    state = agg.state_dict()
    expected = [_call(agg, j) for j in mats[3:]]
    fresh = build(name, **options)
    fresh.load_state_dict(state)
    for j, e in zip(mats[3:], expected):
        assert torch.equal(_call(fresh, j), e)
    if case.stateful:
        assert any(v is not None for _, v in agg.named_buffers()), "a stateful method keeps its state in buffers"


@pytest.mark.parametrize(
    "name, counted",
    [
        ("excess_mtl", {"calls": 3}),
        ("nash_mtl", {"step": 3}),
        ("epo_al", {"steps": 3}),
        ("moco", {"k": 3}),
        ("dwa", {"calls": 0, "periods": 3}),  # every=1: each call closes its period
    ],
)
def test_call_counters_keep_their_checkpoint_keys(name, counted, gen):
    # the counters' extra-state keys are what checkpoints hold (morl/aggregators/_counters.py):
    # they count the calls, survive a load and go back to 0 on reset()
    agg = build(name)
    for _ in range(3):
        _call(agg, controlled(gen, 3, 7, 3))
    assert agg.state_dict()["_extra_state"] == counted
    fresh = build(name)
    fresh.load_state_dict(agg.state_dict())
    assert fresh.get_extra_state() == counted
    agg.reset()
    assert agg.get_extra_state() == dict.fromkeys(counted, 0)


@pytest.mark.parametrize("name, options, case", CONFIGS, ids=IDS)
def test_forward_hooks_see_every_call(name, options, case, gen):
    agg = build(name, **options)
    seen = []
    handle = agg.register_forward_hook(lambda module, args, out: seen.append(out))
    j = controlled(gen, 3, 7, 3)
    out = _call(agg, j)
    handle.remove()
    assert len(seen) == 1 and seen[0] is out
    assert agg.weights is not None and agg.weights.shape == (3,)


@pytest.mark.parametrize("name, options, case", CONFIGS, ids=IDS)
def test_skip_policy_zeroes_the_step_and_keeps_the_state(name, options, case, gen):
    """check_finite="skip": a non-finite call returns 0, counts itself, and leaves every buffer
    (tracked gradients, multipliers, warm starts) as it was; plain-Python state (call counters
    of schedules, random generators) advances as for any call."""
    agg = build(name, check_finite="skip", **options)
    mats = [controlled(gen, 4, 9, 4) for _ in range(2)]
    for first in (True, False):  # before any state exists, and with state
        if not first:
            _call(agg, mats[0])
        before = {k: v.clone() for k, v in agg.state_dict().items() if isinstance(v, torch.Tensor)}
        bad = mats[1].clone()
        bad[2, 3] = float("nan")
        out = _call(agg, bad)
        assert torch.equal(out, torch.zeros_like(out))
        after = {
            k: v
            for k, v in agg.state_dict().items()
            if isinstance(v, torch.Tensor) and k.split(".")[-1] not in Aggregator._COUNTERS
        }
        for key, value in after.items():
            if key in before:
                assert torch.equal(value, before[key]), key
            else:  # created by the skipped call: holds the method's starting value, finite
                assert torch.isfinite(value.double()).all(), key
    assert int(agg.stats["nonfinite_steps"]) == 2
    assert torch.isfinite(_call(agg, mats[0])).all()


@pytest.mark.parametrize("name, options, case", CONFIGS, ids=IDS)
def test_nan_raises_naming_the_objective(name, options, case):
    j = torch.ones(3, 4)
    j[1, 2] = float("nan")
    with pytest.raises(ValueError, match="objective 1"):
        _call(build(name, **options), j)


class _BrokenMethod(Aggregator):
    """Returns NaN from finite input: what an overflowing solver would do."""

    def aggregate(self, grads, losses):
        return grads[0] * float("nan")


def test_non_finite_output_follows_the_policy():
    j = torch.ones(2, 3)
    with pytest.raises(ValueError, match="non-finite direction"):
        _BrokenMethod()(j)
    agg = _BrokenMethod(check_finite="skip")
    assert torch.equal(agg(j), torch.zeros(3)) and torch.equal(agg(j), torch.zeros(3))
    assert agg.stats["nonfinite_steps"].item() == 2 and agg.stats["nonfinite_steps"].dtype == torch.int64
    assert torch.isnan(_BrokenMethod(check_finite="off")(j)).all()


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
    """float32 rows of 3e38: each is finite, their sum is not (max float32 is 3.4e38), nor is
    CAGrad's Gramian."""
    rows = torch.tensor([[3e38, 1.0], [3e38, 1.0]], dtype=torch.float32)[:, :columns]
    assert not torch.isfinite(build(name, check_finite="off")(rows)).all()  # the case is real
    agg = build(name, check_finite="skip")
    assert torch.equal(agg(rows), torch.zeros(columns))
    assert agg.stats["nonfinite_steps"].item() == 1


def test_a_clean_skip_call_starts_the_counter_at_zero():
    """A finite call under "skip" returns what "off" returns; the counter exists, an int64 0-d 0."""
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


@pytest.mark.parametrize("name", available())
def test_every_method_names_the_row_with_a_nan_or_inf(name):
    """NaN, +inf and -inf in any column of row 2 name objective 2; +inf and -inf in one column of
    rows 1 and 3 name objective 1 (the first)."""
    gen = torch.Generator().manual_seed(1)
    losses = torch.tensor([0.4, 0.9, 1.3, 0.7], dtype=torch.float64)
    agg = build(name)
    for bad_value in (float("nan"), float("inf"), -float("inf")):
        for column in (0, 6):
            grads = torch.randn(4, 7, generator=gen, dtype=torch.float64)
            grads[2, column] = bad_value
            with pytest.raises(ValueError, match=r"objective 2 has a non-finite \(NaN/inf\) gradient"):
                agg(grads, losses)
    grads = torch.randn(4, 7, generator=gen, dtype=torch.float64)
    grads[1, 4], grads[3, 4] = float("inf"), -float("inf")
    with pytest.raises(ValueError, match=r"objective 1 has a non-finite \(NaN/inf\) gradient"):
        agg(grads, losses)


def test_an_overflow_of_finite_rows_is_not_blamed_on_a_row():
    """Mean, float32 rows of 3e38 summed: every row is finite, so the error says the direction is
    non-finite, not that an objective is."""
    rows = torch.tensor([[3e38, 1.0], [3e38, 1.0]], dtype=torch.float32)
    with pytest.raises(ValueError, match="Mean produced a non-finite direction from finite gradients"):
        build("mean", reduction="sum")(rows)


def test_raise_mode_accepts_finite_rows_and_direction_whose_sums_overflow():
    """ "raise" reads one sum of the rows and one of the direction: Mean (sum) of float32 rows
    [3e38, 3e38] and 0 overflows both sums, yet every entry is finite, so d = [3e38, 3e38]."""
    rows = torch.tensor([[3e38, 3e38], [0.0, 0.0]], dtype=torch.float32)
    assert torch.equal(build("mean", reduction="sum")(rows), rows[0])


def test_raise_mode_accepts_a_gramian_whose_diagonal_sum_overflows():
    """MGDA on orthogonal float32 rows of norm 1.4e19: G_kk = 1.96e38 each (finite), their sum
    overflows; λ = (½, ½) by symmetry, so d = (7e18, 7e18) as without the check."""
    rows = torch.tensor([[1.4e19, 0.0], [0.0, 1.4e19]], dtype=torch.float32)
    expected = torch.tensor([7e18, 7e18], dtype=torch.float32)
    torch.testing.assert_close(build("mgda")(rows), expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("mode", ["raise", "skip", "off"])
def test_no_columns_is_one_clear_error(mode):
    """D = 0: one ValueError from forward naming the shape, whatever the policy and method."""
    for name in ("mean", "mgda", "cagrad"):
        with pytest.raises(ValueError, match=r"at least one column \(D >= 1\), got shape \(3, 0\)"):
            build(name, check_finite=mode)(torch.zeros(3, 0, dtype=torch.float64), torch.ones(3, dtype=torch.float64))


def test_learner_flags_have_their_defaults():
    """needs_grads / needs_losses / needs_losses_after_step: what learners read instead of types."""
    mgda, mean = build("mgda"), build("mean")
    assert mgda.needs_grads and not mgda.needs_losses and not mgda.needs_losses_after_step
    assert not mean.needs_grads and not mean.needs_losses and not mean.needs_losses_after_step


# -- part 3: state, counters and the Gramian route, against hand values -------------------------------
def test_state_starts_at_its_initial_value_and_carries_across_calls_and_dtypes():
    """EPO-AL's dual p (uniform start 1/K): weights = max(p, 0) + η c, p ← p + μ c with
    c = r∘(r∘l − mean(r∘l)) (r = 1/K); the second call, in float32, reads p in float32."""
    losses = [torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64), torch.tensor([3.0, 1.0, 2.0], dtype=torch.float64)]
    agg, p = build("epo_al"), torch.full((3,), 1 / 3, dtype=torch.float64)
    for i, (lo, dtype) in enumerate(zip(losses, (torch.float64, torch.float32))):
        c = (lo - lo.mean()) / 9  # r = 1/3 each
        out = agg(torch.eye(3, dtype=dtype), lo.to(dtype))
        assert out.dtype == dtype
        torch.testing.assert_close(out.double(), p.clamp(min=0) + 10.0 * c, rtol=1e-6, atol=1e-12 + 1e-7 * i)
        p = p + 0.1 * c
    assert agg.p.dtype == torch.float32  # the state follows the call's dtype
    torch.testing.assert_close(agg.p.double(), p, rtol=1e-6, atol=1e-7)


def test_a_uniform_state_restored_by_skip_is_one_over_k():
    bad = torch.ones(4, 5, dtype=torch.float64)
    bad[1, 1] = float("nan")
    agg = build("epo_al", check_finite="skip")
    agg(bad, torch.ones(4, dtype=torch.float64))
    assert torch.equal(agg.p, torch.full((4,), 0.25, dtype=torch.float64))


def test_not_converged_counts_each_stopped_solve_and_no_converged_one():
    """MGDA on FINITE converges (0); one Wolfe round on a 4×3 J does not (its KKT gap stays): +1 per call."""
    agg = build("mgda", max_iter=1)
    agg(FINITE)
    assert agg.stats["not_converged"].dtype == torch.int64 and agg.stats["not_converged"].item() == 0
    j = torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    _, converged = min_norm_solve(gramian(j) / gramian(j).diagonal().max(), max_iter=1, eps_2=0.0)
    assert not bool(converged)
    agg(j)
    agg(j)
    assert agg.stats["not_converged"].item() == 2


def test_reset_removes_every_buffer():
    agg = build("moco", base="epo_al")
    agg(FINITE, torch.tensor([0.3, 1.2], dtype=torch.float64))
    assert len(list(agg.named_buffers())) > 2
    agg.reset()
    assert list(agg.named_buffers()) == []


def test_repr_shows_the_options_floats_short_and_preferences_as_lists():
    assert repr(build("cagrad", c=0.25)) == "CAGrad(c=0.25, rescale=1)"
    assert repr(build("epo_al", preference=[1, 2.5])) == (
        "EPOAL(preference=[1.0, 2.5], eta=10, mu=0.1, dual_init='uniform')"
    )
    assert repr(build("epo_al", preference=[1 / 3, 2.5])).startswith("EPOAL(preference=[0.333333, 2.5], ")


class _Unit(GramianAggregator):
    """Weights 1 each in float64 whatever the input; records the Gramian it is given."""

    def weights_from_gramian(self, gram):
        self.seen = gram
        return torch.ones(gram.shape[-1], dtype=torch.float64)


class _InUnits(_Unit):
    gramian_in_units = True


def test_a_gramian_method_sees_g_over_its_largest_diagonal_unless_in_units():
    """G = [[1.25, 1], [1, 5]] for FINITE: divided by 5, or as is; weights come back in the rows' dtype."""
    g = torch.tensor([[1.25, 1.0], [1.0, 5.0]], dtype=torch.float64)
    for cls, expected in ((_Unit, g / 5), (_InUnits, g)):
        agg = cls()
        out = agg(FINITE.float())
        torch.testing.assert_close(agg.seen.double(), expected, rtol=1e-6, atol=0)
        assert agg.weights.dtype == torch.float32 and torch.equal(out, FINITE.float().sum(0))


def test_gramian_weights_follow_forward_without_the_rows():
    """From G alone: the weights forward applies, the same checks (NaN in G_kk names objective k;
    "skip" returns 0 weights and counts, NaN losses too; "off" checks nothing), weights in G's
    dtype, and a non-square G or a list is refused."""
    g = torch.tensor([[1.25, 1.0], [1.0, 5.0]], dtype=torch.float64)
    torch.testing.assert_close(build("mgda").gramian_weights(g), build("mgda")(FINITE) @ torch.linalg.pinv(FINITE))
    agg = _InUnits()
    assert torch.equal(agg.gramian_weights(g), torch.ones(2, dtype=torch.float64)) and torch.equal(agg.seen, g)
    bad = g.clone()
    bad[1, 1] = float("nan")
    with pytest.raises(ValueError, match=r"objective 1 has a non-finite \(NaN/inf\) gradient"):
        _Unit().gramian_weights(bad)
    skip = _Unit(check_finite="skip")
    assert torch.equal(skip.gramian_weights(bad), torch.zeros(2, dtype=torch.float64))
    assert skip.stats["nonfinite_steps"].item() == 1
    assert torch.equal(_Unit(check_finite="off").gramian_weights(g), torch.ones(2, dtype=torch.float64))
    assert torch.equal(_Unit(check_finite="off").gramian_weights(bad), torch.ones(2, dtype=torch.float64))  # no check
    assert build("pcgrad", check_finite="off").gramian_weights(g.float()).dtype == torch.float32
    nan_loss = torch.tensor([float("nan"), 1.0])
    assert torch.equal(_Unit(check_finite="skip").gramian_weights(g, nan_loss), torch.zeros(2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"loss"):
        _Unit().gramian_weights(g, nan_loss)
    assert build("pcgrad").gramian_weights(g.float()).dtype == torch.float32  # PCGrad solves in float64
    with pytest.raises(ValueError, match=r"gram must be a square \[K, K\] tensor, got torch.Size\(\[2, 3\]\)"):
        _Unit().gramian_weights(torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"gram must be a square \[K, K\] tensor, got list"):
        _Unit().gramian_weights([[1.0]])


def test_step_weights_are_a_calls_weights_without_the_direction():
    """What CR-MOGM reads from its base: Mean's 1/K, and EPO-AL's weights with its dual stepped as by a call."""
    assert torch.equal(build("mean")._step_weights(FINITE, None), torch.full((2,), 0.5, dtype=torch.float64))
    losses = torch.tensor([1.0, 3.0], dtype=torch.float64)
    agg, call = build("epo_al"), build("epo_al")
    assert torch.equal(agg._step_weights(FINITE, losses), (call(FINITE, losses), call.weights)[1])
    assert torch.equal(agg.p, call.p) and not torch.equal(agg.p, torch.full((2,), 0.5, dtype=torch.float64))


def test_a_skipped_call_keeps_the_state_and_weights_in_the_calls_dtype():
    """EPO-AL's dual from a float64 call, then a skipped float32 call: p is the saved p in float32,
    the reported weights are float32 zeros."""
    agg = build("epo_al", check_finite="skip")
    agg(torch.eye(2, dtype=torch.float64), torch.tensor([1.0, 3.0], dtype=torch.float64))
    saved = agg.p.clone()
    bad = torch.eye(2)
    bad[0, 1] = float("nan")
    agg(bad, torch.tensor([1.0, 3.0]))
    assert agg.p.dtype == torch.float32 and torch.equal(agg.p, saved.float())
    assert agg.weights.dtype == torch.float32 and torch.equal(agg.weights, torch.zeros(2))
    assert agg.stats["nonfinite_steps"].dtype == torch.int64
