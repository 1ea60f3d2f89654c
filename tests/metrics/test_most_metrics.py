"""MosT's metrics: hypervolume and its tails, prediction diversity."""

import pytest
import torch

from morl.metrics import most_metrics as MM
from morl.problems import zdt as Z


def test_hypervolume_and_tail_means_equal_hand_values():
    ref = (3.0, 3.0)
    assert float(MM.hypervolume(torch.tensor([[1.0, 2.0]]), ref)) == pytest.approx(2.0)
    two = torch.tensor([[1.0, 2.0], [2.0, 1.0]])
    assert float(MM.hypervolume(two, ref)) == pytest.approx(3.0)
    assert float(MM.hypervolume(torch.cat([two, torch.tensor([[2.5, 2.5]])]), ref)) == pytest.approx(3.0)
    cube = torch.tensor([[1.0, 1.0, 1.0], [0.0, 2.0, 2.0]])
    assert float(MM.hypervolume(cube, (3.0, 3.0, 3.0))) == pytest.approx(8 + 3 - 2)
    # The continuous ZDT-1 front bounds any 5-point set (r1·r2 − ∫ f2*(f1) df1 with the code's reference point).
    front = Z.pareto_front("zdt1", 2000)
    assert float(MM.hypervolume(front, Z.REFERENCE_POINTS["zdt1"])) == pytest.approx(5.998, abs=0.01)
    t = MM.tail_means(torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]))
    assert float(t["worst20"]) == pytest.approx(0.15) and float(t["mean"]) == pytest.approx(0.55)
    val = torch.tensor([[0.9, 0.1], [0.2, 0.8]])
    test = torch.tensor([[0.7, 0.3], [0.1, 0.6]])
    torch.testing.assert_close(MM.picked_accuracy(test, val), torch.tensor([0.7, 0.6]))


def test_identical_models_have_zero_prediction_diversity():
    p = torch.softmax(torch.randn(3, 20, 4, generator=torch.Generator().manual_seed(0)), -1)
    same = p[:1].expand(3, -1, -1)
    assert float(MM.prediction_diversity(same)) == pytest.approx(0.0, abs=1e-7)
    assert float(MM.prediction_diversity(p)) > 0.1
