"""The two-objective toy of CAGrad and MoCo's Figs. 1-3 (morl/problems/cagrad_toy.py): the
closed-form Jacobian against autograd, torch's kink convention, the Pareto segment and the
log-wells by hand, and what noise reaches each method in ``simulate``."""

import torch

from morl.problems import cagrad_toy as toy


def test_closed_form_jacobian_equals_autograd(gen):
    x = torch.cat(
        [
            torch.rand(3000, 2, generator=gen, dtype=torch.float64) * 24 - 12,
            torch.tensor([[0.0, 0.0], [-5.0, 0.0], [5.0, 0.0], [-7.0, 20.0], [5.0, 20.0]], dtype=torch.float64),
        ]
    )
    for scale in (1.0, 2.0):
        f, jac = toy.jacobian(x, scale)
        f_ref, jac_ref = toy.jacobian_autograd(x, scale)
        torch.testing.assert_close(f, f_ref)
        torch.testing.assert_close(jac, jac_ref, rtol=1e-9, atol=1e-9)


def test_kink_convention_at_the_origin():
    """torch's clamp passes the gradient at equality: ∇f(0,0) = (0, 10.856) for both."""
    _, jac = toy.jacobian(torch.zeros(2, dtype=torch.float64))
    torch.testing.assert_close(
        jac, torch.tensor([[0.0, 10.8564], [0.0, 10.8564]], dtype=torch.float64), atol=1e-4, rtol=0
    )
    _, jac2 = toy.jacobian(torch.zeros(2, dtype=torch.float64), f1_scale=2.0)
    assert abs(jac2[0, 1].item() - 2 * 10.8564) < 1e-3


def test_front_is_pareto_stationary_and_wells_are_dominated():
    x1 = torch.linspace(-6.5, 6.5, 9, dtype=torch.float64)
    on_front = torch.stack([x1, torch.full_like(x1, toy.PARETO_X2)], -1)
    assert (toy.mgda_norm(on_front) < 0.02).all()
    assert (toy.dominated_margin(toy.objectives(on_front)) <= 1e-9).all()
    wells = torch.tensor([[-5.0, 8.0], [5.0, 9.0]], dtype=torch.float64)  # where SMG stalls
    assert (toy.dominated_margin(toy.objectives(wells)) > 10).all()


def test_moco_and_smg_get_noisy_jacobians_mgda_exact(monkeypatch):
    """What reaches each method is J + N(0, σ²) per entry (SMG, MoCo) or J itself (MGDA): the
    toy's claim is about noisy gradients, and with exact ones MoCo trivially succeeds."""
    exact, fed = [], {"moco": [], "smg_or_mgda": []}
    jacobian, per_point, min_norm = toy.jacobian, toy.PerPoint.__call__, toy._min_norm
    monkeypatch.setattr(toy, "jacobian", lambda x, s=1.0: (lambda out: (exact.append(out[1]), out)[1])(jacobian(x, s)))
    monkeypatch.setattr(toy.PerPoint, "__call__", lambda self, g: (fed["moco"].append(g), per_point(self, g))[1])
    monkeypatch.setattr(toy, "_min_norm", lambda g: (fed["smg_or_mgda"].append(g), min_norm(g))[1])
    n, sigma = len(toy.INITS_ALL), 0.7
    toy.simulate(toy.INITS_ALL, ["mgda", "smg", "moco"], toy.ToyConfig(iters=200, lr0=0.03, sigma=sigma, seed=3))
    jac = torch.stack(exact)  # [200, 3n, 2, 2]
    mgda, smg = torch.stack(fed["smg_or_mgda"]).view(200, 2, n, 2, 2).unbind(1)
    moco = torch.stack(fed["moco"])
    assert torch.equal(mgda, jac[:, :n])
    for name, got, rows in (("smg", smg, slice(n, 2 * n)), ("moco", moco, slice(2 * n, 3 * n))):
        noise = (got - jac[:, rows]).flatten()  # 4800 draws
        # N(0, 0.49): the sample mean is within 4 sd (0.04) and the sample sd within 4.5% of 0.7
        assert abs(noise.mean().item()) < 4 * sigma / noise.numel() ** 0.5, name
        assert abs(noise.std().item() / sigma - 1) < 0.045, name
    assert not torch.equal(smg, moco - jac[:, 2 * n :] + jac[:, n : 2 * n])  # independent draws per point
