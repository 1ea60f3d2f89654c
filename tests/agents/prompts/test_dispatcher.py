"""The dispatcher learns to route clustered instances to their prompt."""

import torch

from morl.agents.prompts.dispatcher import Dispatcher, assignment_targets


def test_dispatcher_learns_to_route_clustered_instances():
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(3, 16, generator=g) * 3
    owner = torch.randint(0, 3, (300,), generator=g)
    x = centres[owner] + torch.randn(300, 16, generator=g)
    keys = torch.randn(3, 16, generator=g)
    # costs: each instance is cheap on its own cluster's prompt; targets come from the OT plan
    losses = 1.0 + torch.rand(3, 300, generator=g)
    losses[owner, torch.arange(300)] = 0.1
    targets = assignment_targets(losses, "ot")
    assert (targets.argmax(1) == owner).float().mean() > 0.95
    torch.manual_seed(0)
    disp = Dispatcher(16, 32, 3)
    disp.fit(x[:200], keys, targets[:200], steps=200, lr=0.02)
    assert (disp.route(x[200:], keys) == owner[200:]).float().mean() > 0.95
