"""One MT-SAC update moves nothing between host and device, for every aggregator.

This project has no GPU; these tests stand in for one. An update is the call the RL runner
makes per gradient step, ``MTSAC.update(batch, step, diagnostics=False)`` (``runners/rl``
asks for diagnostics once per log interval only), with the critic losses aggregated too
(``aggregate_critic``), on K = 3 tasks and small networks (and K = 10, MT10's count, for the
methods whose solvers change path above K = 6); a few more configurations take
the other branches (option variants of some methods, ``aggregate: actor_trunk`` with per-task
heads, the reproduction options: shared critic and temperature, both aggregated). Two runs
each:

* **meta**: agent and batch on ``meta`` tensors (shapes without data, so the code takes its
  non-CPU branches as on a GPU). Reading any value raises there, from Python
  (``.item()``, ``bool(t)``, ...) or inside an operator (``nonzero``, boolean-mask indexing,
  ``masked_select``, which sync on a GPU). :func:`host_traffic.forbid_host_traffic` makes every
  move of data onto the device raise too (``.to``/``copy_`` from the CPU, ``torch.tensor`` /
  ``as_tensor`` from Python data). Fused Adam, what the agent uses on a GPU, has a meta kernel
  but refuses meta parameters by name; that one check is patched out.
* **cpu, strict**: the same update on real numbers with every Python-level value read and
  tensor-from-Python-data raising even on the CPU, except in :data:`CPU_ONLY_READS`, functions
  that read only when their input is on the CPU (where a read costs nothing), which the meta
  run proves are skipped on other devices. It checks the numbers' path (the meta run never
  sees a NaN or a data-dependent branch) and that the update still moves the actor.

Both run two updates from a fresh agent, so the first call's lazy state (aggregator buffers,
Adam's moments) is covered. Options whose fixed values must reach the device
(:data:`FIRST_CALL_COPIES`) copy them once, at the first call, and reuse them afterwards: for
those the first update runs unguarded.

Not covered: ``diagnostics=True`` (the gradient-conflict statistics, once per log interval)
is not held to this; reads a C++ operator makes on a CPU tensor only; draws from a device
generator (meta has none: the draws run without one); Adam without the fused kernel (the
agent's fallback for a device/dtype lacking it, ``_step_or_restore``, whose restore copies
Adam's host-side step counters); the CUDA caching allocator and kernels themselves; ``act()``
(its actions go to the host by design); the runner around the update (replay sampling,
logging, evaluation).
"""

from __future__ import annotations

import pytest
import torch
import torch.optim.adam as torch_adam
from host_traffic import HostTraffic, forbid_host_traffic

import morl
from morl.agents.rl.mtsac import MTSAC, MTSACConfig
from morl.aggregators import available

T, OBS, ACT, B = 3, 5, 2, 8
UPDATES = 2  # the first (lazy state) and one in the steady state

#: Reads made only for CPU input: the early exits behind ``morl.host_reads.reads_are_free``.
CPU_ONLY_READS = frozenset(
    {
        ("morl/solvers/min_norm.py", "wolfe_steps"),
        ("morl/aggregators/cagrad.py", "_dropped_negatives_start"),
        ("morl/aggregators/cagrad.py", "_active_set_steps"),
        ("morl/solvers/dual_cone.py", "active_set_steps"),
        ("morl/solvers/alpha_fair.py", "alpha_fair_solve"),
        ("morl/solvers/priority_qp.py", "solve_masked"),
    }
)

#: (name, options): values fixed at construction that the first call copies to the device
#: and caches per device and dtype.
FIRST_CALL_COPIES = [
    ("epo_al", {"preference": [1.0, 2.0, 3.0]}),
    ("moco", {"y_radius": [1.0, 2.0, 3.0]}),
]

#: (name, options) with other code paths than the defaults (no copies).
OTHER_PATHS = [
    ("moco", {"preset": "rl"}),
    ("moco", {"base": "pcgrad"}),
    ("moco", {"lambda_map": "exact"}),
    ("cr_mogm", {"base": "cagrad"}),
    ("nash_mtl", {"update_weights_every": 2}),
    ("rlw", {"distribution": "bernoulli"}),
    ("stch", {"warmup": 2}),
    ("krum", {"score": "distance"}),
    ("trimmed_mean", {"trim": 1}),
]


