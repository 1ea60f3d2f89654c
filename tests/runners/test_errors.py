"""``UserError`` (runners/errors.py): bad input from the user, which ``morl`` prints as one line
``morl: error: <message>`` with exit status 2, and no traceback."""

import sys
import types

import pytest

from morl.runners import cli
from morl.runners.errors import UserError


def _command_raising(monkeypatch, exc: BaseException) -> None:
    """``morl fake`` as the only subcommand, raising ``exc``."""
    module = types.ModuleType("morl_fake_command")
    module.add_arguments = lambda parser: None

    def main(args):
        raise exc

    module.main = main
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(cli, "SUBCOMMANDS", {"fake": (module.__name__, "a stand-in command")})


def test_a_user_error_is_printed_verbatim_after_morl_error_with_exit_2(monkeypatch, capsys):
    _command_raising(monkeypatch, UserError("seed must be >= 0, got -1"))
    assert cli.main(["fake"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "morl: error: seed must be >= 0, got -1\n" and captured.out == ""


@pytest.mark.parametrize("other", [ValueError("seed must be >= 0, got -1"), KeyError("seed")])
def test_only_a_user_error_is_reported_as_bad_input(monkeypatch, capsys, other):
    # a bug (any other exception) keeps its traceback instead of passing for the user's mistake
    _command_raising(monkeypatch, other)
    with pytest.raises(type(other)):
        cli.main(["fake"])
    assert "morl: error" not in capsys.readouterr().err
