"""The ``run:`` section both SAC kinds share (runners/rl/run_section.py): its ranges give one line
naming the key, the value and what is allowed; a loaded config is named after its file."""

from dataclasses import dataclass, field

import pytest

from morl.runners.errors import UserError
from morl.runners.rl.run_section import RunSection, load_train_config, validate_run


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"total_steps": 0}, "run.total_steps must be >= 1, got 0"),
        ({"keep_checkpoints": 0}, "run.keep_checkpoints must be >= 1, got 0"),
        ({"checkpoint_minutes": 0.0}, "run.checkpoint_minutes must be > 0 or null, got 0.0"),
        ({"warmup_steps": -1}, "run.warmup_steps must be >= 0, got -1"),
        ({"max_nonfinite_updates": 0}, "run.max_nonfinite_updates must be >= 1, got 0"),
    ],
)
def test_a_value_out_of_range_names_the_key_and_what_is_allowed(changes, message):
    with pytest.raises(UserError) as exc:
        validate_run(RunSection(**changes))
    assert str(exc.value) == message


def test_the_edges_of_the_ranges_are_allowed():
    validate_run(RunSection(total_steps=1, warmup_steps=0, checkpoint_minutes=None, keep_checkpoints=1))
    validate_run(RunSection(checkpoint_minutes=0.01))


@dataclass
class KindRun(RunSection):
    eval_episodes: int | None = None


@dataclass
class KindConfig:
    run: KindRun = field(default_factory=KindRun)


def test_a_kinds_own_keys_are_checked_after_the_sections():
    rules = {"eval_episodes": ">=1?"}
    validate_run(KindRun(eval_episodes=None), rules)
    with pytest.raises(UserError, match="^run.eval_episodes must be >= 1 or null, got 0$"):
        validate_run(KindRun(eval_episodes=0), rules)
    with pytest.raises(UserError, match="^run.total_steps"):  # the section's first
        validate_run(KindRun(total_steps=0, eval_episodes=0), rules)


def test_a_loaded_config_is_named_after_its_file_unless_it_names_itself(tmp_path):
    checked = []
    path = tmp_path / "mt10_fast.yaml"
    path.write_text("run:\n  total_steps: 50\n")
    cfg = load_train_config(KindConfig, path, ["run.seed=3"], "kind", checked.append)
    assert (cfg.run.name, cfg.run.total_steps, cfg.run.seed) == ("mt10_fast", 50, 3) and checked == [cfg]
    assert load_train_config(KindConfig, path, ["run.name=mine"], "kind", checked.append).run.name == "mine"
    assert load_train_config(KindConfig, None, [], "kind", checked.append).run.name == "kind"  # no file


def test_the_kinds_check_stops_a_bad_config():
    def validate(cfg):
        validate_run(cfg.run)

    with pytest.raises(UserError, match="run.log_every must be >= 1, got 0"):
        load_train_config(KindConfig, None, ["run.log_every=0"], "kind", validate)
