"""The commands morl prints as hints run as printed: ``morl`` when PATH finds this environment's
own script (an activated venv), else the script's path (``.venv/bin/morl`` after ``make install``
without activating)."""

import os

import pytest

from morl.runners import hints
from morl.runners.errors import UserError
from morl.runners.run_dir import named_run_dir


@pytest.fixture
def venv(tmp_path, monkeypatch):
    scripts = tmp_path / "venv" / "bin"
    scripts.mkdir(parents=True)
    for name in ("morl", "tensorboard"):
        (scripts / name).write_text("#!/bin/sh\n")
        (scripts / name).chmod(0o755)
    monkeypatch.setattr(hints, "scripts_dir", lambda: scripts)
    monkeypatch.chdir(tmp_path)
    return scripts


def test_a_venv_not_on_path_is_named_by_the_script_path(venv, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert hints.command("morl") == os.path.join("venv", "bin", "morl")
    assert hints.command("tensorboard") == os.path.join("venv", "bin", "tensorboard")


def test_an_activated_venv_is_named_by_the_bare_command(venv, monkeypatch):
    monkeypatch.setenv("PATH", f"{venv}:/usr/bin:/bin")
    assert hints.command("morl") == "morl"


def test_a_script_outside_the_working_directory_is_named_by_its_absolute_path(venv, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert hints.command("morl") == str(venv / "morl")


def test_a_command_this_environment_lacks_is_left_bare(venv):
    assert hints.command("not-installed-here") == "not-installed-here"


def test_the_existing_run_dir_hint_names_the_runnable_morl(venv, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text("{}")
    with pytest.raises(UserError, match=f"continue it with `{os.path.join('venv', 'bin', 'morl')} resume "):
        named_run_dir(tmp_path / "run")
