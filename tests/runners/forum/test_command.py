"""``morl forum``: registered, runs both configs briefly."""

from __future__ import annotations

import json

import pytest

from tests.runners.forum.forum_cli import forum_cli


# -- the runner -----------------------------------------------------------------------------------
@pytest.mark.parametrize("config", ["configs/forum_hypercleaning_digits.yaml", "configs/forum_mtl_digits.yaml"])
def test_a_short_run_of_each_config_writes_records_checkpoint_and_logs(tmp_path, config):
    overrides = [
        "iterations=4",
        "eval_every=2",
        f"out_dir={tmp_path}",
        "forum.inner_steps=2",
        "hypercleaning.hidden=[16]",
    ]
    assert forum_cli([config, *overrides]) == 0
    (run_dir,) = list(tmp_path.iterdir())
    final = json.loads((run_dir / "final_metrics.json").read_text())
    assert "forum" in final and len(final) >= 2
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [(json.loads(line)["kind"], json.loads(line)["step"]) for line in lines] == [
        ("train", 2),
        ("eval", 2),
        ("train", 4),
        ("eval", 4),
    ]
    assert (run_dir / "checkpoints" / "last.pt").is_file() and (run_dir / "config.yaml").is_file()
    assert any(p.name.startswith("events.out.tfevents") for p in (run_dir / "tb").iterdir())


def test_forum_is_a_morl_subcommand():
    from morl.runners.cli import SUBCOMMANDS

    assert SUBCOMMANDS["forum"][0] == "morl.runners.forum.command"
