"""Bi-level optimisation with several upper-level objectives.

``FORUM`` (first-order, value-function based; Ye et al. 2024) runs Algorithm 1 over parameter
tensors; ``forum_direction`` is its model-free core over flat gradients and ``solve_qp`` the
small dense QP solver it uses.
"""

from morl.bilevel.forum import FORUM, ForumDirection, beta_schedule, forum_direction, forum_lambda
from morl.bilevel.small_qp import solve_qp

__all__ = ["FORUM", "ForumDirection", "beta_schedule", "forum_direction", "forum_lambda", "solve_qp"]
