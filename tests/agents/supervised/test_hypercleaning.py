"""Data hyper-cleaning with FORUM (arXiv:2401.09257 §5): it beats plain training on noisy labels."""

from __future__ import annotations

import pytest
import torch


# -- data hyper-cleaning --------------------------------------------------------------------------
@pytest.mark.integration  # a learning check
def test_hypercleaning_beats_plain_training_on_noisy_labels():
    from morl.agents.supervised.hypercleaning import HyperCleaner, evaluate, train_plain
    from morl.envs.data.hypercleaning import make_hypercleaning_data

    data = make_hypercleaning_data(m=2, noise=0.5, seed=0)
    assert abs(torch.cat(data.clean).double().mean().item() - 0.5) < 0.01
    cleaner = HyperCleaner(data, hidden=(64,), inner_steps=8, alpha_lr=100.0, seed=0)
    for _ in range(200):
        cleaner.step()
    forum_acc = evaluate(cleaner.model, data.test)["accuracy"].mean().item()
    # The baseline gets more steps and the best of 15 val-2 checkpoints; FORUM gets its last iterate.
    _, plain = train_plain(data, steps=300, hidden=(64,), eval_every=20, seed=0)
    weights = cleaner.weight_stats()
    assert weights["weight_clean"] > weights["weight_corrupted"] + 0.1
    assert forum_acc > plain["accuracy"].mean().item() + 2.0, (forum_acc, plain["accuracy"])
