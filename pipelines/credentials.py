"""No credential in a setting or an option, in any form.

A credential written into a setting or an option is copied wherever that value goes:
into the arguments of each Beam executor of a compiled package (three copies), into
TFX's logs (LocalDagRunner logs its deployment config, Beam options and all), and into
the summaries and error lines that echo paths and URLs. So none is taken:

- an option whose name says it holds one (`credential_flags`:
  `--s3_secret_access_key`, `--my_service_password`, ...);
- user-info in a URL: `https://KEY:SECRET@minio:9000`, `http://user@flink:8081`;
- a `name=value` pair whose name says it holds a secret (`token=...`, `password=...`,
  `AccountKey=...`), inside an option's value or a URL's query, and its JSON form;
- a value that is a key, whatever the option is called: an AWS access key id, a PEM
  private key, a GitHub or Google API token.

The pipeline config (`pipelines/config.py`) and the command line (`imgpipe`, before it
parses its arguments) refuse each with one line that names the setting or the option,
never the value, and points to the Kubernetes Secret the steps read their object-store
keys from (OBJECT_STORE_SECRET), as the compiler's refusal does
(kubeflow/security.refuse_credentials). This is the one rule: both sides use it.

Example:
  problem("https://AKIAX:SECRET@minio:9000")  # 'a user name or password in its URL'
  settings_problems({"beam_args": ["--flink_master=http://u:p@flink:8081"]})
  # ['beam_args --flink_master (a user name or password in its URL)']
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from imgpipe.components.common.runtime.printable import short

# A URL's user-info: what is between "://" and an "@" before the path. (No scheme in the
# pattern: matched from each letter of a long word, it would take quadratic time.)
_URL_USER_INFO = re.compile(r"://[^/?#@\s]*@")
# Names of values that are secrets, as options, query parameters and connection strings
# spell them (Azure's AccountKey and SharedAccessSignature, HTTP's Authorization).
_SECRET_NAME = re.compile(
    r"secret|passw(or)?d|pwd|token|credential|private_?key|access_?key|api_?key|"
    r"account_?key|shared_?access_?signature|authorization",
    re.IGNORECASE,
)
# name=value pairs in an option's value, a URL's query or a connection string.
_PAIR_SEPARATORS = re.compile(r"[\s,;&?]+")
# What a name in name=value may start with that is not the name: dashes, brackets, quotes.
_NAME_OPENERS = "-[{(\"'"
# "name": "value" in a JSON (or YAML flow) value.
_QUOTED_PAIR = re.compile(r"[\"']([^\"']{1,200})[\"']\s*:\s*[\"'][^\"']")
# Keys that say what they are, under whatever name they are given.
_KEYS = (
    (re.compile(r"(?<![A-Z0-9])(AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])"), "an AWS access key id"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY"), "a private key"),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36}"), "a GitHub token"),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), "a Google API key"),
)


# The Kubernetes Secret every step of a compiled package reads its object-store keys
# from. Secret key -> environment variable: the same names, the ones boto3 (the file
# seam) and Beam's S3 filesystem read; the endpoint is there for MinIO and other stores.
OBJECT_STORE_SECRET = "imgpipe-object-store"
SECRET_ENV: dict[str, str] = {
    name: name
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL_S3",
    )
}
# Beam options whose values are credentials though their names do not say so.
CREDENTIAL_FLAGS = ("s3_access_key_id", "azure_connection_string")


def credential_flags(args: Sequence[str]) -> list[str]:
    """The options in `args` that carry a credential by name (values left out): those of
    CREDENTIAL_FLAGS, and any whose name says it holds a secret (the one name rule)."""
    found = []
    for arg in args:
        name = arg.lstrip("-").split("=", 1)[0].lower()
        if arg.startswith("--") and (name in CREDENTIAL_FLAGS or _SECRET_NAME.search(name)):
            found.append(f"--{name}")
    return found


def problem(text: str) -> str | None:
    """What in `text` is a credential, described without its value; None when nothing is.

    Example:
      problem("token=abc")  # "a secret in token=..."
      problem("gs://bucket/data")  # None
    """
    if _URL_USER_INFO.search(text):
        return "a user name or password in its URL"
    for piece in _PAIR_SEPARATORS.split(text):
        parts = piece.split("=")  # a=b=c: both a and b name what follows them
        for name, value in zip(parts, parts[1:], strict=False):
            if value and _SECRET_NAME.search(name):
                return f"a secret in {short(name.lstrip(_NAME_OPENERS), 40)}=..."
    for match in _QUOTED_PAIR.finditer(text):
        if _SECRET_NAME.search(match.group(1)):
            return f'a secret in "{short(match.group(1), 40)}": ...'
    for pattern, what in _KEYS:
        if pattern.search(text):
            return what
    return None


def option_problems(args: Sequence[str]) -> list[str]:
    """The options in `args` (Beam's, or a command line) that carry a credential, each
    named once, with what was found when the name does not say it.

    An option named as a credential (`--s3_secret_access_key`) is named alone; an option
    whose value holds one is named with what it holds; a value given as the next
    argument (`--data URL`) counts as its option's.
    """
    named = set(credential_flags(args))
    found: list[str] = []
    option: str | None = None  # the option whose value the next argument may be
    for index, arg in enumerate(args):
        name: str | None
        following: str | None = None
        if arg.startswith("-") and not arg[1:2].isdigit():
            flag, sep, value = arg.partition("=")
            name = short(flag, 80)
            following = None if sep else name
        else:
            name, value = option, arg
            key, sep, _ = arg.partition("=")
            if name is not None and sep and key:  # --set KEY=VALUE, --param NAME=VALUE
                name = f"{name} {short(key, 80)}"
        if name is not None and name.lower() in named:
            entry = name.lower()
        else:
            what = problem(value)
            entry = f"{name or f'argument {index + 1}'} ({what})" if what else ""
        if entry and entry not in found:
            found.append(entry)
        option = following
    return found


def settings_problems(values: Any, where: str = "") -> list[str]:
    """The settings in `values` (a config's plain data: mappings, lists, strings) that
    hold a credential, each named by its dotted path with what was found."""
    found = []
    for path, value in _strings(values, where):
        if path == "beam_args":
            found += [f"beam_args {entry}" for entry in option_problems(value)]
        elif (what := problem(value)) is not None:
            found.append(f"{path} ({what})")
    return found


def _strings(values: Any, where: str) -> Iterator[tuple[str, Any]]:
    """(dotted path, value) of every string in plain data; beam_args as one list."""
    if where == "beam_args" and isinstance(values, list | tuple):
        yield where, [str(v) for v in values]
    elif isinstance(values, Mapping):
        for key, value in values.items():
            yield from _strings(value, f"{where}.{key}" if where else str(key))
    elif isinstance(values, list | tuple):
        for i, value in enumerate(values):
            yield from _strings(value, f"{where}[{i}]")
    elif isinstance(values, str):
        yield where, values


def refusal(found: Sequence[str]) -> str:
    """The one line that refuses the credentials `found` names and says where keys go."""
    return (
        f"{', '.join(found)}: a credential must not be written in a setting or an option, "
        "which compiled packages, logs and summaries copy; remove it and put the keys in "
        f"the Kubernetes Secret {OBJECT_STORE_SECRET} ({', '.join(SECRET_ENV)}), which "
        "every step reads as environment variables; a command run here reads the same "
        "variables from its environment (docs/kubeflow.md)"
    )


def refuse_in_settings(values: Any) -> None:
    """Raises ValueError (see `refusal`) when a setting in `values` holds a credential."""
    found = settings_problems(values)
    if found:
        raise ValueError(refusal(found))


def refuse_in_options(args: Sequence[str]) -> None:
    """Raises ValueError (see `refusal`) when an option in `args` holds a credential."""
    found = option_problems(args)
    if found:
        raise ValueError(refusal(found))
