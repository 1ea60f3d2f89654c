"""CR-MOGM (Zhou et al., NeurIPS 2022): λ_t = α λ_{t−1} + (1 − α) λ̂_t around any registered
aggregator whose direction is ``weights @ grads``. Checked against a hand recursion driven by a
twin of the base, against the base itself at α = 0 (every such registered method), and against
TorchJD 0.18's ``CRMOGMWeighting`` around its PCGrad weighting with the same task orders."""

import pytest
import torch
import torchjd.aggregation as tj

from morl.aggregators import aggregator_class, available, build

NOT_WEIGHTED = sorted(n for n in available() if not getattr(aggregator_class(n), "direction_is_weighted", True))
BASES = sorted(n for n in available() if n not in NOT_WEIGHTED and n != "cr_mogm")


def _calls(seed, k=4, d=9, n=5):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        j = torch.randn(k, d, generator=gen, dtype=torch.float64) - 0.4 * torch.randn(
            1, d, generator=gen, dtype=torch.float64
        )
        losses = torch.rand(k, generator=gen, dtype=torch.float64) + 0.5
        out.append((j, losses))
    return out


def test_the_non_weighted_methods_are_declared():
    assert {"graddrop", "trimmed_mean", "moco"} <= set(NOT_WEIGHTED)


@pytest.mark.parametrize("base", BASES)
def test_alpha_zero_is_the_base(base):
    """Every registered base that is not declared otherwise: its direction is its weights @ grads
    (the wrapper relies on it), and with α = 0 the wrapper returns the base's direction call
    after call (stateful bases included: the twin sees the same inputs). Bound 1e-12 of max|g|
    (the wrapper forms λ @ G itself; measured 0 for every base registered today)."""
    for seed in range(3):
        twin, agg = build(base), build("cr_mogm", base=base, alpha=0.0)
        for j, losses in _calls(seed):
            d_base = twin(j, losses)
            assert (twin.weights.to(j) @ j - d_base).abs().max() <= 1e-12 * j.abs().max(), base
            d = agg(j, losses)
            assert (d - d_base).abs().max() <= 1e-12 * j.abs().max(), base
            assert torch.equal(agg.weights, twin.weights.to(j))


RECURSION = [
    ("mgda", {}),
    ("cagrad", {"c": 0.4}),
    ("pcgrad", {"seed": 3}),
    ("epo_al", {}),
    ("upgrad", {}),
    ("krum", {"m": 2}),
]


@pytest.mark.parametrize("base, options", [(b, o) for b, o in RECURSION if b in available()])
def test_hand_recursion(base, options):
    """λ_1 = λ̂_1, λ_t = α λ_{t−1} + (1 − α) λ̂_t with λ̂_t from a twin of the base; d = λ_t @ G_t.
    Bound 1e-12 of max|g| (measured ≤ 2.7e-16); a swapped α / (1 − α) would be off by ~0.1."""
    alpha = 0.7
    for seed in range(5):
        twin = build(base, **options)
        agg = build("cr_mogm", base=base, base_options=options, alpha=alpha)
        lam = None
        for j, losses in _calls(seed):
            twin(j, losses)
            lam = twin.weights if lam is None else alpha * lam + (1 - alpha) * twin.weights
            assert (agg(j, losses) - lam @ j).abs().max() <= 1e-12 * j.abs().max()
            torch.testing.assert_close(agg.lam, lam, rtol=0, atol=1e-15)


def test_matches_torchjd_around_pcgrad():
    """TorchJD's PCGradWeighting draws one randperm(K) per task from the global generator, as
    ours does from its own (same seed -> same orders); TorchJD sums: reduction="sum". Its
    CRMOGMWeighting also starts at λ_0 = λ̂_1. Over seeds 0..5 and 5 calls: measured worst error
    5.5e-16 of max|g|; bound 1e-10."""
    for seed in range(6):
        calls = _calls(seed, k=5, d=11)
        theirs = tj.GramianWeightedAggregator(tj.CRMOGMWeighting(tj.PCGradWeighting(), alpha=0.6))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            refs = [theirs(j) for j, _ in calls]
        ours = build("cr_mogm", base="pcgrad", base_options={"seed": seed, "reduction": "sum"}, alpha=0.6)
        for (j, _), ref in zip(calls, refs):
            assert (ours(j) - ref).abs().max() <= 1e-10 * j.abs().max()


