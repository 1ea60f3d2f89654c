"""build(name, **options): names, options, validation, and MoCo's base/base_options."""

import pytest
import torch

from morl.aggregators import Aggregator, available, build, options_of

CORE = ("mean", "mgda", "smg", "pcgrad", "cagrad", "moco")


def test_core_names_are_registered_and_build():
    names = available()
    for name in CORE:
        assert name in names
        agg = build(name)
        assert isinstance(agg, Aggregator)
        assert "check_finite" in options_of(name)
        assert repr(agg).startswith(type(agg).__name__)


def test_unknown_name_and_option_list_the_valid_ones():
    with pytest.raises(ValueError, match="valid names: .*cagrad.*mgda"):
        build("mgdaa")
    with pytest.raises(ValueError, match="valid options: .*c.*rescale"):
        build("cagrad", cc=0.5)


@pytest.mark.parametrize(
    "name, options, fragment",
    [
        ("cagrad", {"c": -1.0}, "c=-1.0"),
        ("cagrad", {"rescale": 3}, "allowed: 0, 1, 2"),
        ("mgda", {"max_iter": 0}, "max_iter"),
        ("pcgrad", {"reduction": "max"}, "allowed: mean, sum"),
        ("mean", {"reduction": "avg"}, "allowed: mean, sum"),
        ("moco", {"lambda_map": "sigmoid"}, "allowed: proj, softmax, exact"),
        ("moco", {"order": "random"}, "allowed: paper, code"),
        ("moco", {"grad_norm": "l1"}, "allowed: none, l2, loss, l2_loss"),
        ("moco", {"preset": "mt10"}, "allowed: toy, cityscapes, nyuv2, office"),
        ("moco", {"beta0": 0.0}, "beta0"),
        ("moco", {"y_radius": -1.0}, "y_radius"),
        ("moco", {"check_finite": "maybe"}, "allowed: raise, skip, off"),
    ],
)
def test_bad_option_values_raise_one_line(name, options, fragment):
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(").replace(".", r"\.")) as err:
        build(name, **options)
    assert "\n" not in str(err.value)


def test_moco_base_is_validated_like_build():
    with pytest.raises(ValueError, match="base='cagrd' is not valid; allowed: .*cagrad"):
        build("moco", base="cagrd")
    with pytest.raises(ValueError, match="base_options: unknown option.*valid options: .*rescale"):
        build("moco", base="cagrad", base_options={"cc": 0.9})
    with pytest.raises(ValueError, match="base_options needs base"):
        build("moco", base_options={"c": 0.9})
    with pytest.raises(ValueError, match="base_options: CAGrad option c"):
        build("moco", base="cagrad", base_options={"c": -2})


@pytest.mark.parametrize("base", [n for n in CORE] + ["epo_al"])
def test_moco_accepts_every_registered_base(base, gen):
    if base not in available():
        pytest.skip(f"{base} not registered")
    agg = build("moco", base=base)
    j = torch.randn(3, 6, generator=gen)
    losses = torch.rand(3, generator=gen) + 0.5
    out = agg(j, losses)
    assert out.shape == (6,) and torch.isfinite(out).all()
    # the base aggregator is a child module: its state (if any) is saved under "base."
    assert agg.base in list(agg.children())
    state = agg.state_dict()
    clone = build("moco", base=base)
    clone.load_state_dict(state)
    assert sorted(clone.state_dict()) == sorted(state)


def test_moco_cagrad_options_reach_the_base():
    agg = build("moco", base="cagrad", base_options={"c": 0.9, "rescale": 0})
    assert agg.base.c == 0.9 and agg.base.rescale == 0
