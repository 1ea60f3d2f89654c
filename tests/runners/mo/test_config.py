"""``mo`` configs: the shipped ones load with their documented values; bad input is one line
naming the key and what is allowed, and writes nothing."""

from pathlib import Path

import pytest
import yaml

from morl.runners.cli import main as morl
from morl.runners.mo.config import load_mo_config
from morl.runners.shell.kinds import kind_of_config
from tests.runners.mo.runs import QUICK, ROOT

CONFIGS = sorted((ROOT / "configs" / "mo").glob("*.yaml"))


def test_shipped_configs_load_and_carry_the_literature_budget():
    assert [p.name for p in CONFIGS] == [
        "mo_halfcheetah.yaml",
        "mo_halfcheetah_conditioned.yaml",
        "mo_hopper.yaml",
        "mo_hopper_conditioned.yaml",
        "quickstart.yaml",
    ]
    for path in CONFIGS:
        assert kind_of_config(yaml.safe_load(path.read_text())) == "mo"
        load_mo_config(path, [])
    for name, env in (("mo_hopper", "mo-hopper-v5"), ("mo_halfcheetah", "mo-halfcheetah-v5")):
        for variant in ("", "_conditioned"):
            cfg = load_mo_config(ROOT / "configs" / "mo" / f"{name}{variant}.yaml", [])
            agent, run = cfg.agent, cfg.run
            # a population: 6 policies, 6 sub-envs; conditioned: one sub-env, a front at 100 preferences
            envs = agent.collect_envs if agent.conditioned else agent.population
            assert (
                cfg.env.name == env
                and agent.population == (100 if variant else 6)
                and agent.conditioned == bool(variant)
            )
            # MORL-Baselines' 200k environment steps; CAPQL's 256x256, batch 128, lr 3e-4, gamma 0.99, tau 0.005
            assert 200_000 <= run.total_steps * envs < 200_000 + envs
            assert (agent.hidden_sizes, agent.batch_size, agent.actor_lr, agent.critic_lr, agent.gamma, agent.tau) == (
                [256, 256], 128, 3e-4, 3e-4, 0.99, 0.005
            )  # fmt: skip
            assert cfg.front.gamma == 0.99 and cfg.aggregator.name == "linear"
        # CAPQL's training preferences and fixed temperature
        assert (agent.preference_sampling, agent.cone_degrees, agent.alpha_lr, agent.init_temperature) == (
            "cone", 22.5, 0.0, 0.2
        )  # fmt: skip


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("morl: error: "), err
    return err[0]


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["env.name=mt10"], ["env.name", "'mt10' has one reward per task", "mo-hopper-v5"]),
        (["env.name=mo-ant"], ["env.name", "not an environment", "mo-halfcheetah-v5"]),
        (["env.protocol=mtrl"], ["env.protocol", "max_episode_steps, name"]),
        (["aggregator.name=nash"], ["aggregator.name", "nash", "linear", "epo_al"]),
        (
            ["aggregator.name=epo_al", "aggregator.options={preference: [1, 2]}"],
            ["aggregator.options", "agent.preferences"],
        ),
        (["aggregator.name=pcd", "aggregator.options={tau: [0.1, 0.1]}"], ["aggregator.options", "2 objectives"]),
        (["aggregator.name=famo"], ["aggregator.options", "losses after each update"]),
        (["aggregator.options={c: 0.5}"], ["linear takes no options"]),
        (["agent.preferences=[[1, 0]]"], ["agent.preferences has 1 rows", "population=4"]),
        (["agent.preferences=[[1, 0, 0]]", "agent.population=1"], ["agent.preferences", "2 entries per row"]),
        (["env.name=mo-hopper-v5", "agent.population=4"], ["population=4", "allowed: 3, 6, 10"]),
        (["agent.assignment=most"], ["agent.assignment", "fixed, transport"]),
        (["front.eum_weights=30"], ["front.eum_weights", "10, 20, 50, 100"]),
        (["front.gamma=1.5"], ["front.gamma", "[0, 1]"]),
        (["run.total_steps=0"], ["run.total_steps", ">= 1"]),
    ],
)
def test_bad_input_fails_with_one_line_and_writes_nothing(overrides, words, tmp_path, capsys):
    out_dir = tmp_path / "runs"
    assert morl(["train", QUICK, *overrides, f"run.out_dir={out_dir}"]) == 2
    line = _one_error_line(capsys)
    for word in words:
        assert word in line, line
    assert not out_dir.exists()


def test_an_mo_env_in_a_multi_task_config_points_to_the_mo_configs(tmp_path, capsys):
    quick_rl = str(Path(ROOT) / "configs" / "quickstart_point_mass.yaml")
    assert morl(["train", quick_rl, "env.name=mo-hopper-v5", f"run.out_dir={tmp_path}"]) == 2
    assert "configs/mo/quickstart.yaml" in _one_error_line(capsys)
