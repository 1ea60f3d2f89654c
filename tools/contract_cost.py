"""What a small CPU call of a Gramian method spends besides its arithmetic (session 20).

At K = 10, D = 1e4 a call is ~0.1 ms of product and ~0.3 ms of small ops, each 5-30 µs on a
slow-dispatch machine. This times, interleaved, on one float32 [K, D] matrix:

- ``morl``: ``morl.build("imtl_g")`` as users call it (an ``nn.Module``; the input and output
  finiteness checks of ``check_finite="raise"``; G divided by its largest diagonal entry, which
  the solvers' tolerances assume; the host path of ``morl.aggregators.imtl_g``);
- ``bare``: the same arithmetic with none of that contract (product, one read of G, Cholesky and
  its inverse through LAPACK, the weights in Python, w J): what no library call can beat;
- ``torchjd``: TorchJD 0.18's ``IMTLG``;

and two host-side alternatives to the ops the contract keeps: the K×K Cholesky factor and its
inverse in Python floats against LAPACK through torch, and G / max G_kk formed in Python against
the tensor division (read back as rows either way). Each cell right after a product, as in a call.

    OMP_NUM_THREADS=1 .venv/bin/python tools/contract_cost.py --ks 5,10,16
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from array import array
from operator import mul

import torch

from morl.aggregators import build


def bare_imtl_g(grads: torch.Tensor) -> torch.Tensor:
    """IMTL-G's weights G⁻¹n / 1ᵀG⁻¹n (n_k = ‖g_k‖) and w J with no checks, no scaling and no
    Module call; G is assumed positive definite (the bench matrix is)."""
    rows = (grads @ grads.T).tolist()
    factor, _ = torch.linalg.cholesky_ex(torch.tensor(rows, dtype=torch.float64))
    inverse = torch.cholesky_inverse(factor).tolist()
    norms = [math.sqrt(rows[i][i]) for i in range(len(rows))]
    v = [sum(map(mul, row, norms)) for row in inverse]
    total = sum(v)
    return torch.frombuffer(array("f", [x / total for x in v]), dtype=torch.float32) @ grads


def python_cholesky_inverse(rows: list[list[float]]) -> list[list[float]] | None:
    """L⁻¹ (rows of the lower triangle) of G = L Lᵀ in Python floats; None if not positive definite."""
    factor, reciprocal = [], []
    for i, row in enumerate(rows):
        li = []
        for j in range(i):
            li.append((row[j] - sum(map(mul, li, factor[j]))) * reciprocal[j])
        s = row[i] - sum(map(mul, li, li))
        if not s > 0:
            return None
        li.append(math.sqrt(s))
        factor.append(li)
        reciprocal.append(1.0 / li[i])
    inverse = []
    for i, li in enumerate(factor):
        xi = [0.0] * (i + 1)
        for m in range(i):
            for j, x in enumerate(inverse[m]):
                xi[j] -= li[m] * x
        xi[i] += 1.0
        inverse.append([x * reciprocal[i] for x in xi])
    return inverse


def lapack_cholesky_inverse(gram: torch.Tensor) -> list[list[float]] | None:
    factor, info = torch.linalg.cholesky_ex(gram.to(torch.float64))
    return None if info.item() else torch.cholesky_inverse(factor).tolist()


def python_scaled_rows(gram: torch.Tensor) -> list[list[float]]:
    """G / max G_kk as float32-rounded rows, the division done in Python (torch's float32
    division by a Python float rounds g / float32(top): the same values)."""
    rows = gram.tolist()
    top = array("f", (max(rows[i][i] for i in range(len(rows))),))[0]
    return [list(array("f", [x / top for x in row])) for row in rows]


def torch_scaled_rows(gram: torch.Tensor) -> list[list[float]]:
    return (gram / max(gram.diagonal().tolist())).tolist()


def interleaved(fns: dict, before, calls: int) -> dict[str, float]:
    """Median µs of each function, called in turn, each right after ``before()``."""
    times = {name: [] for name in fns}
    for _ in range(calls):
        for name, fn in fns.items():
            before()
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) * 1e6 for name, t in times.items()}


def main() -> None:
    import torchjd.aggregation as tj

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", default="5,10,16", help="comma-separated K values (the host path: K <= 16)")
    parser.add_argument("--d", type=float, default=1e4, help="columns")
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); median µs of interleaved calls")
    for k in (int(x) for x in args.ks.split(",")):
        d = int(args.d)
        gen = torch.Generator().manual_seed(0)
        grads = 0.7 * d**-0.25 * torch.randn(1, d, generator=gen) + torch.randn(k, d, generator=gen)
        ours, theirs = build("imtl_g"), tj.IMTLG()
        rel = float((bare_imtl_g(grads) - ours(grads)).norm() / ours(grads).norm())
        calls = interleaved({"morl": lambda: ours(grads), "bare": lambda: bare_imtl_g(grads), "torchjd": lambda: theirs(grads)},
                            lambda: None, args.calls)
        print(f"K={k} D={d}: IMTL-G morl {calls['morl']:.0f}, bare {calls['bare']:.0f}, TorchJD {calls['torchjd']:.0f} "
              f"(morl / TorchJD {calls['morl'] / calls['torchjd']:.2f}, bare / TorchJD {calls['bare'] / calls['torchjd']:.2f}; "
              f"directions differ by {rel:.0e})")
        gram = grads @ grads.T
        scaled = gram / gram.diagonal().max()
        rows = scaled.tolist()
        ops = interleaved({"python_cholesky_inverse": lambda: python_cholesky_inverse(rows),
                           "lapack_cholesky_inverse": lambda: lapack_cholesky_inverse(scaled),
                           "python_scaled_rows": lambda: python_scaled_rows(gram),
                           "torch_scaled_rows": lambda: torch_scaled_rows(gram)},
                          lambda: grads @ grads.T, args.calls)
        print("    after a product: " + ", ".join(f"{name} {us:.0f}" for name, us in ops.items()))


if __name__ == "__main__":
    main()
