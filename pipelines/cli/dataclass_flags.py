"""Command-line flags made from an option dataclass: a new option is one field and its
docstring.

Each field of a settings dataclass (StatisticsConfig, ImageOptions, ...) becomes a flag
named after it (`leakage_threshold` -> `--leakage-threshold`, or a name kept from an
earlier release), typed from its annotation, defaulting to the field's default, and
helped by the first sentence of its entry in the class's Google-style `Attributes:`
section. The parsed values go back through the one loader (config_loader), which
validates them as it validates a config file.

Example:
  flags = add_flags(parser.add_argument_group("statistics"), StatisticsConfig)
  config = config_loader.from_dict(StatisticsConfig, values(args, flags))
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

_ATTRIBUTE = re.compile(r"^(\s+)(\w+): (.*)$")


@dataclasses.dataclass(frozen=True)
class Flag:
    """One field's flag: the field's name is also the parsed value's name."""

    field: str
    option: str


def field_docs(cls: type) -> dict[str, str]:
    """Each field's text in the class docstring's `Attributes:` section, on one line."""
    docs: dict[str, str] = {}
    lines = (cls.__doc__ or "").splitlines()
    if not any(line.strip() == "Attributes:" for line in lines):
        return docs
    start = next(i for i, line in enumerate(lines) if line.strip() == "Attributes:") + 1
    indent, current = None, None
    for line in lines[start:]:
        match = _ATTRIBUTE.match(line)
        if match and (indent is None or len(match.group(1)) == indent):
            indent, current = len(match.group(1)), match.group(2)
            docs[current] = match.group(3).strip()
        elif current and line.strip() and len(line) - len(line.lstrip()) > (indent or 0):
            docs[current] += " " + line.strip()
        elif line.strip():
            break
    return docs


def first_sentence(text: str) -> str:
    """The text up to its first full stop that ends a sentence."""
    match = re.search(r"\.(\s|$)", text)
    return text[: match.start()] if match else text


def add_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    names: Mapping[str, str] | None = None,
    skip: Sequence[str] = (),
) -> list[Flag]:
    """Adds a flag for each field of `cls` whose type a flag can carry (bool, int, float,
    str, or one of them or None); returns them.

    Args:
      parser: the parser or argument group the flags go in.
      cls: the settings dataclass.
      names: field -> flag name without dashes, for flags kept from an earlier release.
      skip: fields that get no flag (the command sets them another way).
    """
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    names = names or {}
    flags = []
    for field in dataclasses.fields(cls):
        kind = _flag_type(hints[field.name])
        if field.name in skip or kind is None:
            continue
        option = "--" + names.get(field.name, field.name).replace("_", "-")
        default = field.default if field.default is not dataclasses.MISSING else None
        text = first_sentence(docs.get(field.name, field.name.replace("_", " ")))
        if kind is bool:
            parser.add_argument(
                option,
                dest=field.name,
                default=default,
                action=argparse.BooleanOptionalAction,
                help=f"{text} (default %(default)s)",
            )
        else:
            parser.add_argument(
                option,
                dest=field.name,
                default=default,
                type=kind,
                metavar=field.name.split("_")[-1].upper(),
                help=f"{text} (default %(default)s)",
            )
        flags.append(Flag(field.name, option))
    return flags


def values(args: argparse.Namespace, flags: Sequence[Flag]) -> dict[str, Any]:
    """The parsed flags as plain data for config_loader.from_dict."""
    return {flag.field: getattr(args, flag.field) for flag in flags}


def _flag_type(hint: Any) -> type | None:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        choices = [a for a in typing.get_args(hint) if a is not type(None)]
        return _flag_type(choices[0]) if len(choices) == 1 else None
    return hint if hint in (bool, int, float, str) else None
