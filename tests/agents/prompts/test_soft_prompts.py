"""Soft prompts on a frozen encoder: batched forward and the head Gramian against autograd."""

import pytest
import torch

from morl.agents.prompts.encoder import tokenize
from morl.agents.prompts.soft_prompts import PromptMixture, head_gramian, per_instance_losses


def test_batched_forward_equals_one_prompt_at_a_time(tiny):
    enc, tok = tiny
    mix = PromptMixture(enc, 3, 4, 2, torch.Generator().manual_seed(0))
    ids, mask = tokenize(tok, ["the queue was long.", "honestly, the coffee is hot today, i think."], 32)
    logits, feats = mix(ids, mask)
    for j in range(3):
        one = PromptMixture(enc, 1, 4, 2)
        with torch.no_grad():
            one.prompts.copy_(mix.prompts[j : j + 1])
            one.head_weight.copy_(mix.head_weight[j : j + 1])
            one.head_bias.copy_(mix.head_bias[j : j + 1])
        lj, _ = one(ids, mask)
        torch.testing.assert_close(lj[0], logits[j], rtol=1e-5, atol=1e-5)
    assert feats.shape == (3, 2, enc.config.hidden_size)


@pytest.mark.parametrize("shared", [False, True])
def test_head_gramian_matches_autograd(tiny, shared):
    enc, tok = tiny
    mix = PromptMixture(enc, 2, 3, 3, torch.Generator().manual_seed(1), shared_head=shared)
    assert mix.head_weight.shape[0] == (1 if shared else 2)
    ids, mask = tokenize(tok, [f"text {w} here" for w in ("one", "two", "three", "four", "five")], 16)
    y = torch.tensor([0, 1, 2, 1, 0])
    logits, feats = mix(ids, mask)
    losses = per_instance_losses(logits, y)
    gram = head_gramian(feats, logits, y)
    for j in range(2):
        rows = []
        for i in range(5):
            gw, gb = torch.autograd.grad(losses[j, i], [mix.head_weight, mix.head_bias], retain_graph=True)
            h = 0 if shared else j
            rows.append(torch.cat([gw[h].flatten(), gb[h]]))
        jac = torch.stack(rows)
        torch.testing.assert_close(gram[j], jac @ jac.T, rtol=1e-4, atol=1e-6)
