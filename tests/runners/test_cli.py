"""The ``morl`` command (runners/cli.py), in-process through its ``main(argv)``: bad input to any
subcommand ends as one line on stderr naming what is wrong and what is allowed, exit status 2,
and nothing written; what a command raises becomes an exit status and one line (a stand-in
command, so each rule is checked on its own); a failed start leaves no run directory behind."""

import sys
import types
from pathlib import Path

import numpy as np
import pytest

from morl.runners import cli
from morl.runners.cli import main as morl
from morl.runners.errors import UserError

SUPERVISED = """name: f
seed: 0
device: cpu
epochs: 1
batch_size: 4
data: {{name: file, options: {{path: {data}, targets: 1}}}}
model: {{hidden: [4]}}
aggregator: {{name: mean}}
optim: {{name: adam, lr: 0.001}}
out_dir: {out}
"""
TEN_ROWS = "a,b,t\n" + "".join(f"{i},{2 * i},{i / 10}\n" for i in range(10))


def _files(tmp: Path) -> dict[str, str]:
    """The inputs of the table, written under ``tmp``; ``{name}`` placeholders in argv refer to them."""
    out = tmp / "runs"
    files = {
        "header_only.csv": "a,b,t\n",
        "two_rows.csv": "a,b,t\n1,2,0.5\n3,4,0.1\n",
        "ragged.csv": "a,b,t\n1,2\n3,4\n5,6\n",
        "ten_rows.csv": TEN_ROWS,
        "nan.csv": TEN_ROWS + "1,nan,0.2\n",
        "syntax.yaml": "name: f\nmodel: {hidden: [4}\nepochs: 1\n",
    }
    for name, text in files.items():
        (tmp / name).write_text(text)
    np.savez(tmp / "empty.npz", x=np.zeros((0, 3)), y=np.zeros((0, 1)))
    np.savez(tmp / "strings.npz", x=np.array([["a", "b"]] * 8), y=np.zeros((8, 1)))
    np.savez(tmp / "rows.npz", x=np.zeros((8, 3)), y=np.zeros((7, 1)))
    np.savez(tmp / "inf.npz", x=np.full((8, 3), np.inf), y=np.zeros((8, 1)))
    for data in (
        "header_only.csv",
        "two_rows.csv",
        "ragged.csv",
        "ten_rows.csv",
        "nan.csv",
        "empty.npz",
        "strings.npz",
        "rows.npz",
        "inf.npz",
    ):
        (tmp / f"{data}.yaml").write_text(SUPERVISED.format(data=tmp / data, out=out))
    (tmp / "folder").mkdir()
    return {"tmp": str(tmp)}


CASES = [
    # (argv with {tmp} for the test's folder, fragments the one error line must hold)
    (["sb3", "--aggregator", "nope"], ["unknown --aggregator 'nope'", "allowed: ", "cagrad", "upgrad"]),
    (["sb3", "--env", "nope"], ["--env", "unknown env 'nope'", "point_mass"]),
    (["sb3", "--net", "64,x"], ["--net '64,x'", "positive layer sizes", "64,64"]),
    (["sb3", "--net", "64,0"], ["--net '64,0'", "positive layer sizes"]),
    (["sb3", "--timesteps", "-5"], ["--timesteps -5 must be at least 1"]),
    (["sb3", "--eval-episodes", "0"], ["--eval-episodes 0 must be at least 1"]),
    (["sb3", "--lr", "nan"], ["--lr nan must be a finite number > 0"]),
    (["supervised", "{tmp}/header_only.csv.yaml"], ["header_only.csv", "has a header row but no data rows"]),
    (["supervised", "{tmp}/two_rows.csv.yaml"], ["two_rows.csv", "training split holds 1 row(s)", "2 rows in all"]),
    (["supervised", "{tmp}/ten_rows.csv.yaml", "batch_size=32"], ["holds 6 rows", "batch_size=32", "at most 6"]),
    (["supervised", "{tmp}/ragged.csv.yaml"], ["ragged.csv", "the header names 3 columns but the rows hold 2"]),
    (["supervised", "{tmp}/nan.csv.yaml"], ["nan.csv", "NaN or infinite values"]),
    (["supervised", "{tmp}/empty.npz.yaml"], ["empty.npz", "holds no data", "x [0, 3]"]),
    (["supervised", "{tmp}/strings.npz.yaml"], ["strings.npz", "array 'x' must be numeric"]),
    (["supervised", "{tmp}/rows.npz.yaml"], ["x has 8 rows but y has 7"]),
    (["supervised", "{tmp}/inf.npz.yaml"], ["inf.npz", "NaN or infinite values"]),
    (["supervised", "{tmp}/syntax.yaml"], ["syntax.yaml", "not valid YAML at line 2, column", "expected ',' or ']'"]),
    (["supervised", "{tmp}/folder"], ["is a directory", "give a YAML file"]),
    (["train", "{tmp}/folder"], ["is a directory", "give a YAML file"]),
    (["eval", "{tmp}/syntax.yaml"], ["syntax.yaml' is a file; give a run directory"]),
    (["resume", "{tmp}/syntax.yaml"], ["syntax.yaml' is a file; give a run directory"]),
]


