"""The RL config: every shipped config loads, overrides nest, bad input fails with one clear line."""

from pathlib import Path

import pytest

from morl.runners.errors import UserError
from morl.runners.rl.config import RLConfig, load_rl_config

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
MT10_CONFIGS = {
    "mt10_mtsac.yaml": ("mean", False),
    "mt10_mhsac.yaml": ("mean", True),
    "mt10_pcgrad.yaml": ("pcgrad", False),
    "mt10_cagrad.yaml": ("cagrad", False),
    "mt10_moco.yaml": ("moco", False),
    "mt10_cagrad_moco.yaml": ("moco", False),
    "mt10_mgda.yaml": ("mgda", False),
    "mt10_epo_al.yaml": ("epo_al", False),
    "mt10_nash_mtl.yaml": ("nash_mtl", False),
    "mt10_upgrad.yaml": ("upgrad", False),
    "mt10_imtl_g.yaml": ("imtl_g", False),
    "mt10_aligned_mtl.yaml": ("aligned_mtl", False),
    "mt10_famo.yaml": ("famo", False),
}


def test_every_mt10_config_is_checked():
    recipes = sorted(p.name for p in CONFIGS.glob("mt10_*.yaml") if p.name != "mt10_cpu.yaml")
    assert recipes == sorted(MT10_CONFIGS)


def test_the_cpu_recipe_is_mt10_with_a_smaller_learner_on_the_cpu():
    cfg = load_rl_config(CONFIGS / "mt10_cpu.yaml")
    assert (cfg.env.name, cfg.env.protocol, cfg.run.device) == ("mt10", "mtrl", "cpu")
    assert sum(cfg.agent.hidden_sizes) < 1200 and cfg.agent.batch_size < 1280  # the seeds' 3x400, 1280
    # one evaluation episode: under the mtrl protocol more repeat it exactly (test_envs_metaworld)
    assert cfg.run.checkpoint_minutes is not None and cfg.run.eval_episodes == 1


@pytest.mark.parametrize("name", sorted(MT10_CONFIGS))
def test_mt10_configs_carry_the_seed_recipe(name):
    cfg = load_rl_config(CONFIGS / name)
    aggregator, multi_head = MT10_CONFIGS[name]
    assert cfg.env.name == "mt10" and cfg.env.protocol == "mtrl"
    assert cfg.aggregator.name == aggregator and cfg.agent.multi_head is multi_head
    a = cfg.agent
    assert a.hidden_sizes == [400, 400, 400] and a.batch_size == 1280 and a.buffer_capacity == 1_000_000
    assert (a.actor_lr, a.critic_lr, a.alpha_lr) == (3e-4, 3e-4, 3e-4)
    assert (a.gamma, a.tau, a.init_temperature) == (0.99, 0.005, 1.0)
    r = cfg.run
    assert r.total_steps == 2_000_000 and r.eval_every == 10_000 and r.warmup_steps == 1500
    assert r.updates_per_step == 1 and r.device == "auto" and r.name == Path(name).stem


# Reproduction configs (docs/mtsac.md): the seeds' Table 9 rows as mtrl ran them, and Meta-World+.
# row -> (aggregator, multi_head, task_input, temperature, losses aggregated beyond the actor)
MTRL_CONFIGS = {
    "mtsac.yaml": ("mean", False, "none", "per_task", False),
    "mtsac_task_encoder.yaml": ("mean", False, "onehot", "per_task", False),
    "mhsac.yaml": ("mean", True, "none", "per_task", False),
    "pcgrad.yaml": ("pcgrad", False, "none", "shared", True),
    "cagrad.yaml": ("cagrad", False, "none", "shared", True),
    "moco.yaml": ("moco", False, "none", "shared", True),
    "cagrad_moco.yaml": ("moco", False, "none", "shared", True),
}
MWPLUS_CONFIGS = {  # method -> (aggregator, multi_head, critic aggregated)
    "mtsac.yaml": ("mean", False, False),
    "mhsac.yaml": ("mean", True, False),
    "pcgrad.yaml": ("pcgrad", False, True),
    "cagrad.yaml": ("cagrad", False, True),
    "moco.yaml": ("moco", False, True),
    "cagrad_moco.yaml": ("moco", False, True),
}


def test_every_reproduction_config_is_checked():
    assert sorted(p.name for p in (CONFIGS / "mt10_mtrl").glob("*.yaml")) == sorted(MTRL_CONFIGS)
    assert sorted(p.name for p in (CONFIGS / "mt10_mwplus").glob("*.yaml")) == sorted(MWPLUS_CONFIGS)


def _seed_budget(cfg):
    a, r = cfg.agent, cfg.run
    assert a.hidden_sizes == [400, 400, 400] and a.batch_size == 1280 and a.buffer_capacity == 1_000_000
    assert (a.actor_lr, a.critic_lr, a.alpha_lr, a.gamma, a.tau, a.init_temperature) == (
        3e-4,
        3e-4,
        3e-4,
        0.99,
        0.005,
        1.0,
    )
    assert r.total_steps == 2_000_000 and r.updates_per_step == 1 and a.critic == "shared"


