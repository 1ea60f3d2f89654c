"""MoCo options that the paper-level tests (test_moco.py) leave at their defaults, each checked on
a first call worked out by hand (Fernando et al., ICLR 2023, arXiv:2210.12624, eqs. (6), (9),
(10)): the ρ of the exact λ map, Tracking.py's factor 2 on the λ step, the softmax map, and the
epoch counter. Two tasks with orthogonal rows keep every hand value a closed form; no seed."""

import math

import pytest
import torch

from morl.aggregators import build

# Rows g1 = (1, 0), g2 = (0, 3): the first call tracks y = β0·g (Y starts at 0, β_0 = β0/1^pow).
G = torch.tensor([[1.0, 0.0], [0.0, 3.0]], dtype=torch.float64)


def _two_task_min_norm(a11: float, a22: float, a12: float) -> float:
    """λ1 minimising λᵀAλ on the 2-simplex: the clamped stationary point of the quadratic."""
    return min(max((a22 - a12) / (a11 + a22 - 2 * a12), 0.0), 1.0)


@pytest.mark.parametrize("rho", [0.0, 1.0])
def test_exact_lambda_map_solves_the_rho_regularised_min_norm(rho):
    """(8): λ* = argmin λᵀ(YYᵀ + ρI)λ on the simplex; ρ = 1 moves λ1 from 0.9 to 0.722."""
    agg = build("moco", lambda_map="exact", beta0=0.5, beta_pow=0.0, rho=rho)
    out = agg(G)
    y = 0.5 * G  # YYᵀ = diag(0.25, 2.25)
    lam1 = _two_task_min_norm(0.25 + rho, 2.25 + rho, 0.0)
    expected = torch.tensor([lam1, 1.0 - lam1], dtype=torch.float64)
    # 1e-7: the K = 2 closed form keeps the reference code's 1e-8 guard in its denominator
    # (8e-9 off here); without ρ the weights would be 0.18 away
    torch.testing.assert_close(agg.weights, expected, rtol=0, atol=1e-7)
    torch.testing.assert_close(out, expected @ y, rtol=0, atol=1e-7)


def test_lam_grad_scale_doubles_the_lambda_step():
    """Tracking.py's factor 2 (the gradient of ‖Yλ‖², preset "office"): v = λ0 − 2γ·YYᵀλ0."""
    agg = build("moco", beta0=0.5, beta_pow=0.0, gamma0=0.2, gamma_pow=0.0, lam_grad_scale=2.0)
    agg(G)
    # λ0 = (½, ½); YYᵀλ0 = (0.125, 1.125); v = (0.5 − 0.4·0.125, 0.5 − 0.4·1.125) = (0.45, 0.05)
    v1, v2 = 0.5 - 0.4 * 0.125, 0.5 - 0.4 * 1.125
    lam1 = min(max((v1 - v2 + 1) / 2, 0.0), 1.0)  # Euclidean projection of (v1, v2) onto the 2-simplex
    torch.testing.assert_close(agg.weights, torch.tensor([lam1, 1 - lam1], dtype=torch.float64), rtol=0, atol=1e-12)
    assert lam1 == pytest.approx(0.7)  # with γ instead of 2γ it would be 0.6


def test_softmax_map_is_the_softmax_of_the_gradient_step():
    """App. K.2's practical map: λ1 = softmax(λ0 − γ·YYᵀλ0), not the projection (which gives 0.6)."""
    agg = build("moco", lambda_map="softmax", beta0=0.5, beta_pow=0.0, gamma0=0.4, gamma_pow=0.0)
    agg(G)
    v1, v2 = 0.5 - 0.4 * 0.125, 0.5 - 0.4 * 1.125
    e1, e2 = math.exp(v1), math.exp(v2)
    expected = torch.tensor([e1 / (e1 + e2), e2 / (e1 + e2)], dtype=torch.float64)
    torch.testing.assert_close(agg.weights, expected, rtol=0, atol=1e-12)


