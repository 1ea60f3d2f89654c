"""morl: multi-objective gradient aggregation for PyTorch.

``morl.aggregators.build(name, **options)`` gives a callable mapping a ``[K, D]`` gradient
matrix to one ``[D]`` descent direction; ``morl.backward(losses, params, aggregator)`` plugs
it into any ``torch.optim`` loop.
"""

from morl.aggregators import Aggregator, available, build

__version__ = "0.1.0"


def __getattr__(name):
    # Lazy so that `import morl` stays cheap and a missing optional module fails only on use.
    if name in ("backward", "per_task_grads", "batched_task_grads"):
        from morl import gradients

        return getattr(gradients, name)
    raise AttributeError(f"module 'morl' has no attribute {name!r}")


__all__ = ["Aggregator", "available", "build", "backward", "per_task_grads", "batched_task_grads", "__version__"]
