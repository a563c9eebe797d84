"""What `imgpipe` prints when a command fails: one line, that says whose fault it is.

A user error is a mistake the user can fix: a bad value (ValueError, which every
settings loader and executor raises naming the value), a path, disk or host that is
not there or not usable (OSError and TensorFlow's file errors), invalid YAML, or a
UserError that a command raises with the fix in its message. It prints as
`imgpipe: error: <message>`. Anything else is a bug: one line that says so, and how to
see the traceback (--debug). Whoever raised it, the line quotes at most the start of a
long value (printable.short): a library that echoes a 10 MB argument prints 200
characters of it.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import re
import sys
from collections.abc import Iterator, Sequence

from imgpipe.components.common.runtime.printable import short

PREFIX = "imgpipe: error: "
# Exit codes: 0 success (`run local`: a model was pushed), 1 a user error or a
# failed run, 2 a command line that does not parse (argparse's), and NOT_PUSHED: the
# run finished and pushed nothing (the Evaluator refused the model, or every step was
# served from TFX's cache), so a scheduler can tell a refused retrain from a push.
NOT_PUSHED_EXIT_CODE = 3
# Beam appends the step to an exception raised in a DoFn; the user needs the message.
_BEAM_STEP = re.compile(r"\s*\[while running '[^']*'\]")
# A job that a portable runner (Flink, Spark) ended in a failed state: the cluster's fault
# (a lost TaskManager, say), not a bug here, and the run published nothing. Beam raises it
# as a RuntimeError whose message its PipelineResult.wait_until_finish writes so.
_FAILED_JOB = re.compile(r"Pipeline (\S+) failed in state (\w+): (.*)", re.DOTALL)
# A word of a message longer than this is a value no one reads whole: it is cut short.
_LONGEST_WORD = 200
_LONG_WORD = re.compile(rf"\S{{{_LONGEST_WORD + 1},}}")
# The unknown arguments a usage error quotes.
_QUOTED_ARGS = 8


class UserError(Exception):
    """A mistake the user can fix; the message names the fix."""

    exit_code = 1


class UsageError(UserError):
    """A command line that does not parse: exit code 2, as argparse's."""

    exit_code = 2


def _user_error_types() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [UserError, ValueError, OSError]
    # Only when loaded: the command that failed loaded them if they raised.
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        errors = tf.errors
        types += [
            errors.NotFoundError,
            errors.PermissionDeniedError,
            errors.AlreadyExistsError,
            errors.FailedPreconditionError,
        ]
    yaml = sys.modules.get("yaml")
    if yaml is not None:
        types.append(yaml.YAMLError)
    return tuple(types)


def user_error(error: BaseException) -> BaseException | None:
    """The user error in `error`'s chain of causes (TFX and Beam wrap them), or None."""
    types = _user_error_types()
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, types):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def message(error: BaseException) -> str:
    """The error's message on one line, without the library noise around it."""
    if isinstance(error, OSError) and error.filename and error.strerror:
        text = f"{error.filename}: {error.strerror}"
    elif hasattr(error, "message") and isinstance(error.message, str):  # TensorFlow's
        text = error.message
    else:
        text = str(error) or type(error).__name__
    text = " ".join(_BEAM_STEP.sub("", text).split())
    return _LONG_WORD.sub(_cut_word, text)


def _cut_word(match: re.Match) -> str:
    """A long word cut short, keeping the punctuation it ends with (`path:`)."""
    word = match.group()
    stem = word.rstrip(":;,.)")
    return short(stem, _LONGEST_WORD) + word[len(stem) :]


def quoted_args(args: Sequence[str]) -> str:
    """Arguments as a message quotes them: the first few, each cut to its start."""
    quoted = " ".join(short(arg) for arg in args[:_QUOTED_ARGS])
    return quoted + (f" ... ({len(args)} in all)" if len(args) > _QUOTED_ARGS else "")


def failed_job(error: BaseException) -> str | None:
    """The one-line message for a runner's failed job in `error`'s chain, or None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, RuntimeError) and (match := _FAILED_JOB.match(str(current))):
            state, reason = match.group(2), match.group(3).strip().splitlines()
            first = " ".join(reason[0].split()) if reason else "no reason given"
            return (
                f"the Beam job failed on the runner ({state}): {first} Nothing was "
                "published; rerun it once the cluster is whole (its logs say more)"
            )
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def one_line(error: BaseException) -> str:
    """What the command prints for an exception it ends with."""
    cause = user_error(error)
    if cause is not None:
        return PREFIX + message(cause)
    if (job := failed_job(error)) is not None:
        return PREFIX + job
    return (
        f"imgpipe: internal error: {type(error).__name__}: {message(error)} "
        "(a bug: rerun with --debug for the traceback, and report it)"
    )


def exit_code(error: BaseException) -> int:
    return getattr(user_error(error), "exit_code", 1)


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """' (did you mean --quality?)' when a choice is close to `word`, else ''."""
    if not word.startswith("-"):
        return ""
    close = difflib.get_close_matches(word.split("=", 1)[0], choices, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


@contextlib.contextmanager
def quiet_library_logs(debug: bool) -> Iterator[None]:
    """Library logs that do not bury the one line main prints.

    Beam's local workers log every start-up at WARNING, and Beam logs an exception
    raised in a DoFn, with its traceback, before raising it to main. TFX and kfp log
    theirs with logging.exception. Without --debug, Beam's errors go (main reports
    them) and every log record loses its traceback; the messages stay.
    """
    beam = logging.getLogger("apache_beam")
    beam_level = beam.level
    make_record = logging.getLogRecordFactory()

    def without_traceback(*args, **kwargs) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        record.exc_info = None
        record.exc_text = record.stack_info = None
        return record

    beam.setLevel(logging.ERROR if debug else logging.CRITICAL)
    if not debug:
        logging.setLogRecordFactory(without_traceback)
    try:
        yield
    finally:
        logging.setLogRecordFactory(make_record)
        beam.setLevel(beam_level)
