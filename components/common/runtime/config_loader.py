"""The one loader of settings: frozen dataclasses to and from plain data.

Every setting a user may change is a field of a frozen dataclass owned by the component
that reads it (ImageOptions, OutputOptions, StatisticsConfig, TrainerConfig,
EvaluatorConfig), and the pipeline config composes them. This module turns plain data
(parsed YAML, or the JSON a component stores in its exec properties) into those types
and back. It rejects unknown keys, naming the key and the allowed ones, coerces YAML's
scalars to the declared types, bounds the length of every string by its kind (NAME,
PATH, TEXT), and calls each dataclass's `validate()` on the way in, so a bad value fails
when the config is loaded or the pipeline is built. Messages quote values through
`printable.shown`, which cuts them short.

Example:
  options = from_dict(ImageOptions, {"resize": 256, "center_crop": True})
  to_json(options)  # '{"background": [255, 255, 255], ..., "resize": 256, ...}'
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from imgpipe.components.common.runtime.printable import shown

T = TypeVar("T")

# The kinds of string a setting holds, and the longest each may be. A value over its
# bound is refused when it is loaded, before anything echoes it or hands it to TFX.
#   NAME  a pipeline, split or choice name: TFX's pipeline names and Kubernetes' object
#         names (RFC 1123 labels) stop at 63 characters
#   PATH  a path, a URI or an image reference: Linux's PATH_MAX
#   TEXT  free text, such as a Beam option
NAME, PATH, TEXT = "name", "path", "text"
MAX_CHARS: dict[str, int] = {NAME: 63, PATH: 4096, TEXT: 16384}
_KIND_WORDS = {NAME: "a name", PATH: "a path or URI", TEXT: "a free-text setting"}

_METADATA_KEY = "imgpipe_flag"


@dataclasses.dataclass(frozen=True)
class FlagSpec:
    """What a setting's command-line flag needs beside its name, type, default and
    docstring (pipelines/cli/dataclass_flags.py makes the flags)."""

    choices: tuple[str, ...] = ()
    metavar: str | None = None
    name: str | None = None  # the flag's name without dashes, when not the field's
    exclusive: str | None = None  # fields sharing this name: one flag at most is given
    # NAME, PATH or TEXT: the bound of the field's strings; default NAME for a field with
    # choices, else PATH
    kind: str | None = None


def flag(
    choices: Sequence[str] = (),
    metavar: str | None = None,
    name: str | None = None,
    exclusive: str | None = None,
    kind: str | None = None,
) -> dict[str, FlagSpec]:
    """A field's metadata for its flag: `dataclasses.field(default=..., metadata=flag(...))`."""
    return {_METADATA_KEY: FlagSpec(tuple(choices), metavar, name, exclusive, kind)}


def flag_spec(field: dataclasses.Field) -> FlagSpec:
    """What `flag(...)` said of the field's command-line flag (nothing, by default)."""
    return field.metadata.get(_METADATA_KEY, FlagSpec())


def string_kind(field: dataclasses.Field) -> str:
    """The kind (NAME, PATH or TEXT) of the strings `field` holds, for their bound."""
    spec = flag_spec(field)
    return spec.kind or (NAME if spec.choices else PATH)


def check_length(value: str, kind: str, where: str) -> None:
    """Raises ValueError when `value` is longer than MAX_CHARS[kind]; the message names
    `where` and quotes only the start of the value.

    Example:
      check_length("x" * 100, NAME, "pipeline_name")  # ValueError: pipeline_name 'xx...
    """
    limit = MAX_CHARS[kind]
    if len(value) > limit:
        raise ValueError(
            f"{where} {shown(value)} is longer than the {limit:,} characters "
            f"{_KIND_WORDS[kind]} may have; give a shorter one"
        )


def check_lengths(value: Any, where: str = "") -> None:
    """Raises ValueError when a string of the dataclass `value`, or of one nested in it,
    is longer than its kind's bound: a value built in Python, checked as `from_dict`
    checks a loaded one."""
    for field in dataclasses.fields(value):
        _check_strings(getattr(value, field.name), string_kind(field), f"{where}{field.name}")


def _check_strings(value: Any, kind: str, where: str) -> None:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        check_lengths(value, f"{where}.")
    elif isinstance(value, str):
        check_length(value, kind, where)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            check_length(str(key), kind, f"{where}: the key")
            _check_strings(item, kind, f"{where}.{key}")
    elif isinstance(value, tuple | list):
        for i, item in enumerate(value):
            _check_strings(item, kind, f"{where}[{i}]")


def from_dict(cls: type[T], values: Any, where: str = "") -> T:
    """Builds and validates `cls` from plain data.

    Args:
      cls: a dataclass; nested dataclass fields are built from nested mappings.
      values: a mapping of field names to plain values (None: all defaults).
      where: the dotted path of `values` in a larger document, for messages.

    Raises:
      ValueError: an unknown key, a value of the wrong type, a string longer than its
        kind's bound (MAX_CHARS), or one that the dataclass's validate() refuses; the
        message names the key.
    """
    return _build(cls, {} if values is None else values, where, bounded=True)


def from_json(cls: type[T], text: str | None) -> T:
    """`from_dict` of a JSON object; None or "" gives the defaults."""
    return from_dict(cls, json.loads(text) if text else {})