def test_float32_rows_get_float32_weights_around_a_float64_solver():
    """PCGrad solves in float64; the smoothed weights and the direction stay in the rows' dtype."""
    agg = build("cr_mogm", base="pcgrad")
    for _ in range(2):
        assert agg(torch.eye(3)).dtype == torch.float32 and agg.weights.dtype == torch.float32


def test_hand_computed_two_calls():
    """MGDA on diag(2, 1): λ̂ = (0.2, 0.8); on diag(1, 1): λ̂ = (0.5, 0.5). α = 0.5:
    λ_2 = (0.35, 0.65), d_2 = (0.35, 0.65)."""
    agg = build("cr_mogm", base="mgda", alpha=0.5)
    torch.testing.assert_close(
        agg(torch.diag(torch.tensor([2.0, 1.0], dtype=torch.float64))), torch.tensor([0.4, 0.8], dtype=torch.float64)
    )
    torch.testing.assert_close(agg(torch.eye(2, dtype=torch.float64)), torch.tensor([0.35, 0.65], dtype=torch.float64))


def test_alpha_one_freezes_the_first_weights():
    agg = build("cr_mogm", base="mgda", alpha=1.0)
    agg(torch.diag(torch.tensor([2.0, 1.0])))
    torch.testing.assert_close(agg(torch.eye(2)), torch.tensor([0.2, 0.8]))


def test_a_skipped_first_call_keeps_lambda0_the_next_base_weights():
    """check_finite="skip": a non-finite first call puts the state back (calls = 0), so the next
    call starts the recursion afresh (λ = λ̂), not from zeros."""
    agg = build("cr_mogm", base="mgda", alpha=0.9, check_finite="skip")
    bad = torch.eye(2)
    bad[0, 0] = float("nan")
    assert torch.equal(agg(bad), torch.zeros(2))
    torch.testing.assert_close(agg(torch.diag(torch.tensor([2.0, 1.0]))), torch.tensor([0.4, 0.8]))


@pytest.mark.parametrize("base", NOT_WEIGHTED)
def test_refuses_bases_whose_direction_is_not_weighted(base):
    with pytest.raises(ValueError, match=f"CRMOGM option base='{base}' is not valid"):
        build("cr_mogm", base=base)


def test_options_and_state():
    for bad, match in (
        ({"alpha": 1.5}, "alpha"),
        ({"alpha": -0.1}, "alpha"),
        ({"base": "nope"}, "base"),
        ({"base_options": {"c": 0.5}}, "base_options"),
        ({"base_options": [1]}, "base_options"),
    ):
        with pytest.raises(ValueError, match=f"CRMOGM option {match}"):
            build("cr_mogm", **bad)
    agg = build("cr_mogm", base="pcgrad")
    agg(torch.randn(3, 5))
    agg(torch.randn(3, 5))
    assert agg.calls.dtype == torch.int64 and int(agg.calls) == 2  # a counter in checkpoints
    with pytest.raises(
        ValueError,
        match=r"^CRMOGM: state 'lam' has shape \(3,\) but this call needs \(4,\) \(K changed\?\); call reset\(\) first$",
    ):
        agg(torch.randn(4, 5))
    agg.reset()
    assert agg.lam is None and agg(torch.randn(4, 5)).shape == (5,)
    assert build("cr_mogm", base="epo_al").needs_losses


def test_the_base_state_advances_and_is_saved_under_base():
    """A warm-started MGDA base keeps its previous weights across the wrapper's calls."""
    agg = build("cr_mogm", base="mgda", base_options={"warm_start": True})
    for j, losses in _calls(0):
        agg(j, losses)
    assert int(agg.calls) == 5 and torch.equal(agg.state_dict()["base.w_prev"], agg.base.w_prev)
