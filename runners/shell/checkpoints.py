"""Writing and reading a run's checkpoints: ``checkpoints/last.pt`` (everything, to continue
bitwise) and optional ``step_<N>.pt`` snapshots without the bulky parts (for evaluation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from morl.runners.errors import UserError


def save_checkpoint(exp, run_dir: Path) -> Path:
    from morl.runners.checkpoint import atomic_torch_save
    from morl.runners.divergence import NonFiniteState, first_nonfinite
    from morl.runners.run_dir import CHECKPOINT_DIR, LAST_CHECKPOINT

    folder = Path(run_dir) / CHECKPOINT_DIR
    state = {**exp.state_dict(), "kind": exp.kind, "position": exp.position}
    bad = first_nonfinite({k: v for k, v in state.items() if k not in exp.snapshot_excludes})
    if bad is not None:  # the last good checkpoint stays the last one
        raise NonFiniteState(bad)
    atomic_torch_save(state, folder / LAST_CHECKPOINT)
    keep = exp.schedule.keep_snapshots
    if keep:
        snapshot = {k: v for k, v in state.items() if k not in exp.snapshot_excludes}
        atomic_torch_save(snapshot, folder / f"step_{exp.position:09d}.pt")
        for old in sorted(folder.glob("step_*.pt"))[:-keep]:
            old.unlink(missing_ok=True)
    return folder / LAST_CHECKPOINT


def check_checkpoint(state: Any, exp, path: Path) -> dict[str, Any]:
    """A loaded checkpoint that belongs to ``exp``'s kind and format, else one UserError line."""
    if not isinstance(state, dict):
        raise UserError(f"{path} is not a morl checkpoint")
    kind = state.get("kind", exp.kind)  # checkpoints written before the shell carry no kind
    if kind != exp.kind:
        raise UserError(f"{path} is a checkpoint of a {kind!r} run, not of a {exp.kind!r} run")
    if state.get("format") != exp.checkpoint_format:
        raise UserError(
            f"checkpoint format {state.get('format')!r} of {path} is not supported; expected {exp.checkpoint_format}"
        )
    return state
