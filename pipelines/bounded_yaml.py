"""YAML for settings, parsed in bounded time and memory.

A config is small, but a YAML file can describe an unbounded value: an alias bomb (each
level an alias list of the one before) is a few hundred bytes that expand to gigabytes
once anything walks the value, and thousands of nested brackets overflow the parser's
recursion. Both are refused here, before a value is built, with the one-line YAML error
the CLI prints for any other malformed file.

Example:
  values = load("trainer: {epochs: 3}", "pipeline.yaml")
"""

from __future__ import annotations

from typing import Any

# No settings document comes near these: the full example config is about 150 nodes,
# nested 5 deep, in a few KB. The parser reads about a megabyte a second, so a longer
# document is refused before it is parsed.
MAX_DEPTH = 64
MAX_NODES = 100_000
MAX_CHARS = 1_000_000


class YamlLimitError(ValueError):
    """A document over MAX_CHARS, MAX_DEPTH or MAX_NODES: refused before it is built."""


def load(text: str, where: str) -> Any:
    """The one YAML document in `text`, or None for an empty one.

    Raises:
      ValueError: longer than MAX_CHARS, not valid YAML, nested deeper than MAX_DEPTH, or
        more than MAX_NODES values once aliases are expanded; the message starts with
        `where` and is one line.
    """
    if len(text) > MAX_CHARS:
        raise YamlLimitError(
            f"{where}: more than {MAX_CHARS:,} characters; a settings file holds a few "
            "thousand, so this is not one"
        )
    import yaml

    try:
        _check_depth(yaml.scan(text, Loader=yaml.SafeLoader), where)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is None:
            return None
        _check_size(node, where)
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(f"{where}: {problem(e)}") from None


def problem(error: Exception) -> str:
    """'not valid YAML: line N, column M: <problem>' of a YAML error, on one line."""
    mark = getattr(error, "problem_mark", None)
    text = getattr(error, "problem", None) or str(error)
    at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"not valid YAML: {at}{' '.join(text.split())[:200]}"


def _check_depth(tokens: Any, where: str) -> None:
    import yaml

    opening = (
        yaml.FlowSequenceStartToken,
        yaml.FlowMappingStartToken,
        yaml.BlockSequenceStartToken,
        yaml.BlockMappingStartToken,
    )
    closing = (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken, yaml.BlockEndToken)
    depth = 0
    for token in tokens:
        if isinstance(token, opening):
            depth += 1
            if depth > MAX_DEPTH:
                line = token.start_mark.line + 1
                raise YamlLimitError(
                    f"{where}: not valid YAML: line {line}: nested more than {MAX_DEPTH} "
                    "levels deep; a settings file needs a few"
                )
        elif isinstance(token, closing):
            depth -= 1


def _check_size(root: Any, where: str) -> None:
    """Counts the values the document expands to, each shared (aliased) node once per use,
    without expanding it: a node's size is computed once and reused."""
    import yaml

    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    # Post-order over the node graph, iteratively: the depth is bounded already, but the
    # breadth is not.
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node, yaml)
        if not children_done and id(node) in open_nodes:
            raise YamlLimitError(
                f"{where}: not valid YAML: line {node.start_mark.line + 1}: an alias refers "
                "to a value that contains it, which never ends"
            )
        if children_done or not children:
            size = 1 + sum(sizes[id(child)] for child in children)
            if size > MAX_NODES:
                raise YamlLimitError(
                    f"{where}: not valid YAML: line {node.start_mark.line + 1}: expands to "
                    f"more than {MAX_NODES:,} values (aliases repeated inside aliases); a "
                    "settings file holds a few hundred"
                )
            sizes[id(node)] = size
        else:
            open_nodes.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)


def _children(node: Any, yaml: Any) -> list[Any]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
