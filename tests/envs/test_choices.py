"""The environments' choice lists (morl/envs/choices.py): the tuples are the config Literals'
values, and the env factory refuses anything else naming exactly these."""

import pytest

from morl.envs import make_env
from morl.envs.choices import NORMALIZATION_CHOICES, PROTOCOLS, REWARD_FUNCTION_VERSIONS


def test_the_choices_are_the_documented_ones():
    assert PROTOCOLS == ("mtrl", "metaworld_v3")
    assert REWARD_FUNCTION_VERSIONS == ("v1", "v2")
    assert NORMALIZATION_CHOICES == ("none", "exponential", "running")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"protocol": "mt"}, "unknown protocol 'mt'; valid protocols: mtrl, metaworld_v3"),
        ({"reward_normalization": "z"}, "unknown reward_normalization 'z'; valid: none, exponential, running"),
    ],
)
def test_make_env_refuses_other_values_naming_the_choices(kwargs, message):
    with pytest.raises(ValueError) as err:
        make_env("point_mass", seed=0, **kwargs)
    assert str(err.value) == message
