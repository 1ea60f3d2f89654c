"""Pareto fronts and their quality indicators as multi-objective RL scores them. Pure torch, float64.

MORL maximises: a point is a policy's vector return ``[M]``, and ``a`` dominates ``b`` when
``a >= b`` everywhere and ``a > b`` somewhere. ``maximize=False`` flips every comparison (MosT's
losses use it). The definitions follow MORL-Baselines' ``common/performance_indicators.py`` and
``common/pareto.py`` (docs/mo_metrics.md has the formulas and the papers):

* :func:`pareto_filter` — the non-dominated points (duplicates kept once).
* :func:`hypervolume` — the volume dominated by the points and bounded by ``ref_point``; exact
  (2-D sweep; slicing along the last objective above), Zitzler & Thiele 1999.
* :func:`expected_utility` — EUM, the mean over preferences of the best linear utility,
  Zintgraf et al. 2015; :func:`maximum_utility_loss` — MUL, the largest utility lost against a
  reference front over the same preferences.
* :func:`sparsity` — PGMORL's mean squared gap between consecutive points, objective by objective.
* :func:`equally_spaced_weights` — MORL-Baselines' preference set (Riesz s-energy, as pymoo makes it).
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Sequence
from pathlib import Path

import torch

WEIGHTS_FILE = Path(__file__).with_name("equally_spaced_weights.csv")


def _points(points, what: str = "points") -> torch.Tensor:
    p = torch.as_tensor(points, dtype=torch.float64)
    if p.dim() != 2:
        raise ValueError(f"{what} must have shape [n, M] (one row per point), got {tuple(p.shape)}")
    return p


def pareto_mask(points, *, maximize: bool = True, remove_duplicates: bool = True) -> torch.Tensor:
    """Boolean ``[n]``: True where no other point dominates; of equal points only the first stays
    True unless ``remove_duplicates=False``."""
    p = _points(points)
    if not maximize:
        p = -p
    ge = (p.unsqueeze(0) >= p.unsqueeze(1)).all(-1)  # ge[i, j]: p_j >= p_i everywhere
    gt = (p.unsqueeze(0) > p.unsqueeze(1)).any(-1)
    keep = ~(ge & gt).any(1)
    if remove_duplicates:
        equal = (p.unsqueeze(0) == p.unsqueeze(1)).all(-1)
        keep &= ~torch.tril(equal, diagonal=-1).any(1)  # an equal point earlier in the list
    return keep


def pareto_filter(points, *, maximize: bool = True, remove_duplicates: bool = True) -> torch.Tensor:
    """The non-dominated rows of ``points [n, M]``, in their original order."""
    p = _points(points)
    return p[pareto_mask(p, maximize=maximize, remove_duplicates=remove_duplicates)]


def hypervolume(points, ref_point: Sequence[float] | torch.Tensor, *, maximize: bool = True) -> torch.Tensor:
    """Exact volume of ``{q : ∃p ∈ points, p ≥ q ≥ ref_point}`` (``≤`` when ``maximize=False``).

    Points not strictly better than ``ref_point`` in every objective add nothing; an empty set has
    volume 0. 2-D is a sweep over the points sorted by the first objective; in 3-D and above the
    set is sliced along the last objective into lower-dimensional volumes (fine for fronts of a
    few hundred points).
    """
    p = _points(points)
    ref = torch.as_tensor(ref_point, dtype=torch.float64, device=p.device)
    if ref.shape != (p.shape[1],):
        raise ValueError(f"ref_point must have {p.shape[1]} coordinates (one per objective), got {tuple(ref.shape)}")
    if maximize:  # the sweep below minimises
        p, ref = -p, -ref
    return _hypervolume_min(p[(p < ref).all(-1)], ref)


def _hypervolume_min(p: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    if p.shape[0] == 0:
        return torch.zeros((), dtype=torch.float64, device=p.device)
    p = p[pareto_mask(p, maximize=False)]
    if p.shape[1] == 1:
        return ref[0] - p[:, 0].min()
    if p.shape[1] == 2:
        p = p[torch.argsort(p[:, 0])]
        # sorted by f1 ascending, a non-dominated set has f2 descending
        widths = torch.cat([p[1:, 0], ref[:1]]) - p[:, 0]
        return (widths * (ref[1] - p[:, 1])).sum()
    p = p[torch.argsort(p[:, -1])]
    levels = torch.cat([p[:, -1], ref[-1:]])
    total = torch.zeros((), dtype=torch.float64, device=p.device)
    for k in range(p.shape[0]):
        height = levels[k + 1] - levels[k]
        if height > 0:
            total = total + height * _hypervolume_min(p[: k + 1, :-1], ref[:-1])
    return total


def _best_utilities(front, weights) -> torch.Tensor:
    """``max_{v ∈ front} w·v`` for every row ``w`` of ``weights``: ``[W]``."""
    f = _points(front, "front")
    w = _points(weights, "weights").to(f.device)
    if f.shape[0] == 0:
        raise ValueError("the front is empty; utilities need at least one point")
    if w.shape[1] != f.shape[1]:
        raise ValueError(f"weights have {w.shape[1]} objectives, the front has {f.shape[1]}")
    return (w @ f.T).max(1).values


def expected_utility(front, weights) -> torch.Tensor:
    """EUM: ``(1/W) Σ_w max_{v ∈ front} w·v`` over the preferences ``weights [W, M]``."""
    return _best_utilities(front, weights).mean()


def maximum_utility_loss(front, reference_front, weights) -> torch.Tensor:
    """MUL: ``max_w [max_{v ∈ reference} w·v − max_{v ∈ front} w·v]`` over ``weights [W, M]``."""
    return (_best_utilities(reference_front, weights) - _best_utilities(front, weights)).max()


def sparsity(front) -> torch.Tensor:
    """PGMORL's sparsity ``(1/(n−1)) Σ_j Σ_i (P̃_j(i+1) − P̃_j(i))²``, ``P̃_j`` objective ``j`` sorted;
    0 for fewer than two points. Lower is denser; pass the Pareto-filtered front."""
    f = _points(front, "front")
    if f.shape[0] < 2:
        return torch.zeros((), dtype=torch.float64, device=f.device)
    gaps = torch.sort(f, dim=0).values.diff(dim=0)
    return gaps.square().sum() / (f.shape[0] - 1)


@functools.lru_cache(maxsize=1)
def _weight_table() -> dict[tuple[int, int], list[list[float]]]:
    table: dict[tuple[int, int], list[list[float]]] = {}
    with open(WEIGHTS_FILE, newline="") as fh:
        for row in csv.DictReader(fh):
            m, n = int(row["m"]), int(row["n"])
            table.setdefault((m, n), []).append([float(row[f"w{j + 1}"]) for j in range(m)])
    return table


def equally_spaced_weights(m: int, n: int = 50) -> torch.Tensor:
    """MORL-Baselines' ``equally_spaced_weights(m, n)``: ``n`` preferences ``[n, m]`` on the simplex.

    They are pymoo's Riesz s-energy directions (``get_reference_directions("energy", m, n)``;
    Blank et al. 2021): the ``n`` points of the simplex minimising ``Σ_{i<j} 1/‖w_i − w_j‖^{2m}``,
    corners included. The optimisation takes pymoo seconds, so the sets MORL evaluations use ship
    with morl (``equally_spaced_weights.csv``, made by ``tools/mo_weights.py``); the tests compare
    them with pymoo's.
    """
    table = _weight_table()
    if (m, n) not in table:
        sizes = ", ".join(f"(m={a}, n={b})" for a, b in sorted(table))
        raise ValueError(f"no equally spaced weight set for m={m}, n={n}; available: {sizes}")
    return torch.tensor(table[(m, n)], dtype=torch.float64)


__all__ = [
    "equally_spaced_weights",
    "expected_utility",
    "hypervolume",
    "maximum_utility_loss",
    "pareto_filter",
    "pareto_mask",
    "sparsity",
]