def to_dict(value: Any) -> Any:
    """Plain data (dicts, lists, scalars) that `from_dict` turns back into an equal value."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_dict(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_dict(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [to_dict(v) for v in value]
    return value


def to_json(value: Any) -> str:
    """Compact JSON with sorted keys: equal settings give byte-identical text."""
    return json.dumps(to_dict(value), sort_keys=True)


def to_document(value: Any) -> str:
    """Indented JSON with sorted keys and a final newline: a file's text, byte-identical
    for equal values."""
    return json.dumps(to_dict(value), indent=2, sort_keys=True) + "\n"


def from_document(cls: type[T], text: str, where: str, version: int | tuple[int, ...]) -> T:
    """`cls` from a file's JSON text whose "version" must be `version` (or one of them).

    Raises:
      ValueError: not JSON, another version, or a field that does not fit; the message
        starts with `where` (the file).
    """
    try:
        values = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where} is not JSON: {e}") from None
    found = values.get("version") if isinstance(values, dict) else None
    readable = version if isinstance(version, tuple) else (version,)
    if found not in readable:
        raise ValueError(
            f"{where} has schema version {shown(found)}; this release reads version "
            f"{' or '.join(str(v) for v in readable)}"
        )
    try:
        # A document's strings are what a run wrote (messages, file lists), not settings:
        # no setting's bound applies.
        return _build(cls, values, "", bounded=False)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def setting_keys(cls: type) -> list[str]:
    """The dotted key of every setting of the dataclass `cls`, nested sections walked.

    Example:
      setting_keys(PipelineConfig)  # ['pipeline_name', ..., 'trainer.epochs', ...]
    """
    hints = typing.get_type_hints(cls)
    keys = []
    for field in dataclasses.fields(cls):
        section = hints[field.name]
        if dataclasses.is_dataclass(section):
            keys += [f"{field.name}.{key}" for key in setting_keys(section)]  # type: ignore[arg-type]
        else:
            keys.append(field.name)
    return keys


def field_default(cls: type, name: str) -> Any:
    """The default of one field of a dataclass, for a CLI flag that mirrors it."""
    for field in dataclasses.fields(cls):
        if field.name == name:
            if field.default is not dataclasses.MISSING:
                return field.default
            if field.default_factory is not dataclasses.MISSING:
                return field.default_factory()
            raise ValueError(f"{cls.__name__}.{name} has no default")
    raise ValueError(f"{cls.__name__} has no field {name!r}")


def _name(where: str) -> str:
    return where.rstrip(".") or "the top level"


def _build(cls: type[T], values: Any, where: str, bounded: bool) -> T:
    if not isinstance(values, Mapping):
        raise ValueError(f"{_name(where)} must be a mapping, got {shown(values)}")
    hints = typing.get_type_hints(cls)
    kinds = {f.name: string_kind(f) for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    fields = set(kinds)
    unknown = sorted(str(k) for k in set(values) - fields)
    if unknown:
        close = _closest(unknown[0], sorted(fields))
        hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
        raise ValueError(
            f"unknown key(s) {shown(unknown)} in {_name(where)}{hint}; allowed: {sorted(fields)}"
        )
    kwargs = {
        name: _coerce(hints[name], value, f"{where}{name}", kinds[name] if bounded else None)
        for name, value in values.items()
    }
    try:
        built = cls(**kwargs)  # a class VALIDATED_WHEN_BUILT validates itself here
        validate = getattr(built, "validate", None)
        if validate is not None and not getattr(cls, "VALIDATED_WHEN_BUILT", False):
            validate()
    except TypeError as e:  # a required field is missing
        raise ValueError(f"{_name(where)}: {e}") from None
    except ValueError as e:
        # Messages start with the field's name ("epochs must be ..."), so the path
        # of the section goes in front; other messages get it as a prefix.
        message = str(e)
        named = message.split(" ")[0].split(".")[0] in fields
        raise ValueError(
            f"{where}{message}" if named or not where else f"{_name(where)}: {message}"
        ) from None
    return built


def _closest(word: str, keys: list[str]) -> list[str]:
    """The keys `word` may have meant: the closest spellings (difflib's), then the keys it
    is part of (`leakage` for `leakage_threshold`); three at most."""
    if len(word) > MAX_CHARS[NAME]:
        return []
    close = difflib.get_close_matches(word, keys, n=3)
    if len(word) >= 3:
        close += [key for key in keys if word in key and key not in close]
    return close[:3]


def _coerce(hint: Any, value: Any, where: str, kind: str | None) -> Any:
    """`value` as the type `hint`; `kind` bounds its strings (None: unbounded)."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        choices = [a for a in args if a is not type(None)]
        if len(choices) > 1:  # scalars only, e.g. int | float: kept as they are
            if type(value) not in choices and not (float in choices and type(value) is int):
                raise ValueError(
                    f"{where} must be one of {[c.__name__ for c in choices]}, got {shown(value)}"
                )
            return value
        return _coerce(choices[0], value, where, kind)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, f"{where}.", bounded=kind is not None)  # type: ignore[arg-type]
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ValueError(f"{where} must be a list, got {shown(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(args[0], v, f"{where}[{i}]", kind) for i, v in enumerate(value))
        if len(value) != len(args):
            raise ValueError(f"{where} needs {len(args)} values, got {shown(value)}")
        return tuple(
            _coerce(a, v, f"{where}[{i}]", kind)
            for i, (a, v) in enumerate(zip(args, value, strict=True))
        )
    if origin in (Mapping, dict):
        if not isinstance(value, Mapping):
            raise ValueError(f"{where} must be a mapping, got {shown(value)}")
        if kind is not None:
            for k in value:
                check_length(str(k), kind, f"{where}: the key")
        return {str(k): _coerce(args[1], v, f"{where}.{k}", kind) for k, v in value.items()}
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is str and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)  # YAML reads `cpu_request: 2` as a number
    if hint in (int, float, str, bool) and type(value) is not hint:
        raise ValueError(f"{where} must be {hint.__name__}, got {shown(value)}")
    if hint is str and kind is not None:
        check_length(value, kind, where)
    return value