def _agent(name: str, options: dict, device: str, tasks: int = T, **cfg) -> MTSAC:
    config = MTSACConfig(hidden_sizes=[16, 16], batch_size=tasks * B, buffer_capacity=100, aggregate_critic=True, **cfg)
    return MTSAC(OBS + tasks, ACT, tasks, config, morl.build(name, **options), device, 0)


def _batch(device: str, t: int = T) -> dict[str, torch.Tensor]:
    if device == "meta":
        shapes = {
            "obs": (t, B, OBS + t),
            "action": (t, B, ACT),
            "reward": (t, B),
            "next_obs": (t, B, OBS + t),
            "terminated": (t, B),
        }
        return {k: torch.empty(s, device="meta") for k, s in shapes.items()}
    g = torch.Generator().manual_seed(0)
    obs = torch.randn(t, B, OBS + t, generator=g)
    obs[..., OBS:] = torch.eye(t).unsqueeze(1)
    return {
        "obs": obs,
        "action": torch.rand(t, B, ACT, generator=g) * 2 - 1,
        "reward": torch.randn(t, B, generator=g),
        "next_obs": obs.clone(),
        "terminated": torch.zeros(t, B),
    }


def _updates(agent: MTSAC, device: str, guard_first: bool = True) -> dict[str, torch.Tensor]:
    batch = _batch(device, agent.num_tasks)
    with pytest.MonkeyPatch.context() as patch:
        # fused Adam's meta kernel exists; only its device whitelist names no meta
        patch.setattr(torch_adam, "_device_dtype_check_for_fused", lambda p: None)
        if not guard_first:
            agent.update(batch, 0, diagnostics=False)
        with forbid_host_traffic(strict_cpu=device == "cpu", allow=CPU_ONLY_READS):
            for step in range(0 if guard_first else 1, UPDATES):
                out = agent.update(batch, step, diagnostics=False)
    return out


def _check_ran(agent: MTSAC, out: dict, device: str, before: list[torch.Tensor]) -> None:
    assert all(v.device.type == device for v in out.values())
    assert out["critic_loss"].shape == (agent.num_tasks,) and out["actor_loss"].shape == (agent.num_tasks,)
    if device == "cpu":  # real numbers: the guarded updates trained the actor
        after = [p.detach() for p in agent.actor.parameters()]
        assert all(bool(torch.isfinite(p).all()) for p in after)
        assert max(float((a - b).abs().max()) for a, b in zip(after, before)) > 0


@pytest.mark.parametrize("device", ["meta", "cpu"])
@pytest.mark.parametrize("name", available())
def test_update_moves_nothing(name, device):
    agent = _agent(name, {}, device)
    before = [p.detach().clone() for p in agent.actor.parameters()]
    _check_ran(agent, _updates(agent, device), device, before)


@pytest.mark.parametrize("device", ["meta", "cpu"])
@pytest.mark.parametrize("name, options", OTHER_PATHS, ids=[f"{n}-{o}" for n, o in OTHER_PATHS])
def test_other_option_paths_move_nothing(name, options, device):
    agent = _agent(name, options, device)
    before = [p.detach().clone() for p in agent.actor.parameters()]
    _check_ran(agent, _updates(agent, device), device, before)


@pytest.mark.parametrize("device", ["meta", "cpu"])
@pytest.mark.parametrize("name, options", FIRST_CALL_COPIES, ids=[f"{n}-{o}" for n, o in FIRST_CALL_COPIES])
def test_fixed_options_are_copied_once(name, options, device):
    if device == "meta":  # the copy this test is about happens, at the first call
        with pytest.raises(HostTraffic):
            _updates(_agent(name, options, device), device)
    agent = _agent(name, options, device)
    before = [p.detach().clone() for p in agent.actor.parameters()]
    _check_ran(agent, _updates(agent, device, guard_first=False), device, before)


