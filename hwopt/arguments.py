"""The one argument checker: every public function of the toolkit checks its inputs with these few functions.

The rules are the same everywhere:
- bool is never a number (True is not 1) and a number is never a bool;
- Python and numpy integer and floating scalars are numbers; NaN and inf are rejected;
- every count has a maximum in LIMITS, so an absurd size fails at once instead of running until killed;
- a bad value raises ValueError("<name> must be <expectation>; got <value>").
Precision and format names are checked by `precision`, which asks hwopt.formats (the one list of formats).
The checks: positive, count, number, between, fraction (numbers); finite_array (arrays and tensors); boolean,
text, one_of, function, instance, precision; named (another check, its errors told under this argument).
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Collection

import numpy as np

# The largest value each kind of count or size may take (one place for all of them).
LIMITS: dict[str, int | float] = {
    "repeats": 10_000,  # timed repeats, warm-up calls, training epochs: each one runs the work again
    "calls": 1_000_000,  # calls of a function inside one timed repeat
    "layers": 1_000,  # layers of a model or of a stack of weights
    "dimension": 1 << 24,  # one side of a matrix or a model: d_model, hidden, rows, cols, vocabulary, n
    "batch": 1 << 20,  # items in one batch
    "tokens": 1 << 24,  # positions of a sequence: seq_len, prompt and answer lengths
    "elements": 1 << 40,  # elements of one tensor
    "items": 10_000_000,  # requests simulated, items pushed through a pipeline, rows of a table shown
    "threads": 1_024,  # worker threads
    "seed": 2**32 - 1,  # random seeds (every generator of numpy and torch takes 0 .. 2**32 - 1)
    "seconds": 3_600.0,  # a duration the toolkit sleeps, waits or measures for
    "megabytes": float(1 << 20),  # an array the toolkit allocates, MB (1 TB)
    "bytes": 1 << 50,  # a size in bytes the toolkit is told, a cache or a memory (1 PiB)
    "learning_rate": 10.0,  # an optimizer's step size (beyond this, training only diverges)
}

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


def _shown(value) -> str:
    return _REPR.repr(value)


def _number_text(x) -> str:
    """1,048,576 for a whole number, else 0.001 or 1e+30."""
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _fail(name: str, expectation: str, value, detail: str = ""):
    raise ValueError(f"{name} must be {expectation}; got {detail or _shown(value)}")


def _is_number(value, integer: bool) -> bool:
    kinds = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    return isinstance(value, kinds) and not isinstance(value, bool | np.bool_)


def _finite(value) -> float | None:
    """float(value) when it is finite, else None (NaN, inf, or an int too large for a float)."""
    try:
        x = float(value)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def _number(name: str, value, expectation: str, *, integer: bool, low=None, high=None,
            low_open: bool = False, high_open: bool = False):
    if not _is_number(value, integer):
        _fail(name, expectation, value)
    x = _finite(value)
    if x is None:
        _fail(name, expectation, value)
    if integer:
        x = int(value)
    if low is not None and (x < low or (low_open and x == low)):
        _fail(name, expectation, value)
    if high is not None and (x > high or (high_open and x == high)):
        _fail(name, expectation, value)
    return x


def positive(name: str, value, *, allow_zero: bool = False, maximum: float | None = None) -> float:
    """A finite number > 0 (>= 0 with allow_zero), at most `maximum` if given, as a float."""
    expectation = f"a finite number {'>= 0' if allow_zero else '> 0'}"
    if maximum is not None:
        expectation += f" and at most {_number_text(maximum)}"
    low_open = not allow_zero
    return float(_number(name, value, expectation, integer=False, low=0, high=maximum, low_open=low_open))


def count(name: str, value, kind: str, *, minimum: int = 1) -> int:
    """An integer from minimum to LIMITS[kind] (e.g. kind 'repeats', 'layers', 'batch'), as an int."""
    limit = LIMITS[kind]
    expectation = f"an integer from {minimum} to {_number_text(limit)} (hwopt.arguments.LIMITS[{kind!r}])"
    return _number(name, value, expectation, integer=True, low=minimum, high=limit)


def number(name: str, value, *, integer: bool = False):
    """A finite number of any sign (an int if `integer`)."""
    return _number(name, value, "a finite integer" if integer else "a finite number", integer=integer)


def between(name: str, value, low: float, high: float, *, integer: bool = False):
    """A finite number (an integer if `integer`) with low <= value <= high."""
    kind = "an integer" if integer else "a number"
    expectation = f"{kind} from {_number_text(low)} to {_number_text(high)}"
    return _number(name, value, expectation, integer=integer, low=low, high=high)


def fraction(name: str, value, *, allow_zero: bool = False, allow_one: bool = True) -> float:
    """A number in (0, 1] by default; allow_zero admits 0, allow_one=False excludes 1."""
    interval = f"{'[' if allow_zero else '('}0, 1{']' if allow_one else ')'}"
    return float(_number(name, value, f"a fraction in {interval}", integer=False, low=0, high=1,
                         low_open=not allow_zero, high_open=not allow_one))


def boolean(name: str, value) -> bool:
    """True or False (numpy's bool too); never a number or a string."""
    if not isinstance(value, bool | np.bool_):
        _fail(name, "True or False", value)
    return bool(value)


def text(name: str, value, *, allow_empty: bool = False) -> str:
    """A str (non-blank unless allow_empty)."""
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        _fail(name, "a str" if allow_empty else "a non-empty str", value)
    return value


def one_of(name: str, value, choices: Collection):
    """value itself when it is one of choices (a bool matches only a bool)."""
    try:
        ok = value in choices and (not isinstance(value, bool) or any(isinstance(c, bool) for c in choices))
    except (TypeError, ValueError):  # unhashable, or an array compared with a choice
        ok = False
    if not ok:
        _fail(name, "one of " + ", ".join(map(repr, choices)), value)
    return value


def function(name: str, value):
    """A callable."""
    if not callable(value):
        _fail(name, "callable", value, type(value).__name__)
    return value


def instance(name: str, value, kind: type | tuple[type, ...]):
    """value itself when it is an instance of kind (a class, or a tuple of classes)."""
    if not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        _fail(name, f"a {names}", value, f"{type(value).__name__} {_shown(value)}")
    return value


def named(name: str, check, value):
    """check(value), a ValueError it raises told as one about `name` (a check written for another argument,
    e.g. a precision checker applied to kv_precision)."""
    try:
        return check(value)
    except ValueError as error:
        if str(error).startswith(f"{name} "):
            raise
        raise ValueError(f"{name}: {error}") from None


def finite_array(name: str, array, *, ndim: int | None = None, integer: bool = False,
                 minimum: float | None = None, strict: bool = False, maximum: float | None = None,
                 allow_empty: bool = False):
    """An array (list, numpy array or torch tensor) of finite numbers, every one >= minimum (> if strict) and
    <= maximum when given; integers only if `integer`. Returns a numpy array (a tensor stays a tensor)."""
    kind = "integers" if integer else "finite numbers"
    expectation = f"{'a ' + str(ndim) + '-D' if ndim is not None else 'an'} array of {kind}"
    if minimum is not None:
        expectation += f" {'>' if strict else '>='} {_number_text(minimum)}"
    if maximum is not None:
        expectation += f"{' and' if minimum is not None else ''} at most {_number_text(maximum)}"
    if _is_tensor(array):
        result = array
        floating = array.is_floating_point()
        if array.dtype.is_complex or str(array.dtype) == "torch.bool" or (integer and floating):
            _fail(name, expectation, array, f"a tensor of {array.dtype}")
        shape, size = tuple(array.shape), array.numel()
    else:
        scalar_given = _is_number(array, False) and ndim not in (None, 0)
        if isinstance(array, str | bytes | dict) or array is None or scalar_given:
            _fail(name, expectation, array)
        if isinstance(array, list | tuple) and any(isinstance(v, bool | np.bool_) for v in array[:10_000]):
            _fail(name, expectation, array)
        try:
            result = np.asarray(array)
        except (TypeError, ValueError):  # ragged lists, objects
            _fail(name, expectation, array)
        if result.dtype.kind not in ("iu" if integer else "iuf") and result.size:
            _fail(name, expectation, array, f"an array of {result.dtype}")
        shape, size, floating = result.shape, result.size, result.dtype.kind == "f"
    if ndim is not None and len(shape) != ndim:
        _fail(name, expectation, array, f"shape {shape}")
    if size == 0:
        if not allow_empty:
            _fail(name, "non-empty, " + expectation, array, "no values")
        return result
    if not _all_within(result, floating, minimum, strict, maximum):
        check = np.asarray(result.detach().cpu().double()) if _is_tensor(result) else result
        bad = ~np.isfinite(check) if floating else np.zeros(check.shape, dtype=bool)
        if minimum is not None:
            bad |= (check <= minimum) if strict else (check < minimum)
        if maximum is not None:
            bad |= check > maximum
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        index = f" at index {where[0] if len(where) == 1 else where}" if where else ""
        _fail(name, expectation, array, f"{check[where].item()!r}{index}")
    return result


def _all_within(values, floating: bool, minimum, strict: bool, maximum) -> bool:
    """Whether every value is finite and within the bounds, in a few passes that allocate no mask."""
    tensor = _is_tensor(values)
    if floating:
        if tensor:
            total = values.detach().sum()
        else:
            with np.errstate(over="ignore", invalid="ignore"):  # an overflow only sends us to the exact test
                total = values.sum()
        if not math.isfinite(float(total)):  # NaN or inf inside, or finite values too large to add up
            finite = values.isfinite().all() if tensor else np.isfinite(values).all()
            if not bool(finite):
                return False
    if minimum is not None:
        low = float(values.min())
        if low < minimum or (strict and low == minimum):
            return False
    return maximum is None or float(values.max()) <= maximum


def _is_tensor(value) -> bool:
    """A torch.Tensor, recognised without importing torch."""
    return type(value).__module__.startswith("torch") and hasattr(value, "detach") and hasattr(value, "dtype")
