"""Command-line flags made from an option dataclass: a new option is one field and its
docstring.

Each field of a settings dataclass (StatisticsConfig, ImageOptions, ...) becomes a flag
named after it (`leakage_threshold` -> `--leakage-threshold`, or a name kept from an
earlier release), typed from its annotation, defaulting to the field's default, and
helped by the first sentence of its entry in the class's Google-style `Attributes:`
section. The parsed values go back through the one loader (config_loader), which
validates them as it validates a config file.

A field may say more in its metadata, through `config_loader.flag(...)`: the choices it takes, a
metavar, a flag name kept from an earlier release, or the group of flags of which one
at most is given. A tuple of ints is written as comma-separated values (R,G,B).

Example:
  flags = add_flags(parser.add_argument_group("statistics"), StatisticsConfig)
  config = config_loader.from_dict(StatisticsConfig, values(args, flags))
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.runtime.printable import shown

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
    exclusive: dict[str, argparse._MutuallyExclusiveGroup] = {}
    flags = []
    for field in dataclasses.fields(cls):
        kind = _flag_type(hints[field.name])
        if field.name in skip or kind is None:
            continue
        spec = config_loader.flag_spec(field)
        option = "--" + names.get(field.name, spec.name or field.name).replace("_", "-")
        default = field.default if field.default is not dataclasses.MISSING else None
        text = first_sentence(docs.get(field.name, field.name.replace("_", " ")))
        target: Any = parser
        if spec.exclusive is not None:
            if spec.exclusive not in exclusive:
                exclusive[spec.exclusive] = parser.add_mutually_exclusive_group()
            target = exclusive[spec.exclusive]
        if kind is bool:
            target.add_argument(
                option,
                dest=field.name,
                default=default,
                action=argparse.BooleanOptionalAction,
                help=f"{text} (default %(default)s)",
            )
        else:
            shown = ",".join(str(v) for v in default) if isinstance(default, tuple) else default
            shown = "none" if default is None else shown
            target.add_argument(
                option,
                dest=field.name,
                default=default,
                type=kind,
                choices=spec.choices or None,
                metavar=None if spec.choices else spec.metavar or field.name.split("_")[-1].upper(),
                help=f"{text} (default {shown})".replace("%", "%%"),
            )
        flags.append(Flag(field.name, option))
    return flags


def values(args: argparse.Namespace, flags: Sequence[Flag]) -> dict[str, Any]:
    """The parsed flags as plain data for config_loader.from_dict."""
    return {flag.field: getattr(args, flag.field) for flag in flags}


def _flag_type(hint: Any) -> Any:
    """The parser of a flag's text for a field of type `hint`; None where a flag cannot
    carry the type."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        choices = [a for a in typing.get_args(hint) if a is not type(None)]
        return _flag_type(choices[0]) if len(choices) == 1 else None
    if typing.get_origin(hint) is tuple and set(typing.get_args(hint)) == {int}:
        size = len(typing.get_args(hint))
        return functools.partial(_int_tuple, size)
    return hint if hint in (bool, int, float, str) else None


def _int_tuple(size: int, text: str) -> tuple[int, ...]:
    try:
        parsed = tuple(int(part) for part in text.split(","))
    except ValueError:
        parsed = ()
    if len(parsed) != size:
        raise argparse.ArgumentTypeError(
            f"takes {size} comma-separated integers, got {shown(text)}"
        )
    return parsed
