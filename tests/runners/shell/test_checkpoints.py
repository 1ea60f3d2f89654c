"""A run's checkpoints (runners/shell/checkpoints.py): ``last.pt`` holds everything plus the kind and
position, ``step_<N>.pt`` snapshots leave the bulky parts out and only the newest few are kept, a
non-finite state is never written, and a loaded checkpoint must be of the run's kind and format."""

from types import SimpleNamespace

import pytest
import torch

from morl.runners.checkpoint import torch_load
from morl.runners.divergence import NonFiniteState
from morl.runners.errors import UserError
from morl.runners.shell.checkpoints import check_checkpoint, save_checkpoint
from morl.runners.shell.experiment import Schedule


def _exp(position: int, keep: int, x: float = 1.0):
    state = {"format": 2, "x": torch.tensor([x]), "replay": torch.arange(3.0)}
    return SimpleNamespace(
        kind="walk",
        position=position,
        snapshot_excludes=("replay",),
        schedule=Schedule(10, 1, 1, 1, keep_snapshots=keep),
        state_dict=lambda: state,
    )


def test_last_pt_holds_everything_and_only_the_newest_snapshots_are_kept(tmp_path):
    for position in (1, 2, 3, 4):
        path = save_checkpoint(_exp(position, keep=2, x=float(position)), tmp_path)
    folder = tmp_path / "checkpoints"
    assert path == folder / "last.pt"
    assert sorted(p.name for p in folder.glob("step_*.pt")) == ["step_000000003.pt", "step_000000004.pt"]
    last = torch_load(path)
    assert (last["kind"], last["position"], last["format"], last["x"].item()) == ("walk", 4, 2, 4.0)
    assert torch.equal(last["replay"], torch.arange(3.0))
    snapshot = torch_load(folder / "step_000000003.pt")
    assert "replay" not in snapshot and (snapshot["position"], snapshot["x"].item()) == (3, 3.0)


def test_without_kept_snapshots_only_last_pt_is_written(tmp_path):
    save_checkpoint(_exp(5, keep=0), tmp_path)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.suffix == ".pt") == ["last.pt"]


def test_a_non_finite_state_is_refused_and_the_last_good_checkpoint_stays(tmp_path):
    save_checkpoint(_exp(3, keep=2, x=3.0), tmp_path)
    with pytest.raises(NonFiniteState, match="^x$"):
        save_checkpoint(_exp(4, keep=2, x=float("nan")), tmp_path)
    folder = tmp_path / "checkpoints"
    assert torch_load(folder / "last.pt")["position"] == 3
    assert sorted(p.name for p in folder.glob("step_*.pt")) == ["step_000000003.pt"]


EXP = SimpleNamespace(kind="rl", checkpoint_format=1)


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ([1, 2], "ckpt.pt is not a morl checkpoint"),
        ({"kind": "supervised", "format": 1}, "ckpt.pt is a checkpoint of a 'supervised' run, not of a 'rl' run"),
        ({"kind": "rl", "format": 2}, "checkpoint format 2 of ckpt.pt is not supported; expected 1"),
        ({"kind": "rl"}, "checkpoint format None of ckpt.pt is not supported; expected 1"),
    ],
)
def test_a_checkpoint_of_another_kind_or_format_is_refused_with_one_line(state, message):
    with pytest.raises(UserError) as exc:
        check_checkpoint(state, EXP, "ckpt.pt")
    assert str(exc.value) == message


def test_a_checkpoint_of_the_runs_kind_and_format_is_returned_as_is():
    state = {"kind": "rl", "format": 1, "step": 3}
    assert check_checkpoint(state, EXP, "ckpt.pt") is state
    legacy = {"format": 1, "step": 3}  # written before the shell: no kind
    assert check_checkpoint(legacy, EXP, "ckpt.pt") is legacy
