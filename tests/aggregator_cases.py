"""What each registered aggregator promises, for the table-driven property suite.

Every name in ``morl.aggregators.available()`` must have a row (a test checks it), so a new
method cannot dodge the suite. The flags state the method's published guarantees, not what
the code happens to do: a flag set here is a property the paper proves (or the method's
construction implies), and ``tests/aggregators/test_properties.py`` checks it over generated
matrices of controlled rank, row-norm spread and scale in float32 and float64.

* ``options``: build options for the checks (the defaults when empty).
* ``non_conflicting``: g_k·d ≥ 0 for every k (−d never increases a loss to first order).
* ``stationary_zero``: d = 0 at a Pareto-stationary input (a positive combination of the rows
  is 0), d ≠ 0 when all rows lie in the positive orthant.
* ``permutation_invariant``: permuting the rows leaves d unchanged.
* ``linear``: d(aJ) = a·d(J) for a > 0.
* ``stochastic``: draws random numbers (seeded): the same seed gives the same output.
* ``stateful``: the output depends on earlier calls (state in buffers).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Case:
    options: dict = field(default_factory=dict)
    non_conflicting: bool = False
    stationary_zero: bool = False
    permutation_invariant: bool = False
    linear: bool = False
    stochastic: bool = False
    stateful: bool = False


CASES: dict[str, Case] = {
    "mean": Case(permutation_invariant=True, linear=True),
    "mgda": Case(non_conflicting=True, stationary_zero=True, permutation_invariant=True, linear=True),
    "smg": Case(non_conflicting=True, stationary_zero=True, permutation_invariant=True, linear=True),
    "pcgrad": Case(linear=True, stochastic=True, stateful=True),
    "cagrad": Case(permutation_invariant=True, linear=True),
    "moco": Case(stateful=True),
    "epo_al": Case(stateful=True),
    # loss weightings: weights from the losses only, so d(aJ) = a d(J) (the losses are fixed);
    # not permutation invariant here: the suite permutes the rows but not the losses
    "uw": Case(linear=True, stateful=True),
    "dwa": Case(linear=True, stateful=True),
    "famo": Case(linear=True, stateful=True),
    "gls": Case(linear=True),
    "stch": Case(linear=True, stateful=True),
    "gradnorm": Case(stateful=True),  # the weights follow the gradient norms
    # bargaining / α-fair weights (tests/aggregators/test_nash_mtl.py, test_fairgrad.py): g_k·d = w_k^(−1/α) > 0 where a
    # solution exists, d = 0 at (rounding-level) Pareto-stationary inputs. d is clipped to
    # ‖d‖ ≤ max_norm and does not scale with J, so the suite's scale-relative tolerances
    # (× max‖g_k‖) do not fit permutation invariance: it is checked relative to ‖d‖ there.
    "nash_mtl": Case(non_conflicting=True, permutation_invariant=True, stateful=True),
    "fairgrad": Case(non_conflicting=True, permutation_invariant=True),
    # stochastic weight updates on J₁J₂ᵀ (tests/aggregators/test_sdmgrad.py, test_modo.py): λ/w start uniform and
    # persist. SDMGrad steps on A / (mean row norm)², so its weights do not depend on the scale;
    # MoDo steps on the raw A (γ must suit the scale), so it is not linear. SDMGrad is
    # permutation invariant in exact arithmetic, but its 20 steps of η = 10 amplify the float32
    # rounding of A (measured 8e-4 relative in d): checked in float64 in its test file
    "sdmgrad": Case(linear=True, stateful=True),
    "modo": Case(permutation_invariant=True, stateful=True),
    # random loss weighting (tests/aggregators/test_rlw.py): weights drawn independently of J, so linear;
    # a different draw per row position, so not permutation invariant; the generator advances
    "rlw": Case(linear=True, stochastic=True, stateful=True),
    # projection / Gramian methods (tests/aggregators/test_upgrad.py, test_dualproj.py, ...). UPGrad and DualProj:
    # d = 0 when a strictly positive combination of the rows vanishes (the dual cone is then
    # null(J)), not at every weakly Pareto-stationary J (see docs/aggregators/projections.md).
    "upgrad": Case(non_conflicting=True, stationary_zero=True, permutation_invariant=True, linear=True),
    "dualproj": Case(non_conflicting=True, stationary_zero=True, permutation_invariant=True, linear=True),
    "imtl_g": Case(permutation_invariant=True, linear=True),
    "aligned_mtl": Case(permutation_invariant=True, linear=True),
    "config": Case(permutation_invariant=True, linear=True),  # conflict-free only for independent rows
    # PCGrad towards EMA target cosines; sign dropout per coordinate (the same U draws whatever
    # the row order); EMA of a base's weights (first call = the base); robust aggregation
    "gradvac": Case(linear=True, stochastic=True, stateful=True),
    "graddrop": Case(permutation_invariant=True, linear=True, stochastic=True, stateful=True),
    "krum": Case(linear=True),  # ties (K − f − 2 = 1: a mutual nearest pair) go to the lower index
    "trimmed_mean": Case(permutation_invariant=True, linear=True),
    "cr_mogm": Case(permutation_invariant=True, linear=True, stateful=True),
    # excess-risk weights (tests/aggregators/test_excess_mtl.py): each task's Ê from its own row and its
    # own statistics, a symmetric softmax; the first step uses the unscaled Ê, so not linear
    "excess_mtl": Case(permutation_invariant=True, stateful=True),
    # priority-constrained descent (tests/aggregators/test_pcd.py): row 0 is the primary objective, so
    # not permutation invariant; the rows are normalised by their running average of ‖g‖²
    # plus ε, so not exactly linear; the primary can get worse (its gradient is followed only
    # as closely as the secondaries' constraints allow), so not non-conflicting
    "pcd": Case(stateful=True),
}

#: extra configurations checked beyond each name's row (name, options, case)
EXTRA = [
    ("cagrad", {"c": 1.0}, Case(non_conflicting=True, stationary_zero=True, permutation_invariant=True, linear=True)),
    (
        "cagrad",
        {"c": 2.0, "rescale": 0},
        Case(non_conflicting=True, stationary_zero=True, linear=True),
    ),  # permutation: open (float64, K=15 full rank differs)
    ("moco", {"base": "pcgrad"}, Case(stateful=True, stochastic=True)),
    ("fairgrad", {"alpha": 2.0}, Case(non_conflicting=True)),
    ("nash_mtl", {"max_norm": 0.0, "update_weights_every": 2}, Case(stateful=True)),  # reused α may conflict
    ("rlw", {"distribution": "bernoulli"}, Case(linear=True, stochastic=True, stateful=True)),
    ("stch", {"ideal": "min"}, Case(linear=True, stateful=True)),
    ("stch", {"ideal": "zero"}, Case(linear=True)),
    ("stch", {"warmup": 2}, Case(linear=True, stateful=True)),
    ("dwa", {"every": 2}, Case(linear=True, stateful=True)),
    ("krum", {"score": "distance"}, Case(linear=True)),
    ("cr_mogm", {"base": "pcgrad"}, Case(linear=True, stochastic=True, stateful=True)),
    ("cr_mogm", {"base": "cagrad", "alpha": 0.5}, Case(permutation_invariant=True, linear=True, stateful=True)),
]


def all_configs() -> list[tuple[str, dict, Case]]:
    return [(name, case.options, case) for name, case in CASES.items()] + EXTRA
