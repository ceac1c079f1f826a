"""hwopt.arguments: the one checker. bool is no number, numpy scalars are, NaN/inf and sizes past LIMITS are
refused, and every message reads '<name> must be <expectation>; got <value>'."""

import math
import re

import numpy as np
import pytest
import torch

from hwopt import arguments


@pytest.mark.parametrize("good", [3, 3.5, np.int64(3), np.float32(3.5), np.float64(1e-300)])
def test_positive_takes_python_and_numpy_numbers(good):
    assert arguments.positive("x", good) == pytest.approx(float(good))
    assert type(arguments.positive("x", good)) is float


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, -math.inf, 10**400, True, np.bool_(True), "3",
                                 None, [], [3], np.array([3.0]), 3j])
def test_positive_refuses(bad):
    with pytest.raises(ValueError, match=r"^bandwidth_gbs must be a finite number > 0; got "):
        arguments.positive("bandwidth_gbs", bad)


def test_positive_allow_zero_and_maximum():
    assert arguments.positive("overhead_ms", 0, allow_zero=True) == 0.0
    assert arguments.positive("io_ms", 5.0, maximum=5.0) == 5.0
    with pytest.raises(ValueError, match=r"io_ms must be a finite number > 0 and at most 5; got 5.5"):
        arguments.positive("io_ms", 5.5, maximum=5)
    with pytest.raises(ValueError, match=">= 0"):
        arguments.positive("overhead_ms", -0.1, allow_zero=True)


def test_count_has_a_documented_maximum_per_kind():
    assert arguments.count("repeats", np.int64(7), "repeats") == 7
    assert type(arguments.count("repeats", np.int64(7), "repeats")) is int
    assert arguments.count("warmup", 0, "repeats", minimum=0) == 0
    limit = arguments.LIMITS["repeats"]
    assert arguments.count("repeats", limit, "repeats") == limit
    message = f"repeats must be an integer from 1 to {limit:,} (hwopt.arguments.LIMITS['repeats']); got 10"
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        arguments.count("repeats", 10**30, "repeats")


@pytest.mark.parametrize("bad", [0, -1, 2.0, 2.5, math.nan, True, False, "2", None, np.float64(2)])
def test_count_refuses_non_integers_bools_and_out_of_range(bad):
    with pytest.raises(ValueError, match="n_layers must be an integer from 1 to"):
        arguments.count("n_layers", bad, "layers")


def test_every_kind_of_count_is_a_positive_integer_or_a_positive_bound():
    assert arguments.LIMITS, "LIMITS holds the maxima in one place"
    for kind, limit in arguments.LIMITS.items():
        assert limit > 0 and math.isfinite(limit), kind
    with pytest.raises(KeyError):
        arguments.count("n", 1, "no such kind")


def test_number_between_and_fraction():
    assert arguments.number("scale", -2.5) == -2.5
    with pytest.raises(ValueError, match="scale must be a finite number; got nan"):
        arguments.number("scale", math.nan)
    assert arguments.between("bits", 16, 2, 16, integer=True) == 16
    with pytest.raises(ValueError, match="bits must be an integer from 2 to 16; got 17"):
        arguments.between("bits", 17, 2, 16, integer=True)
    with pytest.raises(ValueError, match="bits must be an integer from 2 to 16; got 4.0"):
        arguments.between("bits", 4.0, 2, 16, integer=True)
    assert arguments.fraction("fraction", 1) == 1.0
    with pytest.raises(ValueError, match=r"fraction must be a fraction in \(0, 1\]; got 0"):
        arguments.fraction("fraction", 0)
    assert arguments.fraction("reserve_fraction", 0, allow_zero=True, allow_one=False) == 0.0
    with pytest.raises(ValueError, match=r"reserve_fraction must be a fraction in \[0, 1\); got 1"):
        arguments.fraction("reserve_fraction", 1, allow_zero=True, allow_one=False)


