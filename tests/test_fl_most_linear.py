"""The MosT server's linear step ("MosT (L)") with the paper's plan scaling.

With ``gamma_scale="paper"`` Γ has total mass 1, so each model's column of Γ sums to about 1/m,
not 1 as with the code's scaling (which the other FL tests use, and where normalising the
column is a no-op). The step is the Γ-weighted FedAvg with each model's weights normalised to
sum 1: Δθ_j = Σ_i Γ_ij Δ_ij / Σ_i Γ_ij, computed here from an identical MosT's plan.
"""

import torch

from morl.agents.federated import strategies as S
from morl.most import MosT


def test_linear_step_normalises_each_models_plan_column():
    m, n, p = 2, 6, 5
    for seed in range(5):
        gen = torch.Generator().manual_seed(seed)
        deltas = torch.randn(m, n, p, generator=gen, dtype=torch.float64)
        losses = torch.rand(m, n, generator=gen, dtype=torch.float64) + 0.5
        strat = S.MosTStrategy(MosT(m, gamma_scale="paper", solver="ipot", warm_start=False), warmup_rounds=0,
                               combine="linear")
        update = strat.aggregate(deltas, losses, torch.ones(n))
        gamma = MosT(m, gamma_scale="paper", solver="ipot", warm_start=False).assign(losses)  # [n, m]
        assert abs(float(gamma.sum()) - 1) < 1e-9 and float(gamma.sum(0).max()) < 0.9  # columns far from 1
        expect = torch.stack([(gamma[:, j, None] * deltas[j]).sum(0) / gamma[:, j].sum() for j in range(m)])
        torch.testing.assert_close(update, expect.to(update.dtype), rtol=1e-10, atol=1e-12)
