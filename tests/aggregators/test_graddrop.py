"""GradDrop (Chen et al., NeurIPS 2020, arXiv 2010.06808, Algorithm 1): against TorchJD 0.18's
GradDrop under the same uniform draws, a numpy transcription of the paper's masks, a hand-
computed case, and the sign probabilities measured over many seeds."""

import numpy as np
import pytest
import torch
import torchjd.aggregation as tj

from morl.aggregators import build


def _jacobian(seed, k, d, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(k, d, generator=gen, dtype=torch.float64)
        + 0.3 * torch.randn(1, d, generator=gen, dtype=torch.float64)
    ).to(dtype)


def _paper(g, u, leak):
    """Algorithm 1, lines 10-15: P = ½(1 + Σg/Σ|g|), M_i = 1[P > U]1[g_i > 0] + 1[P < U]1[g_i < 0],
    d = Σ_i (ℓ_i + (1 − ℓ_i) M_i) g_i."""
    p = 0.5 * (1 + g.sum(0) / np.abs(g).sum(0))
    m = (p > u) * (g > 0) + (p < u) * (g < 0)
    return ((leak[:, None] + (1 - leak[:, None]) * m) * g).sum(0)


@pytest.mark.parametrize("k", [2, 3, 5, 9])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_torchjd_with_the_same_draws(k, dtype):
    """TorchJD draws U = torch.rand(D, dtype) from the global generator; ours draws the same
    from its own generator seeded with ``seed``. TorchJD sums: reduction="sum". Measured over
    seeds 0..5, with and without leaks: worst |d − d_tj| / max_c Σ_k|g_kc| = 2.5e-16 (float64)
    and 1.5e-7 (float32, summation order); bounds 1e-12 / 1e-5 (a flipped sign costs ~0.1-1)."""
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for seed in range(6):
        j = _jacobian(seed, k, 200, dtype)
        scale = j.abs().sum(0).max()
        for leak in (None, torch.linspace(0.0, 0.8, k, dtype=dtype)):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                ref = tj.GradDrop(leak=leak)(j)
            ours = build("graddrop", seed=seed, reduction="sum", leak=0.0 if leak is None else leak.tolist())(j)
            assert (ours - ref).abs().max() <= tol * scale, (seed, leak is None)


def test_matches_the_paper_transcription_over_calls():
    """Three calls in a row draw three U's; each matches the numpy masks on the same U. Mean
    reduction = the paper's sum / K. Measured worst error 5.4e-17 (of max Σ|g|); bound 1e-12."""
    for seed in range(5):
        agg = build("graddrop", seed=seed, leak=[0.0, 0.2, 0.5, 1.0])
        gen = torch.Generator().manual_seed(seed)
        for call in range(3):
            j = _jacobian(10 * seed + call, 4, 300)
            u = torch.rand(300, generator=gen, dtype=torch.float64).numpy()
            ref = _paper(j.numpy(), u, np.array([0.0, 0.2, 0.5, 1.0])) / 4
            assert np.abs(agg(j).numpy() - ref).max() <= 1e-12 * np.abs(j.numpy()).sum(0).max()


@pytest.mark.parametrize("leak", [[0.0, 0.2, 0.5, 1.0], [0.3]], ids=["per-task", "one"])
def test_weights_are_each_rows_share_of_its_l1_mass_in_d(leak):
    """``weights`` (the summary GradDrop reports): row i's L1 mass that enters d over its whole
    L1 mass, Σ_c (ℓ_i + (1 − ℓ_i) M_ic)|g_ic| / Σ_c |g_ic| with the paper's masks M on the same
    draws, divided by K under the mean reduction. Measured worst error 1.1e-16; bound 1e-12."""
    k, d = 4, 300
    ell = np.array(leak * k if len(leak) == 1 else leak)
    for seed in range(5):
        agg = build("graddrop", seed=seed, leak=leak)
        gen = torch.Generator().manual_seed(seed)
        for call in range(2):
            j = _jacobian(10 * seed + call, k, d)
            agg(j)
            g, u = j.numpy(), torch.rand(d, generator=gen, dtype=torch.float64).numpy()
            p = 0.5 * (1 + g.sum(0) / np.abs(g).sum(0))
            m = (p > u) * (g > 0) + (p < u) * (g < 0)
            share = ((ell[:, None] + (1 - ell[:, None]) * m) * np.abs(g)).sum(1) / np.abs(g).sum(1)
            assert np.abs(agg.weights.numpy() - share / k).max() <= 1e-12


