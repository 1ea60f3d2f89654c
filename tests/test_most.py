"""MosT: Γ-weighted MGDA on the plan's support, planted clusters, MosT-E on ZDT, the curriculum, bad input."""

import pytest
import quadprog
import torch

from morl import most as M
from morl.metrics import most_metrics as MM
from morl.problems import zdt as Z


def _quadratic_clusters(gen, n=30, m=5, dim=4, spread=0.1):
    centres = torch.randn(m, dim, generator=gen, dtype=torch.float64) * 6
    owner = torch.arange(n) % m
    points = centres[owner] + spread * torch.randn(n, dim, generator=gen, dtype=torch.float64)
    return points, owner


def test_weighted_min_norm_matches_qp_on_support(gen):
    n, m, d = 8, 2, 12
    jac = torch.randn(m, n, d, generator=gen, dtype=torch.float64)
    gamma = torch.rand(n, m, generator=gen, dtype=torch.float64)
    gamma[:3, 0] = 0.0  # objectives 0..2 are not model 0's
    most = M.MosT(m, min_norm_iters=2000)
    dirs = most.directions(jac, gamma)
    for j in range(m):
        sup = (gamma[:, j] > 0).nonzero().squeeze(1)
        g = gamma[sup, j].unsqueeze(1) * jac[j, sup]
        k = g.shape[0]
        eye = torch.eye(k, dtype=torch.float64)
        lam = quadprog.solve_qp(
            (g @ g.T + 1e-12 * eye).numpy(),
            torch.zeros(k, dtype=torch.float64).numpy(),
            torch.cat([torch.ones(1, k, dtype=torch.float64), eye]).T.numpy(),
            torch.cat([torch.ones(1), torch.zeros(k)]).double().numpy(),
            meq=1,
        )[0]
        ref = torch.from_numpy(lam) @ g
        torch.testing.assert_close(dirs[j], ref, atol=1e-6, rtol=1e-5)
        off = gamma[:, j] == 0
        if bool(off.any()):
            assert float(most.lambdas[j, off].abs().max()) == 0.0


def test_descent_on_every_supported_objective(gen):
    # Lemma 2: Γ_ij ∇L_iᵀ dir_j ≥ ‖dir_j‖² on the support (dir is the direction to descend).
    jac = torch.randn(1, 6, 10, generator=gen, dtype=torch.float64)
    gamma = torch.rand(6, 1, generator=gen, dtype=torch.float64)
    d = M.MosT(1, min_norm_iters=3000).directions(jac, gamma)[0]
    inner = gamma[:, 0] * (jac[0] @ d)
    assert bool((inner >= d.dot(d) - 1e-8).all())


def test_zero_weight_objective_does_not_stall_the_model(gen):
    jac = torch.randn(1, 4, 6, generator=gen, dtype=torch.float64)
    gamma = torch.tensor([[0.3], [0.0], [0.4], [0.3]], dtype=torch.float64)
    d = M.MosT(1).directions(jac, gamma)[0]
    assert float(d.norm()) > 1e-3  # keeping objective 1 (weight 0) would give d = 0


def test_planted_clusters_are_recovered(gen):
    points, owner = _quadratic_clusters(gen)
    objectives = lambda th: 0.5 * ((th.unsqueeze(0) - points) ** 2).sum(-1)  # noqa: E731
    thetas0 = points[torch.tensor([0, 1, 2, 3, 4])] + 2 * torch.randn(5, 4, generator=gen, dtype=torch.float64)
    most = M.MosT(5, gamma_scale="code", update="code")
    thetas = M.run(objectives, thetas0, most, lr=0.5, rounds=15)
    gamma = most.gamma
    assign = gamma.argmax(1)
    # Every cluster is served by exactly one model and every model by exactly one cluster.
    for k in range(5):
        assert assign[owner == k].unique().numel() == 1
    assert assign.unique().numel() == 5
    assert float(MM.column_cosine(gamma)) == pytest.approx(0.0, abs=1e-6)
    # Each model ends in the Pareto set of its cluster (the hull of its points): inside their box.
    for j in range(5):
        mine = points[assign == j]
        assert bool((thetas[j] >= mine.amin(0) - 1e-3).all() and (thetas[j] <= mine.amax(0) + 1e-3).all())
    # Every objective has a good model (best-of-m loss ≈ the within-cluster spread).
    losses = torch.stack([objectives(t) for t in thetas]).amin(0).mean()
    assert float(losses) < 0.1


def test_most_e_mixing_matrix(gen):
    w = M.dirichlet_mixtures(2, 25, 1.0, include_original=True, generator=gen)
    assert w.shape == (27, 2)
    torch.testing.assert_close(w.sum(1), torch.ones(27))
    torch.testing.assert_close(w[:2], torch.eye(2))
    assert bool((w >= 0).all())
    # Dir(1, 1) on two objectives: the first weight is uniform on [0, 1].
    big = M.dirichlet_mixtures(2, 4000, 1.0, include_original=False, generator=gen, dtype=torch.float64)
    assert float(big[:, 0].mean()) == pytest.approx(0.5, abs=0.03)
    assert float(big[:, 0].var()) == pytest.approx(1 / 12, abs=0.01)


