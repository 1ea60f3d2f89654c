"""Offline multi-task datasets for supervised MTL (nothing is downloaded).

``load_dataset(name, seed=..., **options) -> MultiTaskData`` with names

* ``digits`` -- scikit-learn's bundled 8x8 digits (1,797 images) with several labels per
  image: ``digit`` (10 classes), ``parity`` (even/odd), ``large`` (digit > 4), ``prime``
  (digit in {2, 3, 5, 7}); choose with ``tasks=[...]``.
* ``digits_pair`` -- two digits side by side (8x16 images): ``left`` and ``right`` digit,
  10 classes each (a small MultiMNIST).
* ``regression`` -- synthetic linear multi-task regression whose task directions have a
  controllable pairwise cosine (``cosine``; negative = conflicting tasks) and scales.
* ``mnist1d`` -- MNIST-1D generated locally by the ``mnist1d`` package's own generator
  (``pip install mnist1d``), with the same derived labels as ``digits``.
* ``file`` -- a user's CSV (header row) or NPZ (arrays ``x`` [N, F] and ``y`` [N, K]).

Every dataset is split into train/val/test with a seeded permutation. Features are float32;
targets are a float32 ``[N, K]`` matrix (class labels stored as floats).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from morl.tasks import TaskSpec

__all__ = [
    "MultiTaskData",
    "DATASETS",
    "load_dataset",
    "digits",
    "digits_pair",
    "synthetic_regression",
    "mnist1d",
    "from_file",
]

Split = tuple[torch.Tensor, torch.Tensor]


@dataclass
class MultiTaskData:
    """Train/val/test ``(x, y)`` tensors and the task specs (``y[:, k]`` is task k's target)."""

    name: str
    specs: list[TaskSpec]
    train: Split
    val: Split
    test: Split
    info: dict = field(default_factory=dict)

    @property
    def in_dim(self) -> int:
        return int(np.prod(self.train[0].shape[1:]))

    @property
    def task_names(self) -> list[str]:
        return [s.name for s in self.specs]

    def split(self, name: str) -> Split:
        if name not in ("train", "val", "test"):
            raise ValueError(f"split {name!r} is not valid; allowed: train, val, test")
        return getattr(self, name)

    def batches(self, split: str, batch_size: int) -> list[Split]:
        """Consecutive (unshuffled) batches of a split, e.g. for evaluation."""
        x, y = self.split(split)
        return [(x[i : i + batch_size], y[i : i + batch_size]) for i in range(0, x.shape[0], batch_size)]


def _split(x: np.ndarray, y: np.ndarray, seed: int, fractions: Sequence[float]) -> tuple[Split, Split, Split]:
    if len(fractions) != 3 or any(f < 0 for f in fractions) or not math.isclose(sum(fractions), 1.0, abs_tol=1e-6):
        raise ValueError(f"split fractions must be three non-negative numbers summing to 1, got {list(fractions)}")
    n = x.shape[0]
    perm = np.random.default_rng(seed).permutation(n)
    n_train = int(round(fractions[0] * n))
    n_val = int(round(fractions[1] * n))
    if n_train < 1 or n - n_train - n_val < 1:
        raise ValueError(f"{n} samples are too few for split fractions {list(fractions)}")
    parts = np.split(perm, [n_train, n_train + n_val])
    to_t = lambda idx: (torch.as_tensor(x[idx], dtype=torch.float32), torch.as_tensor(y[idx], dtype=torch.float32))  # noqa: E731
    return to_t(parts[0]), to_t(parts[1]), to_t(parts[2])


# -- digit-derived labels -------------------------------------------------------------------------
DIGIT_TASKS: dict[str, tuple[int, Callable[[np.ndarray], np.ndarray]]] = {
    "digit": (10, lambda d: d),
    "parity": (2, lambda d: d % 2),
    "large": (2, lambda d: (d > 4).astype(np.int64)),
    "prime": (2, lambda d: np.isin(d, [2, 3, 5, 7]).astype(np.int64)),
}


def _digit_labels(digit: np.ndarray, tasks: Sequence[str]) -> tuple[np.ndarray, list[TaskSpec]]:
    unknown = [t for t in tasks if t not in DIGIT_TASKS]
    if unknown or not tasks:
        raise ValueError(f"unknown digit task(s) {unknown or tasks}; allowed: {', '.join(DIGIT_TASKS)}")
    y = np.stack([DIGIT_TASKS[t][1](digit) for t in tasks], axis=1).astype(np.float32)
    return y, [TaskSpec(t, "classification", DIGIT_TASKS[t][0]) for t in tasks]


def digits(
    seed: int = 0, tasks: Sequence[str] = ("digit", "parity", "large"), fractions=(0.6, 0.2, 0.2)
) -> MultiTaskData:
    """scikit-learn's bundled digits; pixel values scaled to [0, 1]; several labels per image."""
    from sklearn.datasets import load_digits

    raw = load_digits()
    x = (raw.images / 16.0).astype(np.float32)
    y, specs = _digit_labels(raw.target.astype(np.int64), list(tasks))
    train, val, test = _split(x, y, seed, fractions)
    return MultiTaskData("digits", specs, train, val, test, {"source": "sklearn.datasets.load_digits"})


def digits_pair(seed: int = 0, num_samples: int = 3000, fractions=(0.6, 0.2, 0.2)) -> MultiTaskData:
    """Two random digits side by side (8x16); tasks ``left`` and ``right`` digit.

    Images are first split by the seed, then paired within each split, so no image of the
    test set appears in training.
    """
    from sklearn.datasets import load_digits

    raw = load_digits()
    imgs, labels = (raw.images / 16.0).astype(np.float32), raw.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(labels))
    cuts = np.cumsum([int(round(f * len(labels))) for f in fractions[:2]])
    out = []
    for part, frac in zip(np.split(perm, cuts), fractions):
        n = max(1, int(round(frac * num_samples)))
        a, b = rng.choice(part, size=n), rng.choice(part, size=n)
        x = np.concatenate([imgs[a], imgs[b]], axis=2)
        y = np.stack([labels[a], labels[b]], axis=1).astype(np.float32)
        out.append((torch.from_numpy(x), torch.from_numpy(y)))
    specs = [TaskSpec("left", "classification", 10), TaskSpec("right", "classification", 10)]
    return MultiTaskData("digits_pair", specs, *out, info={"source": "sklearn.datasets.load_digits"})