@pytest.mark.parametrize("device", ["meta", "cpu"])
@pytest.mark.parametrize("name", ["mgda", "cagrad", "upgrad", "dualproj", "smg"])
def test_mt10_sized_update_moves_nothing(name, device):
    # K = 10 (MT10): Wolfe's steps, CAGrad's enumeration, UPGrad's torch rounds at MT10's size
    # a few solver rounds: the reads happen (or not) in every round alike
    agent = _agent(name, {"max_iter": 8} if name in ("mgda", "smg", "cagrad") else {}, device, tasks=10)
    before = [p.detach().clone() for p in agent.actor.parameters()]
    _check_ran(agent, _updates(agent, device), device, before)


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_iterative_cagrad_update_moves_nothing(device):
    # K = 12: CAGrad's iterative path (the dropped-negatives start, the min-norm candidate for
    # c >= 1 aside, active-set steps), whose rounds all run off the CPU
    agent = _agent("cagrad", {"max_iter": 8}, device, tasks=12)
    before = [p.detach().clone() for p in agent.actor.parameters()]
    _check_ran(agent, _updates(agent, device), device, before)


@pytest.mark.parametrize("device", ["meta", "cpu"])
@pytest.mark.parametrize("name", ["mean", "upgrad"])
def test_trunk_aggregation_moves_nothing(name, device):
    # aggregate="actor_trunk" with per-task heads: the column split and the heads' mean gradient
    agent = _agent(name, {}, device, aggregate="actor_trunk", multi_head=True)
    before = [p.detach().clone() for p in agent.actor.parameters()]
    _check_ran(agent, _updates(agent, device), device, before)


@pytest.mark.parametrize("device", ["meta", "cpu"])
@pytest.mark.parametrize("name", ["famo", "cagrad"])
def test_reproduction_options_move_nothing(name, device):
    # the literature's variant (docs/mtsac.md): one shared critic and temperature, both aggregated
    agent = _agent(
        name,
        {},
        device,
        critic="shared",
        temperature="shared",
        aggregate_temperature=True,
        task_input="none",
        log_prob_clamp=1e-6,
        init="xavier",
    )
    before = [p.detach().clone() for p in agent.actor.parameters()]
    _check_ran(agent, _updates(agent, device), device, before)


# -- the guard itself: each transfer it claims to catch raises ---------------------------------
def _meta():
    return torch.zeros(2, device="meta")


TRANSFERS = {
    "item": lambda: torch.ones(()).item(),
    "tolist": lambda: torch.ones(2).tolist(),
    "cpu": lambda: torch.ones(2).cpu(),
    "numpy": lambda: torch.ones(2).numpy(),
    "bool": lambda: bool(torch.ones(())),
    "float": lambda: float(torch.ones(())),
    "int": lambda: int(torch.ones(())),
    "index": lambda: [0, 1][torch.ones((), dtype=torch.int64)],
    "to device": lambda: torch.ones(2).to("meta"),
    "to host": lambda: _meta().to("cpu"),
    "to tensor's device": lambda: torch.ones(2).to(_meta()),
    "copy_ in": lambda: _meta().copy_(torch.ones(2)),
    "tensor": lambda: torch.tensor([1.0], device="meta"),
    "as_tensor": lambda: torch.as_tensor([1.0], device="meta"),
    "new_tensor": lambda: _meta().new_tensor([1.0]),
    "tensor on cpu (strict)": lambda: torch.tensor([1.0]),
}


@pytest.mark.parametrize("what", list(TRANSFERS))
def test_guard_catches(what):
    with forbid_host_traffic(strict_cpu=True), pytest.raises(HostTraffic):
        TRANSFERS[what]()


def _allowed_reader(x):
    return float(x)


def test_guard_lets_through_allowed_cpu_reads_and_on_device_work():
    allow = frozenset({("tests/aggregators/test_update_no_sync.py", "_allowed_reader")})
    with forbid_host_traffic(strict_cpu=True, allow=allow):
        assert _allowed_reader(torch.full((), 2.0)) == 2.0
        x = torch.ones(3, device="meta")
        y = (x * 2.0).to(torch.float64).to("meta")  # dtype change and same-device moves are no transfer
        torch.full((3,), 0.5, device="meta").copy_(y)
    with forbid_host_traffic(), pytest.raises(HostTraffic):
        float(torch.ones((), device="meta"))
    with forbid_host_traffic():
        assert float(torch.ones(())) == 1.0  # not strict: CPU reads are no synchronisation
