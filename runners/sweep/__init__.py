"""``morl sweep SPEC.yaml``: many runs of any kind (train, supervised, forum, fl, prompt) from one
spec, on a local process pool or on Ray, re-runnable until every cell is done.

``spec.py`` reads the spec, ``cells.py`` expands it into named cells, ``manifest.py`` writes the
sweep directory, ``run_state.py`` decides what a cell's run directory needs next, ``worker.py``
runs one ``morl`` subprocess (the same on both engines, ``local_engine.py`` and ``ray_engine.py``),
``scheduler.py`` drives them with retries and ``status.py``/``progress.py`` report.
"""
