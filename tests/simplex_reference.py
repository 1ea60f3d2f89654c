"""The Euclidean projection onto the simplex in plain numpy, shared by tests as an independent
reference: Duchi et al. (2008)'s sort algorithm, as the SDMGrad repository's
``euclidean_proj_simplex``."""

import numpy as np


def proj_simplex_np(v: np.ndarray) -> np.ndarray:
    u = np.sort(v)[::-1]
    css = np.cumsum(u)
    rho = np.nonzero(u * np.arange(1, len(v) + 1) > (css - 1))[0][-1]
    theta = (css[rho] - 1) / (rho + 1.0)
    return np.maximum(v - theta, 0)
