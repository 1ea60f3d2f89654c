"""THE loop: step -> log -> evaluate -> checkpoint, for every kind of run.

Checkpoints are written every ``checkpoint_every`` units, every ``checkpoint_minutes`` of
wall-clock time, at the end, and when Ctrl-C/SIGTERM asks the run to stop (the current unit
finishes first: its state is consistent). Before each checkpoint the experiment's ``watch()``
may raise ``Diverged``, so a diverged state never replaces the last good one.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from morl.runners.divergence import Diverged, NonFiniteState, all_skipped_text
from morl.runners.hints import command
from morl.runners.interrupts import Interrupted, deferred_stop, immediate_stop
from morl.runners.progress import Progress
from morl.runners.shell.experiment import Experiment
from morl.runners.shell.metrics import write
from morl.runners.shell.run_info import write_run_info

FINAL_METRICS = "final_metrics.json"


class CheckpointClock:
    """Due once ``minutes`` of wall-clock time passed since the last checkpoint (never if None)."""

    def __init__(self, minutes: float | None) -> None:
        self.seconds = None if minutes is None else 60.0 * minutes
        self.reset()

    def reset(self) -> None:
        self.last = time.monotonic()

    def due(self) -> bool:
        return self.seconds is not None and time.monotonic() - self.last >= self.seconds


def run(
    exp: Experiment, run_dir: Path, *, progress: bool | None = None, resumed: bool = False, stop_at: int | None = None
) -> dict[str, Any]:
    """Run ``exp`` from its position to the end of its schedule; returns the final metrics.

    ``stop_at`` stops the run at that position exactly as a signal would (tests, sweeps).
    """
    from morl.runners.tensorboard import RunLogger

    exp.run_dir = Path(run_dir)
    sched = exp.schedule
    # purge_step drops TensorBoard events logged after the checkpoint a resumed run restarts from
    logger = RunLogger(run_dir, purge_step=exp.position + 1 if resumed else None)
    if not resumed:  # the comparison charts (custom scalars); a resumed run keeps its own
        from morl.runners.tb_layout import write_layout

        write_layout(logger.writer, exp.task_names, **exp.layout_tags())
    write_run_info(
        run_dir,
        kind=exp.kind,
        command=exp.command,
        status="running",
        position=exp.position,
        total=sched.total,
        unit=exp.unit,
    )
    bar = Progress(sched.total, initial=exp.position, desc=exp.name or exp.kind, enabled=progress, unit=exp.unit)
    status = "failed"
    try:
        with deferred_stop() as stop:
            _loop(exp, run_dir, logger, bar, stop, stop_at, saved_at=exp.position if resumed else None)
            if exp.position < sched.total:  # stopped on request (a stop during the last unit just finishes)
                status = "interrupted"
                raise Interrupted(
                    f"stopped{' by ' + stop.signal_name if stop.signal_name else ''} at {exp.unit} "
                    f"{exp.position}/{sched.total}; checkpoint {Path(run_dir) / 'checkpoints' / 'last.pt'}; "
                    f"continue with: {command('morl')} resume {run_dir}"
                )
        last = Path(run_dir) / "checkpoints" / "last.pt"
        with immediate_stop(
            f"stopped while computing the final metrics ({exp.unit} {exp.position}/{sched.total}); "
            f"checkpoint {last}; continue with: {command('morl')} resume {run_dir}"
        ):
            final = _finish(exp, run_dir, logger)
        status = "finished"
        return final
    except Interrupted:
        status = "interrupted"
        raise
    except Diverged as exc:
        status = "diverged"
        bar.close()  # the line goes below the bar, not into it
        exc.report()
        raise
    finally:
        bar.close()
        logger.close()
        write_run_info(run_dir, status=status, position=exp.position)
        exp.close()


def _loop(
    exp: Experiment, run_dir: Path, logger, bar: Progress, stop, stop_at: int | None, saved_at: int | None
) -> None:
    from morl.runners.shell.checkpoints import save_checkpoint

    def diverged(what: str) -> Diverged:
        return _diverged(exp, run_dir, saved_at, what)

    sched = exp.schedule
    clock = CheckpointClock(sched.checkpoint_minutes)
    while exp.position < sched.total:
        exp.step()
        p, last = exp.position, exp.position == sched.total
        if p % sched.log_every == 0 or last:
            record = write(logger, p, "train", exp.log_metrics())
            _say(bar, exp.watch())
            bar.show(**exp.progress_fields(record))
            bar.heartbeat(p, estimate=exp.eta_reliable)
        if p % sched.eval_every == 0 or last:
            start = time.perf_counter()
            result = exp.evaluate()
            # what training alone took is the run's wall time minus these (and the checkpoints)
            took = time.perf_counter() - start
            result = write(logger, p, "eval", {**result, "perf/eval_seconds": took})
            bar.exclude(took)  # the ETA is for the training left, at the training rate
            logger.flush()
            if isinstance(result.get("headline"), float) and not math.isfinite(result["headline"]):
                raise diverged(
                    f"the evaluation is non-finite (headline {result['headline']}): the model outputs NaN/inf"
                )
            if isinstance(result.get("headline"), float):
                bar.show(eval=result["headline"])
            line = exp.summary(result)
            if line:
                bar.message(f"{exp.unit} {p}: {line}")
        stopping = stop.requested or (stop_at is not None and p >= stop_at)
        if p % sched.checkpoint_every == 0 or last or stopping or clock.due():
            _say(bar, exp.watch())  # never write a diverged state over the last good one
            if last and (what := all_skipped_text(*exp.skipped_updates())):
                raise diverged(what)
            try:
                save_checkpoint(exp, run_dir)
            except NonFiniteState as exc:
                raise diverged(f"the model holds non-finite (NaN/inf) values ({exc.args[0]})") from None
            saved_at = p
            logger.flush()
            clock.reset()
            write_run_info(run_dir, position=p)
        bar.advance()
        if stopping:
            return


def _diverged(exp: Experiment, run_dir: Path, saved_at: int | None, what: str) -> Diverged:
    from morl.runners.run_dir import CHECKPOINT_DIR, LAST_CHECKPOINT

    where = (
        "no checkpoint was written before it"
        if saved_at is None
        else f"last good checkpoint {Path(run_dir) / CHECKPOINT_DIR / LAST_CHECKPOINT} ({exp.unit} {saved_at})"
    )
    return Diverged(
        f"training diverged at {exp.unit} {exp.position}/{exp.schedule.total}: {what}; {where}; "
        f"{exp.divergence_advice()}"
    )


def _say(bar: Progress, line: str | None) -> None:
    if line:
        bar.message(line)


def _finish(exp: Experiment, run_dir: Path, logger) -> dict[str, Any]:
    from morl.runners.checkpoint import atomic_write_text
    from morl.runners.shell.metrics import resolve
    from morl.runners.tensorboard import flatten_config

    final = _json_safe(resolve(exp.final_metrics()))
    atomic_write_text(Path(run_dir) / FINAL_METRICS, json.dumps(final, indent=2) + "\n")
    scalars = {f"final/{k}": v for k, v in flatten_config(final).items() if isinstance(v, float)}
    logger.hparams(flatten_config(exp.config_dict()), scalars)
    return final


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj
