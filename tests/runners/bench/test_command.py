"""``morl bench``: the targets are registered, the shared option checks give one line naming the
option, and the torch thread count is set for the benchmark and given back after it."""

import argparse
import sys
import types

import pytest
import torch

from morl.runners.bench import command
from morl.runners.cli import main
from morl.runners.errors import UserError


def _args(*argv):
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_growth_is_a_scale_option_only():
    args = argparse.Namespace(target="rl", growth=True, out=None)
    with pytest.raises(UserError, match="--growth applies to `morl bench scale` only"):
        command.main(args)


def test_scale_is_a_bench_target():
    assert command.TARGETS["scale"] == "morl.runners.bench.scale"


def test_bench_against_needs_the_aggregators_target(capsys):
    assert main(["bench", "rl", "--against", "torchjd"]) == 2
    assert "--against applies to `morl bench aggregators` only" in capsys.readouterr().err


def test_every_target_names_a_module_of_its_own():
    assert command.TARGETS == {
        "aggregators": "morl.runners.bench.aggregators",
        "rl": "morl.runners.bench.rl",
        "most": "morl.runners.bench.most",
        "envs": "morl.runners.bench.env_speed",
        "scale": "morl.runners.bench.scale",
    }
    with pytest.raises(SystemExit):  # argparse: not a choice
        _args("nope")


@pytest.fixture
def fake_target(monkeypatch):
    """Every target runs a module that records the thread count it ran with and returns None."""
    seen = []
    module = types.ModuleType("fake_bench_target")
    module.run = lambda args: seen.append(torch.get_num_threads())
    monkeypatch.setitem(sys.modules, "fake_bench_target", module)
    for target in command.TARGETS:
        monkeypatch.setitem(command.TARGETS, target, "fake_bench_target")
    threads = torch.get_num_threads()
    torch.set_num_threads(3)  # a count none of the cases picks by itself
    yield seen
    torch.set_num_threads(threads)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["envs", "--out", " "], "--out must be a file path"),
        (["aggregators", "--check-finite", "skip"], "--check-finite applies with --against only"),
        (["aggregators", "--ks", "2"], "--ks applies with --against or to `morl bench scale` (not --growth) only"),
        (["scale", "--growth", "--methods", "plain"], "--methods applies with --against or to `morl bench scale`"),
        (["scale", "--ds", "1e3"], "--ds applies with --against only"),
        (["envs", "--threads", "0"], "--threads must be >= 1, got 0"),
    ],
)
def test_a_misplaced_or_bad_option_is_one_line_naming_it(fake_target, argv, message):
    with pytest.raises(UserError) as err:
        command.main(_args(*argv))
    assert message in str(err.value) and "\n" not in str(err.value)
    assert fake_target == []  # refused before any benchmark ran


@pytest.mark.parametrize(
    "argv, threads",
    [
        (["rl"], 1),  # side by side: one thread unless told otherwise
        (["aggregators", "--against", "torchjd"], 1),
        (["aggregators"], 3),  # torch's own count
        (["scale", "--ks", "2"], 3),
        (["rl", "--threads", "2"], 2),
        (["aggregators", "--threads", "1"], 1),  # the least allowed
    ],
)
def test_threads_are_set_for_the_benchmark_and_given_back(fake_target, argv, threads):
    assert command.main(_args(*argv)) == 0  # a run returning None is exit 0
    assert fake_target == [threads]
    assert torch.get_num_threads() == 3