def test_next_epoch_counts_every_epoch():
    """schedule="epoch": after two epochs t = k + k0 = 3, so β = 0.05/√3 and γ = 0.1/√3 (cityscapes)."""
    agg = build("moco", preset="cityscapes")
    agg.next_epoch()
    agg.next_epoch()
    beta, gamma = agg.step_sizes()
    assert beta == pytest.approx(0.05 / math.sqrt(3), rel=1e-15)
    assert gamma == pytest.approx(0.1 / math.sqrt(3), rel=1e-15)


def test_a_loss_dependent_base_gets_the_losses():
    """"X + MoCo" with EPO-AL (which needs the losses): the direction is EPO-AL on the tracked Y."""
    g = torch.tensor([[1.0, 0.5, 0.0], [0.0, 2.0, 1.0]], dtype=torch.float64)
    losses = torch.tensor([0.3, 1.2], dtype=torch.float64)
    agg = build("moco", base="epo_al", beta0=1.0, beta_pow=0.0)  # β = 1: Y = G after one call
    assert agg.needs_losses
    expected = build("epo_al", check_finite="off")(g, losses)
    torch.testing.assert_close(agg(g, losses), expected, rtol=0, atol=1e-12)


def test_paper_order_hands_the_losses_to_the_base():
    """order="paper" (Jacobi): call k applies the base to Y_k, the Y before this call's tracking;
    with β = 1 that is 0, then G. EPO-AL is stateful, so the reference sees the same two calls."""
    g = torch.tensor([[1.0, 0.5, 0.0], [0.0, 2.0, 1.0]], dtype=torch.float64)
    losses = torch.tensor([0.3, 1.2], dtype=torch.float64)
    agg = build("moco", base="epo_al", beta0=1.0, beta_pow=0.0, order="paper")
    reference = build("epo_al", check_finite="off")
    for y in (torch.zeros_like(g), g):
        torch.testing.assert_close(agg(g, losses), reference(y, losses), rtol=0, atol=1e-12)


def test_grad_norm_l2_tracks_unit_rows():
    """grad_norm="l2" (no losses needed): rows g/(‖g‖ + 1e-8) before tracking; ‖g1‖ = 1, ‖g2‖ = 3."""
    agg = build("moco", grad_norm="l2", beta0=1.0, beta_pow=0.0)
    assert not agg.needs_losses
    agg(G)
    expected = torch.tensor([[1 / (1 + 1e-8), 0.0], [0.0, 3 / (3 + 1e-8)]], dtype=torch.float64)
    torch.testing.assert_close(agg.y, expected, rtol=0, atol=1e-15)


def test_grad_norm_loss_scales_rows_by_their_losses():
    """grad_norm="loss" (no normalisation): rows g_m · f_m before tracking."""
    agg = build("moco", grad_norm="loss", beta0=1.0, beta_pow=0.0)
    assert agg.needs_losses
    agg(G, torch.tensor([2.0, 0.5], dtype=torch.float64))
    torch.testing.assert_close(agg.y, torch.tensor([[2.0, 0.0], [0.0, 1.5]], dtype=torch.float64), rtol=0, atol=0)


def test_one_radius_clips_each_row_on_its_own():
    """Π_L of (6) with one radius for all K = 3 rows (norms 3, 0.5, 2 with β = 1): a row longer
    than the radius is scaled back onto the sphere, a shorter one is left as it is."""
    g = torch.tensor([[3.0, 0.0], [0.0, 0.5], [1.2, 1.6]], dtype=torch.float64)
    agg = build("moco", y_radius=1.0, beta0=1.0, beta_pow=0.0)
    agg(g)
    expected = torch.tensor([[1.0, 0.0], [0.0, 0.5], [0.6, 0.8]], dtype=torch.float64)
    torch.testing.assert_close(agg.y, expected, rtol=0, atol=1e-15)


def test_a_changed_dtype_asks_for_reset():
    agg = build("moco")
    agg(G)
    with pytest.raises(ValueError, match="reset"):
        agg(G.to(torch.float32))


