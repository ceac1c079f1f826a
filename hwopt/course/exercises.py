"""What the assignments' visible tests share; released with the assignments (students import it too).

The visible tests of a graded notebook teach: they run in the student's notebook and say what is wrong.
Nothing here knows an answer of any assignment.
"""

from __future__ import annotations

__all__ = ["raises_naming"]


def raises_naming(argument: str | tuple[str, ...], function, *args, **kwargs) -> bool:
    """True when function(*args, **kwargs) raises ValueError with a message naming `argument` (or, for a
    tuple of names, any of them); False when it returns or raises a ValueError naming none of them.

    Any other exception goes on up, so that the student sees it with its traceback.
    """
    names = (argument,) if isinstance(argument, str) else argument
    if not (isinstance(names, tuple) and names and all(isinstance(n, str) and n.strip() for n in names)):
        raise ValueError(f"argument must be an argument's name or a tuple of names; got {argument!r}")
    if not callable(function):
        raise ValueError(f"function must be the function to call; got {function!r}")
    try:
        function(*args, **kwargs)
    except ValueError as err:
        return any(name in str(err) for name in names)
    return False
