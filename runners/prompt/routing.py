"""Evaluating a mixture of prompts: per-prompt accuracy, the best single prompt, the oracle (the
best prompt per instance), and the accuracy of the prompt the dispatcher routes each instance to
(MosT: Li et al., ICLR 2025, arXiv:2403.04099, §6.4)."""

from __future__ import annotations

import torch


def evaluate(mixture, ids, mask, labels, chunk: int = 128):
    """Losses ``[m, N]`` and correctness ``[m, N]`` of every prompt on a split (no grad)."""
    from morl.agents.prompts.soft_prompts import per_instance_losses

    losses, correct = [], []
    with torch.no_grad():
        for s in range(0, ids.shape[0], chunk):
            logits, _ = mixture(ids[s : s + chunk], mask[s : s + chunk])
            y = labels[s : s + chunk]
            losses.append(per_instance_losses(logits, y))
            correct.append(logits.argmax(-1) == y)
    return torch.cat(losses, 1), torch.cat(correct, 1)


def split_metrics(correct) -> dict:
    """Per-prompt accuracy, the best single prompt, and the oracle (best prompt per instance)."""
    acc = correct.float().mean(1)
    return {
        "prompt_acc": acc.tolist(),
        "best_single_acc": float(acc.max()),
        "oracle_acc": float(correct.any(0).float().mean()),
    }


def fit_dispatcher(cfg, mixture, encoder, train_ids, train_losses, device):
    """The dispatcher trained on the training assignment, and the assignment targets ``[N, m]``.

    Reseeds torch (the dispatcher's initialisation); the caller restores the training RNG.
    """
    from morl.agents.prompts.dispatcher import Dispatcher, assignment_targets
    from morl.agents.prompts.soft_prompts import instance_embeddings

    torch.manual_seed(cfg.seed)
    emb = instance_embeddings(encoder, *train_ids)
    keys = mixture.prompt_embeddings()
    targets = assignment_targets(train_losses, cfg.dispatcher.target)
    disp = Dispatcher(keys.shape[1], cfg.dispatcher.hidden, keys.shape[0]).to(device)
    disp.fit(emb, keys, targets, cfg.dispatcher.steps, cfg.dispatcher.lr)
    agreement = float((disp.route(emb, keys) == targets.argmax(1)).float().mean())
    return disp, targets, agreement


def routed_metrics(mixture, encoder, disp, ids, labels, domains=None, domain_names=()) -> dict:
    """``split_metrics`` plus the routed accuracy, the route shares and (if known) routes per domain."""
    from morl.agents.prompts.soft_prompts import instance_embeddings

    _, correct = evaluate(mixture, *ids, labels)
    m = split_metrics(correct)
    route = disp.route(instance_embeddings(encoder, *ids), mixture.prompt_embeddings())
    m["routed_acc"] = float(correct.gather(0, route.unsqueeze(0)).float().mean())
    m["route_share"] = torch.bincount(route, minlength=correct.shape[0]).div(route.numel()).tolist()
    if domains is not None:
        dom = torch.tensor(domains, device=route.device)
        counts = torch.zeros(correct.shape[0], len(domain_names), device=route.device)
        counts.index_put_((route, dom), torch.ones_like(route, dtype=counts.dtype), accumulate=True)
        m["route_by_domain"] = {name: counts[:, d].tolist() for d, name in enumerate(domain_names)}
    return m
