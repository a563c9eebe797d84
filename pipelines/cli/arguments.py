"""Checks of a command line that need nothing loaded: bounded lengths, no credentials,
and the `--set` form of a setting given as a flag.

`main` checks the raw arguments before argparse sees them (so neither a 10 MB argument
nor a credential is ever echoed), and each command's parsed paths after; a setting's
value is bounded again by its own kind when the config loader builds it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from imgpipe.components.common.runtime import config_loader
from imgpipe.pipelines import credentials

# Metavars of the flags and arguments that hold a path, a URI or a URL.
_PATH_METAVARS = frozenset({"DIR", "FILE", "PATH", "URL"})


def check_argv(argv: Sequence[str]) -> None:
    """Raises ValueError when an argument is longer than any setting may be (the free-text
    bound), quoting only its start, or holds a credential (pipelines/credentials.py),
    naming its option and not its value."""
    for index, arg in enumerate(argv):
        config_loader.check_length(arg, config_loader.TEXT, f"argument {index + 1}")
    credentials.refuse_in_options(argv)


def check_paths(args: argparse.Namespace, command: argparse.ArgumentParser) -> None:
    """Raises ValueError when a path the command was given (a positional argument or a
    flag whose metavar says DIR, FILE, PATH or URL) is longer than a path may be."""
    for action in command._actions:
        if action.option_strings and action.metavar not in _PATH_METAVARS:
            continue
        value = getattr(args, action.dest, None)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                name = action.option_strings[0] if action.option_strings else action.dest.upper()
                config_loader.check_length(item, config_loader.PATH, name)


def set_form(unknown: Sequence[str], keys: Sequence[str]) -> str:
    """' (did you mean --set trainer.epochs=3?)' when the first of the `unknown` arguments
    is a flag named as a setting's last name (`--epochs 3`); else ''.

    Args:
      unknown: the arguments the command did not know, in order.
      keys: every setting's dotted key (`config_loader.setting_keys(PipelineConfig)`).
    """
    if not unknown or not unknown[0].startswith("--"):
        return ""
    flag, sep, value = unknown[0][2:].partition("=")
    if not sep and len(unknown) > 1 and not unknown[1].startswith("-"):
        value = unknown[1]
    name = flag.replace("-", "_")
    matches = [key for key in keys if key.rsplit(".", 1)[-1] == name]
    if not matches:
        return ""
    shown = value if value and len(value) <= 40 else "VALUE"
    return f" (did you mean {' or '.join(f'--set {key}={shown}' for key in matches)}?)"
