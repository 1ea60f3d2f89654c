"""ZDT baselines of the MosT paper: linearisation, MGDA, EPO (morl.most_baselines).

Setting of the MosT-E ZDT test (tests/test_most.py): m = 5, x0 ~ U(0,1)^30, sign steps with
lr 0.01 for 150 steps, best hypervolume over training with the official reference points.
Thresholds sit below the minimum over init seeds 0..17 and 27 (float64 throughout): linearisation min 5.708 (max 5.757), MGDA min 5.342
(max 5.649), EPO min 5.662 (max 5.828); EPO's preference order held for all 19 starts, f1 span
min 0.954.
"""

import pytest
import torch

from morl import most as M
from morl import most_baselines as B
from morl.metrics import most_metrics as MM
from morl.problems import zdt as Z

SETTING = dict(lr=0.01, steps=150, project=Z.project, step="sign")
THRESHOLDS = {"linearisation": 5.65, "mgda": 5.25, "epo": 5.60}


def _x0(seed):
    return torch.rand(5, 30, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _zdt1(x):
    return Z.zdt("zdt1", x)


def _most_e_best_hv(seed):
    most = M.MosTE(5, 2, num_aux=25, dirichlet_shape=1.0, include_original=False, seed=0, gamma_scale="code")
    best = []
    cb = lambda t, th, g: best.append(float(MM.hypervolume(_zdt1(th), Z.REFERENCE_POINTS["zdt1"])))  # noqa: E731
    M.run(_zdt1, _x0(seed), most, lr=0.01, rounds=150, project=Z.project, callback=cb, step="sign")
    return max(best)


@pytest.mark.parametrize("method", [B.linearisation, B.mgda, B.epo], ids=lambda f: f.__name__)
def test_baseline_reaches_front_on_zdt1(method):
    hv, final = B.best_hypervolume(method, _zdt1, _x0(27), Z.REFERENCE_POINTS["zdt1"], **SETTING)
    assert hv >= THRESHOLDS[method.__name__]
    assert hv <= float(MM.hypervolume(Z.pareto_front("zdt1", 2000), Z.REFERENCE_POINTS["zdt1"])) + 1e-9
    f = B.objectives_batched(_zdt1, final)
    assert bool(torch.isfinite(f).all())
    # On the front: x_2..x_30 at the box floor (g = 1) and f2 = 1 − √f1.
    g = 1 + 9 / 29 * final[:, 1:].sum(-1)
    assert float((g - 1).max()) < 1e-3
    torch.testing.assert_close(f[:, 1], 1 - f[:, 0].sqrt(), atol=1e-3, rtol=0)


def test_epo_spreads_along_its_preferences():
    # A larger r_k pushes J_k lower: preferences ordered by rising r_2 give falling f2, rising f1.
    final = B.epo(_zdt1, _x0(27), **SETTING)
    f1 = B.objectives_batched(_zdt1, final)[:, 0]
    assert bool((f1[1:] >= f1[:-1] - 1e-9).all()) and float(f1[-1] - f1[0]) > 0.5


# MosT-E minus linearisation (best HV) for x0 seeds 0..9 and 27 depends on the CPU (sign steps
# turn rounding into different trajectories; float64, the same lock file):
#   AMD EPYC (Zen 4):  −1.10 +0.11 −0.14 −0.38 −0.64 −0.08 +0.16 −0.75 −0.08 −0.03 +0.15  (mean −0.25)
#   Intel Xeon:        +0.11 +0.04 +0.01 +0.09 +0.07 +0.08 +0.14 +0.08 −0.07 +0.03 +0.03  (mean +0.06)
# The paper's "MosT-E ≥ linearisation" holds on average on the Xeon and not on the EPYC. Until
# session 13 this was a strict xfail on the EPYC's numbers, which XPASSed on the Xeon. Asserted:
# what holds on both, MosT-E within 0.5 of linearisation on average over the eleven starts.
@pytest.mark.slow
def test_most_e_within_half_a_unit_of_linearisation_on_average():
    seeds = [*range(10), 27]
    gaps = [_most_e_best_hv(seed) - B.best_hypervolume(B.linearisation, _zdt1, _x0(seed), Z.REFERENCE_POINTS["zdt1"],
                                                          **SETTING)[0] for seed in seeds]
    assert sum(gaps) / len(gaps) >= -0.5, gaps


def test_helpers_and_bad_input():
    w = B.simplex_weights(4)
    torch.testing.assert_close(w.sum(1), torch.ones(4, dtype=torch.float64))
    assert bool((w > 0).all())
    r = B.circle_preferences(5)
    torch.testing.assert_close(r.norm(dim=1), torch.ones(5, dtype=torch.float64))
    with pytest.raises(ValueError, match="step"):
        B.linearisation(_zdt1, _x0(0), lr=0.01, steps=1, step="adam")
    with pytest.raises(ValueError, match="weights must have shape"):
        B.linearisation(_zdt1, _x0(0), lr=0.01, steps=1, weights=torch.ones(3, 2))
    with pytest.raises(ValueError, match="preferences must have shape"):
        B.epo(_zdt1, _x0(0), lr=0.01, steps=1, preferences=torch.ones(2, 2))
