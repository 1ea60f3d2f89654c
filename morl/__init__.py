"""morl: multi-objective gradient aggregation for PyTorch.

``morl.aggregators.build(name, **options)`` gives a callable mapping a ``[K, D]`` gradient
matrix to one ``[D]`` descent direction; ``morl.backward(losses, params, aggregator)`` plugs
it into any ``torch.optim`` loop.
"""

__version__ = "0.1.0"

_LAZY = {
    "Aggregator": "morl.aggregators",
    "available": "morl.aggregators",
    "build": "morl.aggregators",
    "backward": "morl.gradients",
    "per_task_grads": "morl.gradients",
    "batched_task_grads": "morl.gradients",
    "task_features": "morl.gradients",
}


def __getattr__(name):
    # Lazy, so that `import morl` (and the command line, morl.runners, which lives in this
    # namespace) does not import torch until an aggregator or a gradient helper is used.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'morl' has no attribute {name!r}")


__all__ = [
    "Aggregator",
    "available",
    "build",
    "backward",
    "per_task_grads",
    "batched_task_grads",
    "task_features",
    "__version__",
]
