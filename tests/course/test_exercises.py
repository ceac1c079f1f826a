"""course.exercises: the helpers the assignments' visible tests share."""

import pytest

from hwopt.course.exercises import raises_naming


def positive(budget_ms, sizes=()):
    if isinstance(sizes, str):
        raise TypeError("sizes must be a sequence")
    if budget_ms <= 0:
        raise ValueError(f"budget_ms must be positive; got {budget_ms}")
    if len(sizes) > 3:
        raise ValueError("too many")
    return budget_ms


def test_true_only_for_a_value_error_naming_the_argument():
    assert raises_naming("budget_ms", positive, 0)
    assert raises_naming(("sizes", "budget_ms"), positive, -1.0)  # any of the names
    assert not raises_naming("budget_ms", positive, 10)  # no error
    assert not raises_naming("sizes", positive, 10, sizes=[1, 2, 3, 4])  # an error naming nothing
    assert not raises_naming("sizes", positive, 0)  # an error naming another argument


def test_another_exception_reaches_the_student_with_its_traceback():
    with pytest.raises(TypeError, match="sizes must be a sequence"):
        raises_naming("sizes", positive, 10, sizes="text")


@pytest.mark.parametrize("argument, function, named", [
    ("", positive, "argument"), ((), positive, "argument"), (("ok", 3), positive, "argument"),
    (None, positive, "argument"), ("budget_ms", "positive", "function")])
def test_bad_input_names_the_argument(argument, function, named):
    with pytest.raises(ValueError, match=named):
        raises_naming(argument, function, 1)
