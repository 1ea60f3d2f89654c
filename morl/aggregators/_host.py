"""The Python-float path for one small CPU Gramian.

Up to :data:`HOST_MAX_K` rows, a method's K×K work is mostly dispatch: each torch op on a
K×K tensor costs 2-3 µs for a few ns of arithmetic, and a K = 2..10 call of IMTL-G, Aligned-MTL,
Krum or MGDA's closed form is 20-30 such ops. On the CPU the Gramian is in host memory, so
reading it is no synchronisation: these helpers read it (and an eigendecomposition) as Python
floats and turn the finished weights back into one tensor. Every read of the path happens
here, so a device-traffic guard can allow exactly these functions on the CPU; on any other
device, under ``torch.compile`` (:func:`morl.host_reads.reads_are_free`), batched, with
autograd or non-finite, :func:`gramian_rows` says None and the method's torch path runs.
"""

from __future__ import annotations

import math

import torch

from morl.host_reads import reads_are_free

#: Largest K taken by the Python path (at K = 16 a K² Python loop already costs about as
#: much as the torch ops it replaces).
HOST_MAX_K = 16


def gramian_rows(gram: torch.Tensor) -> list[list[float]] | None:
    """``gram`` ([K, K], K ≤ HOST_MAX_K, CPU, no autograd, finite) as nested float lists, or None."""
    if gram.dim() != 2 or gram.shape[-1] > HOST_MAX_K or gram.requires_grad or not reads_are_free(gram):
        return None
    rows = gram.tolist()
    # NaN/inf anywhere makes the sum NaN/inf (a sum that overflows from finite entries, beyond
    # 1e308, is declined too: the torch path takes it); ~10x cheaper than testing each entry
    return rows if math.isfinite(sum(map(sum, rows))) else None


def eigh_lists(gram: torch.Tensor) -> tuple[list[float], list[list[float]]]:
    """(eigenvalues ascending, eigenvectors as ROWS: ``vecs[j]`` belongs to ``lam[j]``) of a
    CPU Gramian, in float64 lists (rows, so that dot products run over one list)."""
    lam, vec = torch.linalg.eigh(gram.to(torch.float64))
    return lam.tolist(), vec.mT.tolist()


def as_list(t: torch.Tensor) -> list:
    """A small CPU tensor's values (preferences, ...) as Python numbers."""
    return t.tolist()


def eps(dtype: torch.dtype) -> float:
    """Machine epsilon of ``dtype`` (``torch.finfo`` is ~1 µs a call; this is a lookup)."""
    return _EPS[dtype]


_EPS = {dt: torch.finfo(dt).eps for dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64)}


def weights_tensor(values: list, like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The finished weights (or other small state, e.g. GradVac's targets) as a tensor in
    ``dtype`` (default ``like``'s dtype), on the CPU."""
    return torch.tensor(values, dtype=like.dtype if dtype is None else dtype)
