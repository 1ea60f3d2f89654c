"""The experiment shell: one loop, one run directory layout and one resume/eval path for every
kind of run (RL, supervised, FORUM, federated, prompts).

A kind of run implements :class:`~morl.runners.shell.experiment.Experiment` in one file; the
shell (``loop.py``) owns the run directory, the resolved config, TensorBoard and
``metrics.jsonl``, the progress bar, checkpoints (by count, by wall-clock time and on
Ctrl-C/SIGTERM), ``final_metrics.json`` and ``run.json`` (kind and status); ``commands.py``
starts, resumes and evaluates runs of any kind, dispatching on ``run.json``.
"""
