"""`imgpipe`: the one command line that fronts everything a user runs by hand.

One module per command; each registers its parser
and imports its heavy dependencies lazily, so `imgpipe --help` is quick. Flag defaults
come from the components' own option types, never from literals here.

Errors: a mistake the user can fix (`errors.is_user_error`) is one line,
`imgpipe: error: ...`, that names the fix; anything else is a bug, also one line, that
says so. `--debug` (or IMGPIPE_DEBUG=1) shows the traceback instead. The arguments are
checked before they are parsed: none longer than a setting may be, none holding a
credential (arguments.py).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from imgpipe.pipelines import termination
from imgpipe.pipelines.cli import arguments, chatter, errors, process_exit, temporary

DEBUG_FLAG = "--debug"
# What separates the options of a command from the Beam options passed through verbatim.
BEAM_SEPARATOR = "--"


class _Parser(argparse.ArgumentParser):
    """Parse errors are one line too, with where to read the usage."""

    def error(self, message: str) -> NoReturn:
        raise errors.UsageError(f"{message}; see '{self.prog} --help'")


def build_parser() -> argparse.ArgumentParser:
    from imgpipe.pipelines.cli import (
        convert,
        engine,
        gc,
        history,
        kfp,
        rollback,
        run,
        stats,
        version,
    )

    parser = _Parser(
        prog="imgpipe",
        description="Folders of labelled images to a trained, servable Keras model, "
        "with TFX and Kubeflow Pipelines.",
    )
    parser.add_argument(
        DEBUG_FLAG,
        action="store_true",
        help="on an error, show the traceback (allowed anywhere before --)",
    )
    parser.add_argument(
        chatter.VERBOSE_FLAG,
        action="store_true",
        help="show the libraries' own logs and warnings too (allowed anywhere before --; "
        f"or {chatter.VERBOSE_ENV}=1)",
    )
    subparsers = parser.add_subparsers(title="subcommands", metavar="COMMAND")
    for module in (version, convert, run, kfp, stats, engine, rollback, history, gc):
        module.register(subparsers)
    _remember_command_parsers(parser)
    return parser


def _remember_command_parsers(parser: argparse.ArgumentParser) -> None:
    """Each (sub)command's parser sets itself as `command_parser`, the innermost winning."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.set_defaults(command_parser=sub)
                _remember_command_parsers(sub)


def _split_argv(argv: Sequence[str]) -> tuple[list[str], list[str], bool, bool]:
    """(the command's arguments, the Beam arguments after --, whether --debug and whether
    --verbose were given)."""
    argv = list(argv)
    passthrough: list[str] = []
    if BEAM_SEPARATOR in argv:
        at = argv.index(BEAM_SEPARATOR)
        argv, passthrough = argv[:at], argv[at + 1 :]
    flags = (DEBUG_FLAG, chatter.VERBOSE_FLAG)
    own = [a for a in argv if a not in flags]
    return own, passthrough, DEBUG_FLAG in argv, chatter.VERBOSE_FLAG in argv


def _beam_args(args: argparse.Namespace, extra: list[str], after: list[str]) -> list[str]:
    """The Beam arguments of a command: options Beam knows, then everything after --.

    Raises:
      UsageError: an argument neither the command nor Beam knows, or Beam arguments
        given to a command that runs no Beam pipeline.
    """
    from imgpipe.pipelines.beam_args import unknown_beam_args

    command: argparse.ArgumentParser = args.command_parser
    own = [s for action in command._actions for s in action.option_strings]
    if not getattr(args, "accepts_extra_args", False):
        if extra or after:
            unknown = extra or after
            raise errors.UsageError(
                f"unrecognized arguments: {errors.quoted_args(extra + after)}"
                f"{_suggestion(unknown, own)}; see '{command.prog} --help'"
            )
        return []
    unknown_to_beam = unknown_beam_args(extra)
    if unknown_to_beam:
        raise errors.UsageError(
            f"unrecognized arguments: {errors.quoted_args(unknown_to_beam)}"
            f"{errors.did_you_mean(unknown_to_beam[0], own)}; see '{command.prog} --help'. "
            f"Apache Beam options it does not know go after '{BEAM_SEPARATOR}'"
        )
    return extra + after


def _suggestion(unknown: list[str], own: list[str]) -> str:
    """What the user may have meant by the first unknown argument: the `--set` form of a
    setting given as a flag (`--epochs 3`), when the command takes --set, else the
    closest of its own flags."""
    if "--set" in own:
        from imgpipe.components.common.runtime import config_loader
        from imgpipe.pipelines.config import PipelineConfig

        found = arguments.set_form(unknown, config_loader.setting_keys(PipelineConfig))
        if found:
            return found
    return errors.did_you_mean(unknown[0], own)


def main(argv: Sequence[str] | None = None) -> int:
    own, after, debug, verbose = _split_argv(sys.argv[1:] if argv is None else argv)
    debug = debug or bool(os.environ.get("IMGPIPE_DEBUG"))
    verbose = verbose or bool(os.environ.get(chatter.VERBOSE_ENV))
    with contextlib.ExitStack() as stack:
        if not verbose:
            stack.enter_context(errors.quiet_library_logs(debug))
            stack.enter_context(chatter.quiet_stderr(enabled=True))
        try:
            arguments.check_argv([*own, *after])
            parser = build_parser()
            args, extra = parser.parse_known_args(own)
            if not hasattr(args, "handler"):  # a command that needs a subcommand
                getattr(args, "command_parser", parser).print_help()
                return 2
            arguments.check_paths(args, args.command_parser)
            args.extra_args = _beam_args(args, extra, after)
            with termination.stop_on_signals(), temporary.command_folder():
                return args.handler(args)
        except termination.Terminated as e:
            print(termination.stop_line(e.signum), file=sys.stderr)
            return e.exit_code
        except Exception as e:
            if debug:
                raise
            print(errors.one_line(e), file=sys.stderr)
            return errors.exit_code(e)


def run_command() -> NoReturn:
    """The `imgpipe` command: main, then the process ends without the interpreter's
    teardown (process_exit). SIGTERM and SIGINT stop it at any moment, within
    termination.STOP_DEADLINE_S."""
    termination.install()
    try:
        code = main()
    except SystemExit as e:  # argparse's usage errors and --help
        code = process_exit.exit_code(e)
    except termination.Terminated as e:  # before main's own handling began
        code = e.exit_code
    except KeyboardInterrupt:
        code = 128 + signal.SIGINT
    except BaseException:  # noqa: B036 - --debug's traceback, then the process ends
        traceback.print_exc()
        code = 1
    process_exit.end_process(code)


if __name__ == "__main__":
    run_command()