def _zdt_most_e(name, rounds, x0_seed=27):
    most = M.MosTE(5, 2, num_aux=25, dirichlet_shape=1.0, include_original=False, seed=0, gamma_scale="code")
    x0 = torch.rand(5, 30, generator=torch.Generator().manual_seed(x0_seed), dtype=torch.float64)
    best = []
    cb = lambda t, th, g: best.append(float(MM.hypervolume(Z.zdt(name, th), Z.REFERENCE_POINTS[name])))  # noqa: E731
    M.run(lambda x: Z.zdt(name, x), x0, most, lr=0.01, rounds=rounds, project=Z.project, callback=cb, step="sign")
    return max(best)


@pytest.mark.integration  # a long run
def test_zdt1_most_e_moves_to_the_front():
    # Paper Table 5 reports MosT 5.87 on ZDT-1 (best HV over training, as in the official code). Sign
    # steps turn last-bit rounding into other trajectories, so the best HV depends on the start and
    # on the CPU's kernels: 4.65 .. 5.87 over x0 seeds 0..9 and 27. Asserted: the floor 4.5 (start HV
    # 1.3-2.6, true front 6.0).
    assert _zdt_most_e("zdt1", 150) >= 4.5


# Whether MosT-E reaches the paper's 5.80 on average depends on the CPU's kernels (sign steps turn
# rounding into other trajectories): the mean best HV over x0 seeds 0..9 and 27 was 5.49 on one
# machine and 5.80 on another. Asserted: what holds on both.
@pytest.mark.integration  # eleven long runs
def test_zdt1_most_e_hypervolume_over_eleven_starts():
    most_e = [_zdt_most_e("zdt1", 150, seed) for seed in [*range(10), 27]]
    assert min(most_e) >= 4.5 and sum(most_e) / len(most_e) >= 5.3, most_e


@pytest.mark.integration  # ZDT-2 and ZDT-3 long runs
@pytest.mark.parametrize("name,target", [("zdt2", 6.80), ("zdt3", 5.85)])
def test_zdt23_most_e_hypervolume(name, target):
    assert _zdt_most_e(name, 150) >= target


def test_plain_most_collapses_on_two_objectives():
    # n = 2 < m = 5 with exact OT: at most n + m − 1 = 6 nonzeros, so most models serve one objective.
    most = M.MosT(5, gamma_scale="code")
    losses = torch.rand(5, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    gamma = most.assign(losses)
    assert int((gamma > 1e-6).sum()) <= 6


def test_curriculum_marginals(gen):
    cost = torch.rand(30, 5, generator=gen, dtype=torch.float64)
    for direction in ("paper", "code"):
        cur = M.CurriculumSchedule(direction, s0=1.0, decay=0.5)
        a_ls, b_ls = cur.performance_marginals(cost, 5.0)
        a, b = cur.marginals(cost, 5.0)
        assert float(a.sum()) == pytest.approx(5.0) and float(b.sum()) == pytest.approx(5.0)
        if direction == "paper":  # s = 1: performance α, uniform β
            torch.testing.assert_close(a, a_ls)
            torch.testing.assert_close(b, torch.ones(5, dtype=torch.float64))
        else:
            torch.testing.assert_close(a, torch.full((30,), 5 / 30, dtype=torch.float64))
            torch.testing.assert_close(b, b_ls)
        for _ in range(60):
            cur.step()
        a, b = cur.marginals(cost, 5.0)
        end_a = torch.full((30,), 5 / 30, dtype=torch.float64) if direction == "paper" else a_ls
        torch.testing.assert_close(a, end_a, atol=1e-9, rtol=0)
    # The plan follows the curriculum's marginals.
    most = M.MosT(5, gamma_scale="code", curriculum=M.CurriculumSchedule("paper"))
    gamma = most.assign(cost.T)
    a, b = most.curriculum.marginals(cost, 5.0)
    torch.testing.assert_close(gamma.sum(1), a, atol=1e-9, rtol=0)
    torch.testing.assert_close(gamma.sum(0), b, atol=1e-9, rtol=0)


def test_bad_input_is_loud():
    with pytest.raises(ValueError, match="gamma_scale"):
        M.MosT(3, gamma_scale="x")
    with pytest.raises(ValueError, match="losses must have shape"):
        M.MosT(3).assign(torch.rand(2, 10))
    with pytest.raises(ValueError, match="direction"):
        M.CurriculumSchedule("sideways")
    with pytest.raises(ValueError, match="call assign"):
        M.MosT(2).directions(torch.rand(2, 3, 4))
    with pytest.raises(ValueError, match="NaN"):
        M.MosT(2).assign(torch.tensor([[float("nan"), 1.0], [1.0, 1.0]]))
