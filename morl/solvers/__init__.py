"""Small pure-torch solvers on the simplex used by the aggregators (batched, no host sync)."""

from morl.solvers.gramian import gram_scale, gramian, normalized_gramian
from morl.solvers.min_norm import min_norm, min_norm_2, min_norm_gap, min_norm_solve
from morl.solvers.simplex import fw_gap, project_simplex, softmax_map

__all__ = [
    "project_simplex",
    "softmax_map",
    "fw_gap",
    "min_norm",
    "min_norm_solve",
    "min_norm_2",
    "min_norm_gap",
    "gram_scale",
    "gramian",
    "normalized_gramian",
]