@pytest.mark.parametrize("argv, fragments", CASES, ids=[" ".join(a).replace("{tmp}/", "") for a, _ in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(argv, fragments, tmp_path, capsys):
    names = _files(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code = morl([a.format(**names) for a in argv])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("morl: error: "), err
    for fragment in fragments:
        assert fragment in lines[0]
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written (no runs/)


@pytest.fixture
def fake_command(monkeypatch):
    """``morl fake`` as the only subcommand; its ``main(args)`` is the function the test sets."""
    module = types.ModuleType("morl_fake_command")
    module.add_arguments = lambda parser: None
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(cli, "SUBCOMMANDS", {"fake": (module.__name__, "a stand-in command")})

    def use(main):
        module.main = main

    return use


def _raises(exc):
    def main(args):
        raise exc

    return main


@pytest.mark.parametrize(
    "exc, line",
    [
        (
            PermissionError(13, "Permission denied", "/data/out"),
            "morl: error: cannot read or write '/data/out': Permission denied; "
            "check the path, its permissions and free disk space",
        ),
        (
            OSError(28, "No space left on device"),
            "morl: error: cannot read or write: No space left on device; "
            "check the path, its permissions and free disk space",
        ),
    ],
)
def test_an_os_error_is_one_line_naming_the_path_and_exit_2(fake_command, capsys, exc, line):
    fake_command(_raises(exc))
    assert morl(["fake"]) == 2
    assert capsys.readouterr().err.splitlines() == [line]


def test_a_state_dict_mismatch_names_its_first_problem(fake_command, capsys):
    torch_message = (
        "Error(s) in loading state_dict for Actor:\n\tsize mismatch for net.0.weight: copying a param with shape "
        "torch.Size([32, 6]) from checkpoint, the shape in current model is torch.Size([24, 6]).\n\tsize mismatch "
        "for net.0.bias: copying a param with shape torch.Size([32]) from checkpoint"
    )
    fake_command(_raises(RuntimeError(torch_message)))
    assert morl(["fake"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "morl: error: the checkpoint does not fit the networks of the run's config (was config.yaml edited?): "
        "size mismatch for net.0.weight: copying a param with shape torch.Size([32, 6]) from checkpoint, "
        "the shape in current model is torch.Size([24, 6])."
    ]


def test_any_other_runtime_error_is_not_turned_into_a_user_error(fake_command, capsys):
    fake_command(_raises(RuntimeError("CUDA error: an illegal memory access was encountered")))
    with pytest.raises(RuntimeError, match="illegal memory access"):
        morl(["fake"])
    assert "morl: error" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "exc, line",
    [
        (
            KeyboardInterrupt("stopped at step 34/50; continue with `morl resume r`"),
            "morl: interrupted: stopped at step 34/50; continue with `morl resume r`",
        ),
        (KeyboardInterrupt(), "morl: interrupted"),
    ],
)
def test_an_interrupt_exits_130_with_its_message(fake_command, capsys, exc, line):
    fake_command(_raises(exc))
    assert morl(["fake"]) == 130
    assert capsys.readouterr().err.splitlines() == [line]


@pytest.mark.parametrize("returned, code", [(None, 0), (0, 0), (1, 1), (2, 2)])
def test_the_command_s_return_value_is_the_exit_status(fake_command, returned, code):
    fake_command(lambda args: returned)
    assert morl(["fake"]) == code


def _starting(run_dir: Path, *, checkpoint: bool, then):
    """A command that creates ``run_dir`` (as ``--run-dir`` does), maybe writes last.pt, then ``then()``."""

    def main(args):
        from morl.runners.run_dir import named_run_dir

        named_run_dir(run_dir)
        if checkpoint:
            (run_dir / "checkpoints" / "last.pt").write_bytes(b"a checkpoint")
        return then()

    return main


def _fail():
    raise UserError("bad option")


@pytest.mark.parametrize(
    "then, checkpoint, code, kept",
    [
        (_fail, False, 2, False),  # a start that fails before its first checkpoint: nothing left behind
        (lambda: 2, False, 2, False),  # exit status 2 returned rather than raised is a failure too
        (lambda: 0, False, 0, True),  # a run that ends well keeps its directory
        (_fail, True, 2, True),  # a run with a checkpoint is kept, to be resumed
    ],
)
def test_a_failed_start_removes_only_the_run_directory_it_created_without_a_checkpoint(
    fake_command, tmp_path, capsys, then, checkpoint, code, kept
):
    run_dir = tmp_path / "run"
    fake_command(_starting(run_dir, checkpoint=checkpoint, then=then))
    assert morl(["fake"]) == code
    assert run_dir.is_dir() == kept
    removed = f"morl: removed the unfinished run directory {run_dir}"
    assert (removed in capsys.readouterr().err.splitlines()) == (not kept)


def test_overrides_may_follow_the_options():
    from morl.runners.cli import _parse, build_parser

    args = _parse(
        build_parser(),
        [
            "train",
            "configs/quickstart_point_mass.yaml",
            "seed=1",
            "--run-dir",
            "d",
            "run.seed=2",
            "--no-progress",
            "a.b=[1, 2]",
        ],
    )
    assert (args.config, args.run_dir, args.no_progress) == ("configs/quickstart_point_mass.yaml", "d", True)
    assert args.overrides == ["seed=1", "run.seed=2", "a.b=[1, 2]"]
    with pytest.raises(SystemExit) as exc:  # an unknown option stays argparse's error
        _parse(build_parser(), ["train", "configs/quickstart_point_mass.yaml", "--bogus", "seed=1"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):  # a command without overrides takes none
        _parse(build_parser(), ["report", "x", "--out", "y", "seed=1"])
