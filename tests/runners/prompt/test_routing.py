"""Evaluating a mixture of prompts (``morl prompt``): per-prompt accuracy, the best single prompt,
the oracle, and the accuracy, shares and domains of the prompts the dispatcher routes to, on a
mixture whose every answer is known in advance."""

from __future__ import annotations

import math
import types

import pytest
import torch

import morl.agents.prompts.soft_prompts as soft_prompts
from morl.runners.prompt.routing import evaluate, fit_dispatcher, routed_metrics, split_metrics

# 5 instances of one token each; prompt 0 always answers class 0, prompt 1 answers the token
IDS = torch.tensor([[0], [1], [1], [0], [1]])
MASK = torch.ones_like(IDS)
LABELS = torch.tensor([0, 1, 1, 0, 0])
# correct: prompt 0 where the label is 0, prompt 1 where the token is the label
CORRECT = [[True, False, False, True, True], [True, True, True, True, False]]


class FakeMixture:
    """Logit 2 for the class a prompt answers, 0 for the other; remembers its batch sizes."""

    def __init__(self):
        self.batches = []

    def __call__(self, ids, mask):
        self.batches.append(ids.shape[0])
        answers = torch.stack([torch.zeros_like(ids[:, 0]), ids[:, 0]])  # [m=2, B]
        logits = 2.0 * torch.nn.functional.one_hot(answers, 2).float()
        return logits, None

    def prompt_embeddings(self):
        return torch.eye(2)


def test_evaluate_gives_every_prompts_losses_and_correctness_in_instance_order():
    mixture = FakeMixture()
    losses, correct = evaluate(mixture, IDS, MASK, LABELS, chunk=2)
    assert mixture.batches == [2, 2, 1]
    assert correct.tolist() == CORRECT
    right, wrong = math.log(1 + math.exp(-2)), math.log(1 + math.exp(2))  # cross-entropy of logits (2, 0)
    expected = [[right, wrong, wrong, right, right], [right, right, right, right, wrong]]
    assert [row == pytest.approx(want) for row, want in zip(losses.tolist(), expected)] == [True, True]


def test_split_metrics_per_prompt_best_single_and_oracle():
    m = split_metrics(torch.tensor(CORRECT))
    assert m["prompt_acc"] == pytest.approx([0.6, 0.8])
    assert m["best_single_acc"] == pytest.approx(0.8)
    assert m["oracle_acc"] == 1.0  # every instance has a prompt that answers it
    assert split_metrics(torch.tensor([[True, False], [True, False]]))["oracle_acc"] == 0.5


def test_routed_metrics_score_the_prompt_each_instance_is_sent_to(monkeypatch):
    monkeypatch.setattr(soft_prompts, "instance_embeddings", lambda encoder, ids, mask: ids.float())
    disp = types.SimpleNamespace(route=lambda emb, keys: torch.tensor([1, 0, 1, 0, 1]))
    m = routed_metrics(FakeMixture(), None, disp, (IDS, MASK), LABELS, domains=[0, 0, 1, 1, 2],
                       domain_names=("books", "dvd", "kitchen"))  # fmt: skip
    # routed answers: prompt 1 right, prompt 0 wrong, prompt 1 right, prompt 0 right, prompt 1 wrong
    assert m["routed_acc"] == pytest.approx(0.6)
    assert m["route_share"] == pytest.approx([0.4, 0.6])
    # per domain, how many of its instances each prompt gets: prompt 0 gets instances 1 (books) and
    # 3 (dvd); prompt 1 gets 0 (books), 2 (dvd) and 4 (kitchen)
    assert m["route_by_domain"] == {"books": [1.0, 1.0], "dvd": [1.0, 1.0], "kitchen": [0.0, 1.0]}
    assert m["oracle_acc"] == 1.0 and m["prompt_acc"] == pytest.approx([0.6, 0.8])
    assert "route_by_domain" not in routed_metrics(FakeMixture(), None, disp, (IDS, MASK), LABELS)


def test_a_prompt_no_instance_is_routed_to_has_a_zero_share(monkeypatch):
    monkeypatch.setattr(soft_prompts, "instance_embeddings", lambda encoder, ids, mask: ids.float())
    disp = types.SimpleNamespace(route=lambda emb, keys: torch.zeros(5, dtype=torch.long))
    m = routed_metrics(FakeMixture(), None, disp, (IDS, MASK), LABELS)
    assert m["route_share"] == [1.0, 0.0] and m["routed_acc"] == pytest.approx(0.6)  # prompt 0 alone


def test_the_dispatcher_learns_the_argmin_assignment_and_is_reseeded(monkeypatch):
    emb = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.1, 0.0], [0.1, 1.0, 0.0]])
    monkeypatch.setattr(soft_prompts, "instance_embeddings", lambda encoder, ids, mask: emb)
    mixture = types.SimpleNamespace(prompt_embeddings=lambda: torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]))
    losses = torch.tensor([[0.1, 2.0, 0.2, 3.0], [1.0, 0.5, 1.5, 0.1]])  # [m, N]: prompt 0 best on 0 and 2
    cfg = types.SimpleNamespace(seed=3, dispatcher=types.SimpleNamespace(target="argmin", hidden=8, steps=60, lr=0.05))
    disp, targets, agreement = fit_dispatcher(cfg, mixture, None, (None, None), losses, "cpu")
    assert targets.tolist() == [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]
    assert disp.route(emb, mixture.prompt_embeddings()).tolist() == [0, 1, 0, 1] and agreement == 1.0
    torch.manual_seed(99)  # whatever the RNG was before: the fit starts from cfg.seed
    again, _, _ = fit_dispatcher(cfg, mixture, None, (None, None), losses, "cpu")
    assert all(torch.equal(a, b) for a, b in zip(disp.parameters(), again.parameters()))