def test_a_skipped_first_call_leaves_the_starting_state():
    """check_finite="skip" on a NaN first call puts back Y = 0 and λ = (½, ½) (constant steps, so
    the counter that advanced does not matter); the next call is then the first step by hand:
    y = 0.5·G, v = λ0 − 0.4·YYᵀλ0 = (0.45, 0.05), λ1 = (0.7, 0.3), d = λ1·y = (0.35, 0.45)."""
    agg = build("moco", beta0=0.5, beta_pow=0.0, gamma0=0.4, gamma_pow=0.0, check_finite="skip")
    bad = G.clone()
    bad[0, 0] = float("nan")
    agg(bad)
    assert agg.stats["nonfinite_steps"].item() == 1
    out = agg(G)
    torch.testing.assert_close(agg.y, 0.5 * G, rtol=0, atol=1e-15)
    torch.testing.assert_close(agg.weights, torch.tensor([0.7, 0.3], dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(out, torch.tensor([0.35, 0.45], dtype=torch.float64), rtol=0, atol=1e-12)


def test_options_given_override_the_defaults():
    """gamma_pow, k0 and schedule given by the user (defaults 0.5, 1, "call"): t = k + k0 = 3 at
    first, β = 0.5/√3, γ = 0.1 (no decay); a call leaves k alone, an epoch makes t = 4."""
    agg = build("moco", beta0=0.5, beta_pow=0.5, gamma0=0.1, gamma_pow=0.0, k0=3, schedule="epoch")
    assert agg.step_sizes() == pytest.approx((0.5 / math.sqrt(3), 0.1), rel=1e-15)
    agg(G)
    assert agg.step_sizes() == pytest.approx((0.5 / math.sqrt(3), 0.1), rel=1e-15)
    agg.next_epoch()
    assert agg.step_sizes() == pytest.approx((0.25, 0.1), rel=1e-15)


def test_repr_names_the_preset_and_the_options():
    text = repr(build("moco", preset="office", rho=0.25))
    assert text.startswith("MoCo(preset='office', beta0=0.5, ")
    assert ", rho=0.25, k0=1, " in text and "lam_grad_scale=2.0" in text
    assert text.endswith(", lambda_gram='raw')")  # the last option, and no base
    assert repr(build("moco", base="pcgrad")).endswith(f", base={build('pcgrad')!r})")


@pytest.mark.parametrize("option, value", [("beta0", 0.0), ("out_scale", 0.0), ("k0", 1.5)])
def test_a_zero_step_or_scale_and_a_fractional_offset_are_refused(option, value):
    """β0 = 0 would never track, out_scale = 0 never move; k0 counts calls, an int."""
    with pytest.raises(ValueError, match=option):
        build("moco", **{option: value})


@pytest.mark.parametrize("option, value", [("rho", -1.0), ("gamma0", float("nan")), ("beta_pow", True)])
def test_a_negative_nan_or_bool_number_is_refused(option, value):
    with pytest.raises(ValueError, match=option):
        build("moco", **{option: value})


def test_the_radius_is_held_in_the_gradients_dtype():
    """A float64 run clips to the float64 radius 0.1 (as float32 it is 0.1 + 1.5e-9)."""
    agg = build("moco", y_radius=0.1, beta0=1.0, beta_pow=0.0)
    agg(G)
    torch.testing.assert_close(agg.y.norm(dim=1), torch.tensor([0.1, 0.1], dtype=torch.float64), rtol=0, atol=1e-16)


@pytest.mark.parametrize("beta_pow, gamma_pow", [(0.5, 0.0), (0.0, 0.5)])
def test_k0_zero_is_refused_with_a_decaying_step(beta_pow, gamma_pow):
    """t = k + k0 = 0 on the first call: beta0 / 0**pow is undefined for either decaying step."""
    with pytest.raises(ValueError, match="k0"):
        build("moco", k0=0, beta_pow=beta_pow, gamma_pow=gamma_pow)


def test_k0_zero_is_allowed_with_constant_steps():
    agg = build("moco", k0=0, beta0=0.3, beta_pow=0.0, gamma0=0.2, gamma_pow=0.0)
    assert agg.step_sizes() == (0.3, 0.2)


@pytest.mark.parametrize("radius", [0.0, [1.0, 0.0]])
def test_a_zero_radius_is_refused(radius):
    with pytest.raises(ValueError, match="y_radius"):
        build("moco", y_radius=radius)


def test_an_unknown_base_is_named():
    with pytest.raises(ValueError, match="MoCo option base='nope' is not valid"):
        build("moco", base="nope")
