"""Small pure-torch solvers on the simplex used by the aggregators (batched, no host sync)."""

from morl.solvers.gramian import gram_scale, gramian, normalized_gramian
from morl.solvers.min_norm import min_norm, min_norm_2, min_norm_gap, min_norm_solve
from morl.solvers.simplex import project_simplex, softmax_map
from morl.solvers.simplex_descent import fw_gap, minimize_on_simplex

__all__ = [
    "project_simplex",
    "softmax_map",
    "min_norm",
    "min_norm_solve",
    "min_norm_2",
    "min_norm_gap",
    "gram_scale",
    "gramian",
    "normalized_gramian",
    "fw_gap",
    "minimize_on_simplex",
]
