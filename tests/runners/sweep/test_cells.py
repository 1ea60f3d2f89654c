"""A spec expanded into cells: grid, list entries, bases and seeds give named cells with their
overrides; a key set in two places stops the expansion."""

import pytest

from morl.runners.errors import UserError
from morl.runners.sweep.cells import expand, override_text
from morl.runners.sweep.spec import load_spec
from tests.runners.sweep.sweeps import QUICK, ROOT, write_spec

REGRESSION = str(ROOT / "configs" / "supervised_regression_mgda.yaml")


def test_grid_and_seeds_give_named_cells_with_the_seed_at_the_kinds_key(tmp_path):
    path = write_spec(
        tmp_path,
        grid={"aggregator.name": ["mgda", "pcgrad"], "agent.hidden_sizes": [[32, 32]]},
        seeds=[1, 2, 3],
        overrides={"run.total_steps": 50, "aggregator.options": {}},
    )
    cells = expand(load_spec(path))
    # a grid key with one value is the same in every cell: in the group, not in the name
    assert [c.name for c in cells] == ["mgda-s1", "mgda-s2", "mgda-s3", "pcgrad-s1", "pcgrad-s2", "pcgrad-s3"]
    assert {c.command for c in cells} == {"train"}  # from the config's kind
    assert cells[4].overrides == (
        "run.total_steps=50",
        "aggregator.options={}",
        "aggregator.name=pcgrad",
        "agent.hidden_sizes=[32, 32]",
        "run.seed=2",
    )
    assert cells[4].group == {"aggregator.name": "pcgrad", "agent.hidden_sizes": [32, 32]} and cells[4].seed == 2
    sup = expand(load_spec(write_spec(tmp_path, base=REGRESSION, seeds=[0])))
    assert (sup[0].command, sup[0].overrides, sup[0].name) == ("supervised", ("seed=0",), "s0")


def test_list_entries_bases_and_unsafe_values_give_unique_safe_names(tmp_path):
    path = write_spec(
        tmp_path,
        base=[QUICK, REGRESSION],
        command="train",
        list=[
            {"aggregator.name": "moco", "aggregator.options": {"base": "cagrad"}},
            {"aggregator.name": "a/b"},
            {"aggregator.name": "a b"},
        ],
        grid={"agent.actor_lr": [0.001, 0.0003]},
    )
    names = [c.name for c in expand(load_spec(path))]
    assert names[:2] == [
        "quickstart_point_mass-moco-base_cagrad-actor_lr0.001",
        "quickstart_point_mass-moco-base_cagrad-actor_lr0.0003",
    ]
    assert names[2:6] == [
        "quickstart_point_mass-a_b-actor_lr0.001",
        "quickstart_point_mass-a_b-actor_lr0.0003",
        "quickstart_point_mass-a_b-actor_lr0.001-2",
        "quickstart_point_mass-a_b-actor_lr0.0003-2",
    ]
    assert len(set(names)) == len(names) == 12
    # empty values say nothing; a mapping is named item by item
    path = write_spec(
        tmp_path,
        list=[
            {"aggregator.name": "mean", "aggregator.options": {}},
            {"aggregator.name": "cagrad", "aggregator.options": {"c": 0.5}},
        ],
        seeds=[0],
    )
    assert [c.name for c in expand(load_spec(path))] == ["mean-s0", "cagrad-c0.5-s0"]
    assert all(n.replace("-", "").replace("_", "").replace(".", "").isalnum() for n in names)


def test_override_text_reads_back_as_the_value():
    from morl.runners.config import apply_overrides  # what `morl train ... k=v` parses them with

    values = [
        "mgda",
        "true",
        "1",
        "",
        " x",
        "a: b",
        "*x",
        "@x",
        "a=b",
        0.5,
        1e-5,
        True,
        None,
        [32, 32],
        {"c": 0.5, "base": "cagrad"},
    ]
    for value in values:
        assert apply_overrides({}, [override_text("k", value)])["k"] == value
    assert [override_text("k", v) for v in ("mgda", "true", [32, 32])] == ["k=mgda", "k='true'", "k=[32, 32]"]


@pytest.mark.parametrize(
    "keys, message",
    [
        ({"grid": {"run.seed": [1]}, "seeds": [0]}, "run.seed is set both in grid and in seeds"),
        ({"grid": {"a.b": [1]}, "overrides": {"a.b": 2}}, "a.b is set both in overrides and in grid"),
    ],
)
def test_a_key_set_twice_stops_the_expansion(tmp_path, keys, message):
    with pytest.raises(UserError, match=message):
        expand(load_spec(write_spec(tmp_path, **keys)))