def task_directions(num_tasks: int, dim: int, cosine: float, rng: np.random.Generator) -> np.ndarray:
    """``[K, dim]`` unit vectors with pairwise cosine exactly ``cosine``.

    Their Gram matrix ``(1 - c) I + c 11^T`` is positive definite iff -1/(K-1) < c < 1.
    """
    lo = -1.0 / (num_tasks - 1) if num_tasks > 1 else -1.0
    if not lo < cosine < 1.0 or dim < num_tasks:
        raise ValueError(
            f"cosine must lie in ({lo:.4g}, 1) for {num_tasks} tasks and dim >= num_tasks; got cosine={cosine}, dim={dim}"
        )
    gram = (1.0 - cosine) * np.eye(num_tasks) + cosine * np.ones((num_tasks, num_tasks))
    chol = np.linalg.cholesky(gram)  # rows of chol have the wanted Gram matrix
    basis, _ = np.linalg.qr(rng.standard_normal((dim, num_tasks)))
    return chol @ basis.T


def synthetic_regression(
    seed: int = 0,
    num_samples: int = 2000,
    dim: int = 20,
    num_tasks: int = 3,
    cosine: float = -0.4,
    scales: Sequence[float] | None = None,
    noise: float = 0.1,
    fractions=(0.6, 0.2, 0.2),
) -> MultiTaskData:
    """``y_k = scale_k * tanh(w_k . x) + noise`` with unit ``w_k`` of pairwise cosine ``cosine``.

    With a shared trunk the per-task gradients conflict more as ``cosine`` decreases (the
    task optima pull the shared features in directions at that angle); unequal ``scales``
    add magnitude imbalance. ``x ~ N(0, I)``.
    """
    rng = np.random.default_rng(seed)
    scales = np.ones(num_tasks) if scales is None else np.asarray(scales, dtype=np.float64)
    if scales.shape != (num_tasks,):
        raise ValueError(f"scales must have {num_tasks} entries (one per task), got {scales.tolist()}")
    w = task_directions(num_tasks, dim, cosine, rng)
    x = rng.standard_normal((num_samples, dim)).astype(np.float32)
    y = scales * np.tanh(x @ w.T) + noise * rng.standard_normal((num_samples, num_tasks))
    specs = [TaskSpec(f"y{k}", "regression") for k in range(num_tasks)]
    train, val, test = _split(x, y.astype(np.float32), seed, fractions)
    return MultiTaskData("regression", specs, train, val, test, {"cosine": cosine, "directions": w})


