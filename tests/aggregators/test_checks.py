"""Every aggregator option refuses a bad value with one line that names the method (its class),
the option, the value and what is allowed: ``<Class> option <name>=<value> is not valid;
allowed: ...`` (the contract of ``morl.aggregators._checks``; configs surface it verbatim).
Table-driven over ``options_of``: each numeric option gets NaN (never finite), each string
option a value no method accepts; wrapper options (``base``, ``inner``) are left to their
methods' own tests. Mutation testing found these lines unpinned file by file."""

import math
import re

import pytest

from morl.aggregators import aggregator_class, available, build, options_of

NUMERIC = [
    (name, key)
    for name in available()
    for key, default in options_of(name).items()
    if isinstance(default, (int, float)) and not isinstance(default, bool)
]
TEXT = [
    (name, key)
    for name in available()
    for key, default in options_of(name).items()
    if isinstance(default, str) and key != "check_finite"
]


@pytest.mark.parametrize("name, key", NUMERIC, ids=[f"{n}-{k}" for n, k in NUMERIC])
def test_a_nan_option_names_the_method_and_the_option(name, key):
    owner = aggregator_class(name).__name__
    with pytest.raises(ValueError) as err:
        build(name, **{key: math.nan})
    line = str(err.value)
    assert "\n" not in line
    assert re.match(rf"^{owner} option {key}=nan is not valid; allowed: \S", line), line


@pytest.mark.parametrize("name, key", TEXT, ids=[f"{n}-{k}" for n, k in TEXT])
def test_an_unknown_choice_names_the_method_the_option_and_the_choices(name, key):
    owner = aggregator_class(name).__name__
    with pytest.raises(ValueError) as err:
        build(name, **{key: "no-such-choice"})
    line = str(err.value)
    assert re.match(rf"^{owner} option {key}='no-such-choice' is not valid; allowed: \S", line), line
    assert repr(options_of(name)[key]).strip("'") in line  # the default is among the choices named


@pytest.mark.parametrize("name", available())
def test_check_finite_names_the_three_policies(name):
    with pytest.raises(ValueError, match=r"^check_finite='maybe' is not valid; allowed: raise, skip, off$"):
        build(name, check_finite="maybe")


INTEGER = [(name, key) for name, key in NUMERIC if type(options_of(name)[key]) is int]


@pytest.mark.parametrize("name, key", INTEGER, ids=[f"{n}-{k}" for n, k in INTEGER])
def test_an_integer_option_refuses_a_fraction(name, key):
    owner = aggregator_class(name).__name__
    with pytest.raises(ValueError, match=rf"^{owner} option {key}=2.5 is not valid; allowed: \S"):
        build(name, **{key: 2.5})


MAX_ITER = [name for name in available() if "max_iter" in options_of(name)]


@pytest.mark.parametrize("name", MAX_ITER)
def test_one_iteration_is_a_valid_max_iter_and_zero_is_not(name):
    build(name, max_iter=1)
    with pytest.raises(
        ValueError,
        match=rf"^{aggregator_class(name).__name__} option max_iter=0 is not valid; allowed: a finite int >= 1$",
    ):
        build(name, max_iter=0)


@pytest.mark.parametrize("name, key", [("dwa", "temperature"), ("stch", "mu")])
def test_a_zero_divisor_is_refused(name, key):
    """DWA's T and STCH's μ divide the losses: 0 is refused (strictly positive), 1e-3 accepted."""
    build(name, **{key: 1e-3})
    with pytest.raises(
        ValueError,
        match=rf"^{aggregator_class(name).__name__} option {key}=0 is not valid; allowed: a finite number > 0$",
    ):
        build(name, **{key: 0})


def test_losses_and_log_variances_may_be_negative():
    """FAMO's lower bounds of the losses (an RL loss can be negative) and UW's initial log σ²
    take any finite value."""
    build("famo", min_losses=-3.5)
    build("uw", init_log_var=-2.0)


BOOLEAN = [
    (name, key) for name in available() for key, default in options_of(name).items() if isinstance(default, bool)
]


@pytest.mark.parametrize("name, key", BOOLEAN, ids=[f"{n}-{k}" for n, k in BOOLEAN])
def test_a_switch_refuses_anything_but_true_or_false(name, key):
    owner = aggregator_class(name).__name__
    with pytest.raises(ValueError, match=rf"^{owner} option {key}='yes' is not valid; allowed: \S"):
        build(name, **{key: "yes"})


#: values outside an option's range (beyond NaN, above), with the line each must raise
OUT_OF_RANGE = [
    (
        "excess_mtl",
        {"robust_step_size": 0.0},
        r"ExcessMTL option robust_step_size=0.0 is not valid; allowed: a finite number > 0",
    ),
    ("excess_mtl", {"warmup": -1}, r"ExcessMTL option warmup=-1 is not valid; allowed: a finite int >= 0"),
    ("excess_mtl", {"warmup": 1.5}, r"warmup=1.5 is not valid"),
    ("pcd", {"tau": 1.5}, r"PCD option tau=1.5 is not valid; allowed: a number in \[0, 1\] or a list of them"),
    ("pcd", {"tau": [0.1, -0.1]}, r"tau=\[0.1, -0.1\] is not valid"),
    ("pcd", {"beta": 1.0}, r"PCD option beta=1.0 is not valid; allowed: a number in \[0, 1\)"),
    ("pcd", {"eps": -1.0}, r"PCD option eps=-1.0 is not valid"),
    ("pcd", {"max_iter": 0}, r"PCD option max_iter=0 is not valid"),
    ("sdmgrad", {"momentum": 1.0}, r"SDMGrad option momentum=1.0 is not valid; allowed: a number in \[0, 1\)"),
    ("sdmgrad", {"n_steps": 0}, r"SDMGrad option n_steps=0 is not valid; allowed: a finite int >= 1"),
    ("epo_al", {"mu": 0.0}, r"EPOAL option mu=0.0 is not valid; allowed: a finite number > 0"),
]


@pytest.mark.parametrize(
    "name, options, message", OUT_OF_RANGE, ids=[f"{n}-{next(iter(o))}" for n, o, _ in OUT_OF_RANGE]
)
def test_a_value_out_of_range_names_what_is_allowed(name, options, message):
    with pytest.raises(ValueError, match=message):
        build(name, **options)


#: float options whose default is a whole number: the same value written as an int is valid
WHOLE = [
    (name, key) for name, key in NUMERIC if type(options_of(name)[key]) is float and options_of(name)[key] % 1 == 0
]


@pytest.mark.parametrize("name, key", WHOLE, ids=[f"{n}-{k}" for n, k in WHOLE])
def test_an_int_given_to_a_float_option_is_kept_as_a_float(name, key):
    """``lr: 10`` in a config is the float 10.0 (an int only for int options such as ``seed``)."""
    default = options_of(name)[key]
    value = getattr(build(name, **{key: int(default)}), key)
    values = value if isinstance(value, tuple) else (value,)  # GradDrop's leak: one per objective
    assert values and all(type(v) is float and v == default for v in values), value