def test_a_mixed_column_keeps_the_sign_its_purity_and_draw_pick():
    """Columns (1, 3): P = 1, every positive entry is kept whatever U < 1: 4. Columns (−2, 1):
    P = ½(1 − 1/3) = 1/3, keep the positive 1 when U < 1/3, else the negative −2. weights: the
    kept share of each row's L1 mass."""
    j = torch.tensor([[1.0, -2.0], [3.0, 1.0]], dtype=torch.float64)
    for seed in range(8):
        u = torch.rand(2, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        agg = build("graddrop", seed=seed, reduction="sum")
        d = agg(j)
        positive = bool(u[1] < 1 / 3)
        torch.testing.assert_close(d, torch.tensor([4.0, 1.0 if positive else -2.0], dtype=torch.float64))
        torch.testing.assert_close(
            agg.weights, torch.tensor([1 / 3, 1.0] if positive else [1.0, 0.75], dtype=torch.float64)
        )
    assert torch.equal(build("graddrop", leak=1.0, reduction="sum")(j), j.sum(0))  # full leak: the sum
    torch.testing.assert_close(build("graddrop", leak=1.0)(j), j.mean(0))


def test_the_positive_sign_is_kept_with_probability_p_and_d_is_unbiased():
    """One column repeated D = 4000 times gives D independent draws per call; over 20 seeds the
    fraction of coordinates keeping the positive entries estimates P, and the mean of d estimates
    E[d] = Σ_k g_k (P s⁺ + (1 − P) s⁻ = s⁺ + s⁻). Column (2, −1, 1, −0.5): P = 3/4.5 = 2/3.
    Standard errors over 80 000 draws: 1.7e-3 for the fraction, 7.5e-3 for the mean of d (d is
    s⁺ = 3 or s⁻ = −1.5); bounds 6e-3 and 0.027 (3.6 sd); measured errors 2.0e-3 and 9.0e-3.
    With the signs swapped (keep positive when P < U) the fraction would be 1/3: 0.33 off."""
    col = torch.tensor([2.0, -1.0, 1.0, -0.5], dtype=torch.float64)
    j = col[:, None].repeat(1, 4000)
    kept_pos, means = [], []
    for seed in range(20):
        d = build("graddrop", seed=seed, reduction="sum")(j)
        assert set(d.unique().tolist()) <= {3.0, -1.5}
        kept_pos.append((d == 3.0).double().mean())
        means.append(d.mean())
    assert abs(torch.stack(kept_pos).mean().item() - 2 / 3) <= 6e-3
    assert abs(torch.stack(means).mean().item() - col.sum().item()) <= 0.027


def test_one_sign_columns_are_kept_and_zero_columns_stay_zero():
    j = torch.tensor([[1.0, -1.0, 0.0], [2.0, -3.0, 0.0]])
    for seed in range(10):
        torch.testing.assert_close(build("graddrop", seed=seed, reduction="sum")(j), torch.tensor([3.0, -4.0, 0.0]))


def test_repr_shows_one_leak_as_a_number_and_per_row_leaks_as_a_list():
    assert repr(build("graddrop", leak=0.2)) == "GradDrop(leak=0.2, seed=0, reduction='mean')"
    assert repr(build("graddrop", leak=[0.1, 0.3], seed=4)) == "GradDrop(leak=[0.1, 0.3], seed=4, reduction='mean')"


def test_bad_options_are_refused_and_the_generator_state_is_saved():
    for bad in ({"leak": 1.5}, {"leak": [0.1, -0.1]}, {"leak": True}, {"seed": -1}, {"reduction": "max"}):
        with pytest.raises(ValueError, match="GradDrop option"):
            build("graddrop", **bad)
    with pytest.raises(ValueError, match="leak has 2 values; allowed: 1 or K=3"):
        build("graddrop", leak=[0.1, 0.2])(torch.randn(3, 4))
    a, b = build("graddrop", seed=3), build("graddrop", seed=3)
    j = torch.randn(3, 50)
    first = a(j)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a(j), b(j)) and not torch.equal(first, a(j))  # the generator advances and is saved
    a.reset()
    assert torch.equal(a(j), first)