def mnist1d(
    seed: int = 0,
    num_samples: int = 4000,
    tasks: Sequence[str] = ("digit", "parity", "large"),
    fractions=(0.6, 0.2, 0.2),
) -> MultiTaskData:
    """MNIST-1D (40-point signals) generated locally by ``mnist1d.data.make_dataset``.

    The package's ``get_dataset`` would download a pickle; ``make_dataset`` builds the data
    from the templates in its source, so nothing is fetched.
    """
    try:
        from mnist1d.data import get_dataset_args, make_dataset
    except ImportError:
        raise ValueError(
            "dataset 'mnist1d' needs the mnist1d package (pip install mnist1d); it generates data locally"
        ) from None
    args = get_dataset_args()
    args.num_samples, args.seed, args.train_split = int(num_samples), int(seed), 1.0
    data = make_dataset(args)
    y, specs = _digit_labels(np.asarray(data["y"], dtype=np.int64), list(tasks))
    train, val, test = _split(np.asarray(data["x"], dtype=np.float32), y, seed, fractions)
    return MultiTaskData("mnist1d", specs, train, val, test, {"source": "mnist1d.data.make_dataset"})


def from_file(
    path: str,
    targets: Sequence[str] | int = 1,
    task_kinds: Sequence[str] | None = None,
    seed: int = 0,
    standardize: bool = True,
    fractions=(0.6, 0.2, 0.2),
) -> MultiTaskData:
    """A local CSV (header row, numeric columns) or NPZ (``x`` [N, F], ``y`` [N, K]).

    ``targets``: CSV column names of the K targets, or a count K meaning the last K
    columns (NPZ: ignored). ``task_kinds``: ``classification``/``regression`` per target
    (default regression); class labels must be integers 0..C-1. ``standardize`` scales
    the features with the training split's mean and std.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"data file {path!r} does not exist")
    if p.suffix.lower() == ".npz":
        with np.load(p) as z:
            if "x" not in z or "y" not in z:
                raise ValueError(
                    f"{path!r}: an NPZ file must hold arrays 'x' [N, F] and 'y' [N, K]; found {', '.join(z.files)}"
                )
            x, y = _npz_array(z, "x", path), _npz_array(z, "y", path)
        if len(x) == 0 or y.size == 0:
            raise ValueError(
                f"{path!r} holds no data (shapes x {list(x.shape)}, y {list(y.shape)}); "
                "it needs rows of at least one feature and one target"
            )
        y = y.reshape(len(y), -1)
        names = [f"y{k}" for k in range(y.shape[1])]
    elif p.suffix.lower() == ".csv":
        x, y, names = _read_csv(p, targets)
    else:
        raise ValueError(f"data file {path!r}: unsupported extension {p.suffix!r}; allowed: .csv, .npz")
    if len(x) != len(y):
        raise ValueError(f"{path!r}: x has {len(x)} rows but y has {len(y)}")
    if x[0].size == 0:
        raise ValueError(f"{path!r} holds no feature columns; it needs at least one feature and one target")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError(f"{path!r} holds NaN or infinite values; remove or fill them first")
    kinds = list(task_kinds) if task_kinds else ["regression"] * y.shape[1]
    if len(kinds) != y.shape[1]:
        raise ValueError(f"task_kinds has {len(kinds)} entries for {y.shape[1]} targets")
    specs = []
    for k, (name, kind) in enumerate(zip(names, kinds)):
        if kind == "classification":
            col = y[:, k]
            if not np.all(col == np.round(col)) or col.min() < 0:
                raise ValueError(f"target {name!r} is declared classification but holds non-integer or negative labels")
            specs.append(TaskSpec(name, kind, max(2, int(col.max()) + 1)))
        else:
            specs.append(TaskSpec(name, kind))
    x = x.reshape(len(x), -1)
    train, val, test = _split(x, y, seed, fractions)
    if standardize and len(train[0]) < 2:
        raise ValueError(
            f"{path!r}: the training split holds {len(train[0])} row(s); standardize needs at least 2 "
            f"({len(x)} rows in all)"
        )
    if standardize:
        mu, sd = train[0].mean(0), train[0].std(0).clamp_min(1e-8)
        train, val, test = [((a - mu) / sd, b) for a, b in (train, val, test)]
    return MultiTaskData(p.stem, specs, train, val, test, {"source": str(p)})


def _npz_array(z, key: str, path) -> np.ndarray:
    try:
        return z[key].astype(np.float32)
    except (ValueError, TypeError) as exc:  # object arrays (pickles), strings
        raise ValueError(f"{path!r}: array {key!r} must be numeric ({exc})") from None


def _read_csv(path: Path, targets) -> tuple[np.ndarray, np.ndarray, list[str]]:
    lines = path.read_text().splitlines()
    if not lines:
        raise ValueError(f"{str(path)!r} is empty; a CSV needs a header row and data rows")
    header = [h.strip() for h in lines[0].split(",")]
    if not any(line.strip() for line in lines[1:]):
        raise ValueError(f"{str(path)!r} has a header row but no data rows")
    try:
        data = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2)
    except ValueError as exc:
        raise ValueError(f"{str(path)!r}: every value after the header row must be numeric ({exc})") from None
    if data.shape[1] != len(header):
        raise ValueError(f"{str(path)!r}: the header names {len(header)} columns but the rows hold {data.shape[1]}")
    if isinstance(targets, int):
        if not 1 <= targets < len(header):
            raise ValueError(f"targets={targets}: need between 1 and {len(header) - 1} target columns")
        tcols = list(range(len(header) - targets, len(header)))
    else:
        missing = [t for t in targets if t not in header]
        if missing:
            raise ValueError(
                f"{str(path)!r}: target column(s) {missing} not in the header; columns: {', '.join(header)}"
            )
        tcols = [header.index(t) for t in targets]
    fcols = [i for i in range(len(header)) if i not in tcols]
    return data[:, fcols].astype(np.float32), data[:, tcols].astype(np.float32), [header[i] for i in tcols]


DATASETS = {
    "digits": digits,
    "digits_pair": digits_pair,
    "regression": synthetic_regression,
    "mnist1d": mnist1d,
    "file": from_file,
}


def load_dataset(name: str, **options) -> MultiTaskData:
    """Build dataset ``name`` with ``options`` (see each builder's docstring)."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; allowed: {', '.join(DATASETS)}")
    import inspect

    valid = set(inspect.signature(DATASETS[name]).parameters)
    unknown = sorted(set(options) - valid)
    if unknown:
        raise ValueError(
            f"unknown option(s) {', '.join(unknown)} for dataset {name!r}; allowed: {', '.join(sorted(valid))}"
        )
    return DATASETS[name](**options)