def test_boolean_text_function_instance():
    assert arguments.boolean("quick", np.bool_(False)) is False
    for bad in (1, 0, "False", None, math.nan):
        with pytest.raises(ValueError, match="quick must be True or False"):
            arguments.boolean("quick", bad)
    assert arguments.text("label", "x") == "x"
    assert arguments.text("title", "", allow_empty=True) == ""
    for bad in ("", "  ", 3, None):
        with pytest.raises(ValueError, match="label must be a non-empty str"):
            arguments.text("label", bad)
    assert arguments.function("fn", len) is len
    with pytest.raises(ValueError, match="fn must be callable; got int"):
        arguments.function("fn", 3)
    with pytest.raises(ValueError, match="sweep must be a dict or list; got str 'x'"):
        arguments.instance("sweep", "x", (dict, list))


def test_one_of_matches_a_bool_only_to_a_bool():
    assert arguments.one_of("opt_level", "all", ("basic", "all")) == "all"
    assert arguments.one_of("bits", np.int64(4), (4, 8)) == 4
    for bad in (True, 1.5, [], "4", None):
        with pytest.raises(ValueError, match="bits must be one of 4, 8"):
            arguments.one_of("bits", bad, (4, 8))
    with pytest.raises(ValueError, match="value must be one of 1, 2"):
        arguments.one_of("value", True, (1, 2))


def test_finite_array_names_the_first_bad_value_and_where_it_is():
    w = np.ones((3, 4), dtype=np.float32)
    assert arguments.finite_array("w", w, ndim=2) is w
    w[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"w must be a 2-D array of finite numbers; got nan at index \(1, 2"):
        arguments.finite_array("w", w, ndim=2)
    t = torch.zeros(5)
    t[3] = -math.inf
    with pytest.raises(ValueError, match="x must be an array of finite numbers; got -inf at index 3"):
        arguments.finite_array("x", t)
    with pytest.raises(ValueError, match=r"batch_sizes must be a 1-D array of integers >= 1; got 0 at index"):
        arguments.finite_array("batch_sizes", [4, 0], ndim=1, integer=True, minimum=1)
    with pytest.raises(ValueError, match="> 0; got 0.0 at index 0"):
        arguments.finite_array("intensity", [0.0], minimum=0, strict=True)
    with pytest.raises(ValueError, match="at most 255; got 256"):
        arguments.finite_array("q", [256], integer=True, maximum=255)


@pytest.mark.parametrize("bad", ["3", None, True, [True, 2], {"a": 1}, [[1, 2], [3]], ["a"],
                                 np.array([1 + 2j]), torch.tensor([True])])
def test_finite_array_refuses_what_is_no_array_of_numbers(bad):
    with pytest.raises(ValueError, match="x must be"):
        arguments.finite_array("x", bad)


def test_finite_array_shapes_empties_and_integer_tensors():
    with pytest.raises(ValueError, match="shape"):
        arguments.finite_array("x", np.zeros(3), ndim=2)
    with pytest.raises(ValueError, match="x must be non-empty"):
        arguments.finite_array("x", [])
    assert arguments.finite_array("x", [], allow_empty=True).size == 0
    with pytest.raises(ValueError, match="a tensor of torch.float32"):
        arguments.finite_array("prompt", torch.zeros(2), integer=True)
    prompt = torch.tensor([[1, 2]])
    assert arguments.finite_array("prompt", prompt, ndim=2, integer=True, minimum=0) is prompt
    assert float(arguments.finite_array("intensity", 2.5)) == 2.5  # a scalar is a 0-D array


def test_finite_array_of_large_finite_values_is_not_mistaken_for_inf():
    big = np.full(4, 3e38, dtype=np.float32)  # their sum overflows float32; each is finite
    assert arguments.finite_array("w", big) is big


def test_named_tells_another_checkers_error_under_the_argument_name():
    def bytes_per_weight(p):
        raise ValueError(f"precision must be one of fp16, int8; got {p!r}")

    with pytest.raises(ValueError, match=r"^kv_precision: precision must be one of"):
        arguments.named("kv_precision", bytes_per_weight, "fp7")
    assert arguments.named("x", abs, -2) == 2


def test_long_values_are_shown_short():
    with pytest.raises(ValueError) as error:
        arguments.positive("x", "y" * 10_000)
    assert len(str(error.value)) < 200