@pytest.mark.parametrize("name", sorted(MTRL_CONFIGS))
def test_mtrl_configs_are_table_9_as_mtrl_ran_it(name):
    cfg = load_rl_config(CONFIGS / "mt10_mtrl" / name)
    aggregator, multi_head, task_input, temperature, aggregated = MTRL_CONFIGS[name]
    _seed_budget(cfg)
    a, e, r = cfg.agent, cfg.env, cfg.run
    assert cfg.aggregator.name == aggregator and a.multi_head is multi_head
    assert (a.task_input, a.temperature) == (task_input, temperature)
    assert a.aggregate_critic is aggregated and a.aggregate_temperature is aggregated
    assert (a.log_prob_clamp, a.init) == (1e-6, "xavier")
    assert (e.name, e.protocol, e.reward_function_version, e.reward_normalization) == (
        "mt10",
        "mtrl",
        "v1",
        "exponential",
    )
    # mtrl's eval check (every 10000) only runs inside its every-150-steps check: lcm = 30000
    assert r.eval_every == 30_000 and r.eval_episodes == 1 and r.warmup_steps == 1500 and r.warmup_catch_up


@pytest.mark.parametrize("name", sorted(MWPLUS_CONFIGS))
def test_mwplus_configs_carry_the_meta_world_plus_protocol(name):
    cfg = load_rl_config(CONFIGS / "mt10_mwplus" / name)
    aggregator, multi_head, aggregated = MWPLUS_CONFIGS[name]
    _seed_budget(cfg)
    a, e, r = cfg.agent, cfg.env, cfg.run
    assert cfg.aggregator.name == aggregator and a.multi_head is multi_head and a.aggregate_critic is aggregated
    assert (a.task_input, a.temperature) == ("onehot", "per_task")
    assert (e.protocol, e.max_episode_steps, e.reward_function_version, e.reward_normalization) == (
        "metaworld_v3",
        None,
        "v2",
        "none",
    )  # None: the protocol's 500 steps
    assert r.eval_episodes == 50 and r.eval_every == 20_000 and r.warmup_steps == 4000 and not r.warmup_catch_up


def test_cagrad_configs_use_c_0_9():
    assert load_rl_config(CONFIGS / "mt10_cagrad.yaml").aggregator.options["c"] == 0.9
    combo = load_rl_config(CONFIGS / "mt10_cagrad_moco.yaml").aggregator.options
    assert combo["base"] == "cagrad" and combo["base_options"]["c"] == 0.9


def test_quickstart_config_is_the_fast_env():
    cfg = load_rl_config(CONFIGS / "quickstart_point_mass.yaml")
    assert cfg.env.name == "point_mass" and cfg.run.total_steps <= 5000


def test_nested_overrides_and_types():
    cfg = load_rl_config(
        CONFIGS / "mt10_cagrad.yaml",
        [
            "agent.batch_size=256",
            "run.total_steps=2e3",
            "agent.actor_lr=1e-3",
            "aggregator.options.c=0.5",
            "run.name=mine",
            "agent.hidden_sizes=[64,64]",
        ],
    )
    assert cfg.agent.batch_size == 256 and cfg.run.total_steps == 2000 and cfg.agent.actor_lr == 1e-3
    assert cfg.aggregator.options == {"c": 0.5} and cfg.run.name == "mine" and cfg.agent.hidden_sizes == [64, 64]


def test_defaults_without_a_file():
    cfg = load_rl_config(None, ["env.name=point_mass"])
    assert isinstance(cfg, RLConfig) and cfg.aggregator.name == "mean" and cfg.run.name == "run"


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["agent.batch_sise=3"], ["agent.batch_sise", "batch_size"]),
        (["run.total_steps=many"], ["run.total_steps", "integer"]),
        (["agent.multi_head=3"], ["agent.multi_head", "true or false"]),
        (["aggregator.name=adam"], ["aggregator.name", "cagrad", "pcgrad"]),
        (["aggregator.options.cc=1"], ["aggregator.options", "cc", "c"]),
        (["env.name=mt11"], ["env.name", "mt10", "point_mass"]),
        (["env.name=mo-hopper-v5"], ["env.name", "reward vector", "point_mass"]),
        (["env.protocol=v2"], ["env.protocol", "metaworld_v3"]),
        (["agent.aggregate=all"], ["agent.aggregate", "actor_trunk"]),
        (["agent.critic=both"], ["agent.critic", "shared"]),
        (["env.reward_function_version=v3"], ["env.reward_function_version", "v1"]),
        (["env.reward_normalization=welford"], ["env.reward_normalization", "exponential"]),
        (["env.reward_function_version=v1"], ["env.reward_function_version", "Meta-World"]),
        (["run.log_every=0"], ["run.log_every", ">= 1"]),
        (["run.device=tpu"], ["tpu", "cpu"]),
        (["agent.tau=2"], ["agent.tau"]),
        (["nonsense=1"], ["nonsense", "agent", "run"]),
    ],
)
def test_bad_values_name_the_key_and_what_is_allowed(overrides, words):
    with pytest.raises(UserError) as exc:
        load_rl_config(CONFIGS / "quickstart_point_mass.yaml", overrides)
    message = str(exc.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_missing_file():
    with pytest.raises(UserError, match="does not exist"):
        load_rl_config("configs/no_such_config.yaml")
