"""UPGrad's and DualProj's options reach their solvers, their errors name the method and the
option, and each call starts from the previous call's free sets (the warm start that makes a
repeated K ≤ 16 projection one K×K solve, docs/benchmarks.md). The solvers themselves are
checked against quadprog and cvxpy in tests/test_dual_cone.py; these pin the wiring, which
mutation testing (docs/testing.md) found unpinned."""

import pytest
import torch

from morl.aggregators import build
from morl.aggregators import dualproj as dualproj_module
from morl.aggregators import upgrad as upgrad_module

MODULES = {"upgrad": upgrad_module, "dualproj": dualproj_module}
OWNERS = {"upgrad": "UPGrad", "dualproj": "DualProj"}


def _jacobian(seed: int, k: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    j = torch.randn(k, 3 * k, generator=gen, dtype=torch.float64)
    return j - 0.6 * j[:1]  # rows that conflict with row 0: some projections are active


@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize(
    "options, allowed",
    [
        ({"reg_eps": -1.0}, "a finite number >= 0"),
        ({"max_iter": 0}, "a finite int >= 1"),
        ({"max_iter": 2.5}, "a finite int >= 1"),
        ({"tol": -1e-3}, "a finite number >= 0"),
    ],
)
def test_option_errors_name_the_method_the_option_and_what_is_allowed(name, options, allowed):
    (key, value), = options.items()
    with pytest.raises(ValueError, match=rf"^{OWNERS[name]} option {key}={value!r} is not valid; allowed: {allowed}$"):
        build(name, **options)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_preference_errors_name_the_method(name):
    with pytest.raises(ValueError, match=rf"^{OWNERS[name]} option pref_vector=\[1.0, -1.0\] is not valid"):
        build(name, pref_vector=[1.0, -1.0])
    with pytest.raises(ValueError, match=rf"^{OWNERS[name]} pref_vector has 2 entries but got K=3"):
        build(name, pref_vector=[1.0, 2.0])(torch.ones(3, 4))


@pytest.mark.parametrize("name", sorted(MODULES))
def test_one_iteration_is_a_valid_max_iter(name):
    agg = build(name, max_iter=1)
    assert torch.isfinite(agg(_jacobian(0, 20))).all()


@pytest.mark.parametrize("name", sorted(MODULES))
def test_defaults_and_options_reach_the_iterative_solver(name, monkeypatch):
    """K = 20 (above the exact and the Python paths): max_iter 100 and tol 1e-10 by default,
    the user's values otherwise."""
    seen = []
    real = MODULES[name].project_with_free_set

    def spy(gram, u, max_iter, tol, free_start=None):
        seen.append((max_iter, tol))
        return real(gram, u, max_iter, tol, free_start=free_start)

    monkeypatch.setattr(MODULES[name], "project_with_free_set", spy)
    j = _jacobian(1, 20)
    build(name)(j)
    build(name, max_iter=7, tol=1e-4)(j)
    assert seen == [(100, 1e-10), (7, 1e-4)]


@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("k, solver", [(4, "project_rows_host"), (20, "project_with_free_set")], ids=["host", "torch"])
def test_each_call_starts_from_the_previous_calls_free_sets(name, k, solver, monkeypatch):
    """First call: no start. Every later call: exactly the free sets the previous call's solve
    returned (lists on the Python path, a tensor on the torch path), for any new matrix. The
    weights are those of a cold solve (the start is a hint: tests/test_dual_cone.py)."""
    jacobians = [_jacobian(seed, k) for seed in range(3)]
    cold = [build(name, tol=1e-12)(j) for j in jacobians]
    starts, returned = [], []
    real = getattr(MODULES[name], solver)

    def spy(*args, **kwargs):
        starts.append(kwargs.get("free_start", args[4] if len(args) > 4 else None))
        out = real(*args, **kwargs)
        returned.append(out[-1])
        return out

    monkeypatch.setattr(MODULES[name], solver, spy)
    agg = build(name, tol=1e-12)
    for j, d in zip(jacobians, cold):
        torch.testing.assert_close(agg(j), d, rtol=0, atol=1e-12 * float(j.norm(dim=1).max()))
    assert len(starts) == 3 and starts[0] is None
    for start, before in zip(starts[1:], returned[:-1]):
        assert start is before


@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("k", [4, 20], ids=["host", "torch"])
def test_weights_come_back_in_the_gramians_dtype(name, k):
    j = _jacobian(2, k).float()
    assert build(name).weights_from_gramian(j @ j.T).dtype == torch.float32


@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("k", [5, 12])
@pytest.mark.parametrize("reg_eps", [0.0, 1e-2])
def test_a_batch_of_gramians_gets_each_members_own_weights(name, k, reg_eps):
    """``weights_from_gramian`` on [3, K, K] (members at scales 1, 1e3 and 1e-3: the ridge is
    reg_eps times each member's OWN trace) equals each member alone, which for K ≤ 16 goes
    through the host path (Python floats) instead of the batched torch solver: agreement to
    1e-12 relative (measured ≤ 4.5e-16)."""
    grams = torch.stack([_jacobian(s, k) @ _jacobian(s, k).T * scale for s, scale in zip(range(3), (1.0, 1e3, 1e-3))])
    batched = build(name, reg_eps=reg_eps).weights_from_gramian(grams)
    assert batched.shape == (3, k)
    for member, gram in enumerate(grams):
        alone = build(name, reg_eps=reg_eps).weights_from_gramian(gram)
        assert (batched[member] - alone).abs().max() <= 1e-12 * alone.abs().max(), member
