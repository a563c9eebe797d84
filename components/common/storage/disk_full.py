"""A full disk, said in one line that names the component and the place.

ENOSPC reaches the user in many shapes: an OSError from Python, TensorFlow's
ResourceExhaustedError from its file system, or text inside the error Beam raises for a
worker. `is_out_of_space` knows them all; `explain` turns any of them into DiskFullError,
a user error (ValueError) whose message says who was writing where and what to do.

Example:
  @disk_full.explained("Pusher", lambda output_dict: output_dict["pushed_model"][0].uri)
  def Do(self, input_dict, output_dict, exec_properties): ...
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

_ENOSPC_TEXT = os.strerror(errno.ENOSPC)  # "No space left on device"
F = TypeVar("F", bound=Callable[..., Any])


class DiskFullError(ValueError):
    """No space left where a step writes: a user error, one line with the fix."""


def is_out_of_space(error: BaseException | None) -> bool:
    """Whether an error, or one that caused it (Beam wraps its workers' errors, often as
    text), is ENOSPC."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            return True
        if _ENOSPC_TEXT in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


# The setting that moves most steps' output elsewhere.
OUTPUT_SETTING = "the output (--pipeline-root, the output folder)"


def explain(
    error: BaseException, who: str, where: str, setting: str = OUTPUT_SETTING
) -> DiskFullError:
    """The one-line error for `who` running out of space while writing under `where`
    (the file the error names, when it names one); `setting` moves it elsewhere."""
    named = _named_file(error)
    place = named or where
    return DiskFullError(
        f"{who}: no space left on the filesystem of {place}; free some space there, or "
        f"point {setting} at a larger filesystem"
    )


def explained(
    who: str, where: Callable[..., str], setting: str = OUTPUT_SETTING
) -> Callable[[F], F]:
    """Decorates a function (an executor's Do) so that running out of space raises
    DiskFullError naming `who`, `where(*args without self)` and the `setting` to change."""

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return function(self, *args, **kwargs)
            except Exception as e:
                if isinstance(e, DiskFullError) or not is_out_of_space(e):
                    raise
                try:
                    place = where(*args, **kwargs)
                except Exception:  # the error is what matters; the place is a courtesy
                    place = "its output"
                raise explain(e, who, place, setting) from e

        return wrapper  # type: ignore[return-value]

    return decorate


def first_output(inputs: Any, outputs: Any, properties: Any) -> str:
    """The place an executor writes: its first output artifact's folder (for `explained`)."""
    del inputs, properties
    return next(iter(outputs.values()))[0].uri


def _named_file(error: BaseException | None) -> str | None:
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.filename:
            return str(error.filename)
        error = error.__cause__ or error.__context__
    return None
