"""predictions: the learner's prediction set beside the measurement, or a reminder to write one first."""

import pytest

from hwopt import predictions


def test_a_number_is_set_beside_the_measurement():
    said = predictions.verdict(2.0, 3.3, "batch-8 latency / batch-1 latency", "x")
    assert said == ("You predicted batch-8 latency / batch-1 latency = 2 x; measured 3.3 x: the measurement "
                    "is 1.6x your prediction.")
    assert predictions.verdict(0, 5.0, "speedup").endswith("measured 5.")


def test_a_missing_prediction_says_to_write_one_first():
    said = predictions.verdict(None, 6.4, "the int4 speedup", "x")
    assert said.startswith("You wrote no prediction of the int4 speedup; measured 6.4 x.")
    assert "before the measurement" in said


def test_a_choice_is_right_or_wrong():
    assert predictions.verdict("Compute", "compute", "the hotspot").endswith("'compute': right.")
    assert predictions.verdict("data", "compute", "the hotspot").endswith("'compute': wrong.")
    assert "no prediction" in predictions.verdict(None, "data", "the hotspot")


@pytest.mark.parametrize(("args", "name"), [
    ((float("nan"), 1.0, "x"), "prediction"), (("2", 1.0, "x"), "prediction"),
    ((True, 1.0, "x"), "prediction"),
    ((1.0, float("inf"), "x"), "measured"), ((1.0, None, "x"), "measured"), ((1.0, 1.0, ""), "what"),
    ((3, "data", "x"), "prediction and measured"), ((1.0, 1.0, "x", 3), "unit"),
])
def test_bad_input_names_the_argument(args, name):
    with pytest.raises(ValueError, match=f"^{name} must be"):
        predictions.verdict(*args)
