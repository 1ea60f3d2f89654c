"""``morl sb3`` (runners/sb3.py): its options are checked before anything is built, each mistake
one line naming the option and what it allows; a short run prints one line per evaluation. The
adapter itself (agents/rl/sb3.py) is tested in tests/agents/rl/test_sb3.py."""

import argparse
import re

import pytest

from morl.runners import sb3
from morl.runners.errors import UserError


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sb3.add_arguments(parser)
    return parser.parse_args(argv)


def test_the_defaults_are_valid_and_give_two_64_unit_layers():
    assert sb3.check_arguments(_args()) == [64, 64]


@pytest.mark.parametrize(
    "net, sizes",
    [("400,400,400", [400, 400, 400]), ("7", [7]), ("32, 16", [32, 16])],
)
def test_net_is_read_as_comma_separated_layer_sizes(net, sizes):
    assert sb3.check_arguments(_args("--net", net)) == sizes


@pytest.mark.parametrize(
    "argv",
    [
        ["--learning-starts", "0", "--time-updates", "0"],  # 0 is allowed where an option may be off
        ["--timesteps", "1", "--eval-every", "1", "--eval-episodes", "1", "--batch-size", "1"],
        ["--lr", "1e-9"],
        ["--aggregator", "upgrad"],
    ],
)
def test_the_smallest_allowed_values_pass(argv):
    assert sb3.check_arguments(_args(*argv)) == [64, 64]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--timesteps", "0"], "--timesteps 0 must be at least 1"),
        (["--eval-every", "0"], "--eval-every 0 must be at least 1"),
        (["--eval-episodes", "-1"], "--eval-episodes -1 must be at least 1"),
        (["--batch-size", "0"], "--batch-size 0 must be at least 1"),
        (["--learning-starts", "-1"], "--learning-starts -1 must be 0 or more"),
        (["--time-updates", "-3"], "--time-updates -3 must be 0 or more"),
        (["--lr", "0"], "--lr 0.0 must be a finite number > 0"),
        (["--lr", "-0.001"], "--lr -0.001 must be a finite number > 0"),
        (["--lr", "inf"], "--lr inf must be a finite number > 0"),
        (["--net", ""], "--net '' must be comma-separated positive layer sizes, e.g. 64,64"),
        (["--net", "64,,64"], "--net '64,,64' must be comma-separated positive layer sizes, e.g. 64,64"),
        (["--net", "-64"], "--net '-64' must be comma-separated positive layer sizes, e.g. 64,64"),
        (["--net", "6.4"], "--net '6.4' must be comma-separated positive layer sizes, e.g. 64,64"),
        (["--net", "64,²"], "--net '64,²' must be comma-separated positive layer sizes, e.g. 64,64"),
    ],
)
def test_a_bad_option_is_one_line_naming_it_and_what_it_allows(argv, message):
    with pytest.raises(UserError) as exc:
        sb3.check_arguments(_args(*argv))
    assert str(exc.value) == message


def test_an_unknown_aggregator_lists_the_registered_ones():
    with pytest.raises(UserError) as exc:
        sb3.check_arguments(_args("--aggregator", "CAGrad"))
    message = str(exc.value)
    assert message.startswith("unknown --aggregator 'CAGrad'; allowed: ")
    assert {"cagrad", "mean", "mgda", "pcgrad", "upgrad"} <= set(message.split("allowed: ")[1].split(", "))


def test_an_unknown_env_is_one_line_under_env():
    with pytest.raises(UserError, match=r"^--env: unknown env 'point-mass'.*point_mass"):
        sb3._make_env("point-mass", seed=0)


@pytest.mark.integration  # stable-baselines3 trains for a few seconds
def test_a_short_run_prints_one_line_per_evaluation_then_the_update_times(capsys):
    argv = ["--timesteps", "400", "--eval-every", "200", "--eval-episodes", "1", "--net", "16,16"]
    argv += ["--batch-size", "16", "--learning-starts", "40", "--aggregator", "mean", "--time-updates", "3"]
    assert sb3.main(_args(*argv)) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    # point_mass: 4 tasks, one sub-env each, so 200 transitions are exactly 50 steps of the vector env
    evaluation = r"transitions +{}  cpu +\d+\.\ds  success per task \[([0-9. ]+)\]  mean (\d\.\d\d)"
    assert [re.fullmatch(evaluation.format(n), line) is not None for n, line in zip((200, 400), lines)] == [True, True]
    for line in lines[:2]:
        per_task, mean = re.fullmatch(evaluation.format(r"\d+"), line).groups()
        values = [float(v) for v in per_task.split()]
        assert len(values) == 4 and all(0 <= v <= 1 for v in values)
        assert float(mean) == pytest.approx(sum(values) / 4, abs=0.01)
    timing = r"{}: \d+\.\d\d CPU ms per update \(16x16, batch 16, 1 thread\)"
    assert re.fullmatch(timing.format(re.escape("MultiTaskSAC/mean")), lines[2])
    assert re.fullmatch(timing.format("SB3 SAC"), lines[3])
    assert len(lines) == 4
