"""Bad input to any subcommand ends as one line on stderr naming what is wrong and what is
allowed, exit status 2, and nothing written: run in-process through ``morl``'s ``main(argv)``."""

from pathlib import Path

import numpy as np
import pytest

from morl.runners.cli import main as morl

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
