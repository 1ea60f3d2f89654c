"""JoGBa's epoch (Alg. 1) transcribed independently in numpy: the reference of the ordering and runner tests."""

import numpy as np


def numpy_jogba_epoch(G, perms, v, centering, norm, margins=None):
    """One epoch of Alg. 1 on precomputed gradients, transcribed independently in numpy. ``margins``
    (a list) collects each sign decision's relative margin (s ≠ 0) |‖s+g‖ − ‖s−g‖| / (‖s‖ + ‖g‖)."""
    M, K, d = G.shape
    new = np.empty_like(perms)
    left, right = np.zeros(M, int), np.full(M, K - 1)
    s, v_sum, v_pm = np.zeros(d), np.zeros(d), np.zeros((M, d))
    for k in range(K):
        for m in range(M):
            grad = G[m, perms[m, k]]
            c = {"joint_sum": v["sum"], "joint_mean": v["sum"] / M, "per_objective": v["pm"][m], "none": 0.0}[centering]
            g = grad - c
            plus, minus = np.linalg.norm(s + g, norm), np.linalg.norm(s - g, norm)
            if margins is not None and s.any():  # s = 0 is an exact tie (+1) by definition
                margins.append(abs(plus - minus) / (np.linalg.norm(s, norm) + np.linalg.norm(g, norm)))
            if plus <= minus:
                s += g
                new[m, left[m]] = perms[m, k]
                left[m] += 1
            else:
                s -= g
                new[m, right[m]] = perms[m, k]
                right[m] -= 1
            v_sum += grad / K
            v_pm[m] += grad / K
    assert (left == right + 1).all()
    return new, {"sum": v_sum, "pm": v_pm}
