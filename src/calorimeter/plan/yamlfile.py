"""Read a sweep file strictly: UTF-8 only, no key given twice, bounded alias expansion, the line of every key.

PyYAML's safe loader silently keeps the last of two equal keys, accepts any bytes its reader can guess, and builds
"billion laughs" documents (anchors nesting aliases) as shared references that explode only later, when the config
is copied, validated or expanded. This reader composes the node graph first and refuses, with the file and line:

* a file that is not UTF-8, or larger than :data:`MAX_FILE_BYTES`;
* a mapping that gives one key twice (merge keys ``<<`` may be overridden, as YAML says);
* anchors and aliases that expand to more than :data:`MAX_VALUES` values, or that refer to themselves.

It also returns where each key was written (``{"grid[0].tp": "sweep.yaml:12", ...}``), so that later messages can
name the line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from calorimeter.plan.config_errors import ConfigError, key_path, short

#: a sweep file is a few kilobytes; anything beyond this is refused before parsing
MAX_FILE_BYTES = 1 << 20
#: values (scalars, lists, mappings) a document may hold once every alias is expanded
MAX_VALUES = 100_000


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader (no Python objects); duplicate keys and aliases are checked before construction."""


def _scalar_key(node: yaml.Node) -> Any:
    return (node.tag, node.value) if isinstance(node, yaml.ScalarNode) else ("node", id(node))


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for kv in node.value for n in kv]
    return []


def _check_duplicates(node: yaml.MappingNode, source: str) -> None:
    seen: dict[Any, int] = {}
    for key, _ in node.value:
        if key.tag == "tag:yaml.org,2002:merge":
            continue
        k = _scalar_key(key)
        if k in seen:
            name = short(key.value) if isinstance(key, yaml.ScalarNode) else "a complex key"
            raise ConfigError(f"{source}:{_line(key)}: key {name} given twice in one mapping (first at line "
                              f"{seen[k]}); YAML keeps only one of them: remove or merge the other")
        seen[k] = _line(key)


def _expanded_sizes(root: yaml.Node, source: str) -> dict[int, int]:
    """Values under each node once aliases are expanded (memoized over the shared node graph)."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        nid = id(node)
        if done:
            on_path.discard(nid)
            sizes[nid] = 1 + sum(sizes[id(c)] for c in _children(node))
            continue
        if nid in sizes:
            continue
        if nid in on_path:
            raise ConfigError(f"{source}:{_line(node)}: an alias refers to the value that contains it (a recursive "
                              "structure); write the value out")
        if isinstance(node, yaml.MappingNode):
            _check_duplicates(node, source)
        on_path.add(nid)
        stack.append((node, True))
        for c in _children(node):
            if id(c) in on_path:
                raise ConfigError(f"{source}:{_line(c)}: an alias refers to the value that contains it (a "
                                  "recursive structure); write the value out")
            if id(c) not in sizes:
                stack.append((c, False))
    return sizes


def _too_big(root: yaml.Node, sizes: dict[int, int], source: str) -> ConfigError:
    """The error for an oversized document, naming the deepest value that alone exceeds the bound."""
    node = root
    while True:
        bigger = [c for c in _children(node) if sizes[id(c)] > MAX_VALUES]
        if not bigger:
            break
        node = bigger[0]
    return ConfigError(f"{source}:{_line(node)}: anchors and aliases expand this value to {sizes[id(node)]:,} values "
                       f"(the bound is {MAX_VALUES:,}); a sweep never needs that many: write the grid as lists of "
                       "values instead")


def _lines(root: yaml.Node, source: str) -> dict[str, str]:
    """``file:line`` of every key path of the (bounded) document, e.g. ``{"grid[0].tp": "sweep.yaml:12"}``."""
    out: dict[str, str] = {}
    stack: list[tuple[yaml.Node, tuple[Any, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode):
                    p = (*path, k.value)
                    out.setdefault(key_path(p), f"{source}:{_line(k)}")
                    stack.append((v, p))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                p = (*path, i)
                out.setdefault(key_path(p), f"{source}:{_line(v)}")
                stack.append((v, p))
    return out


def decode_utf8(data: bytes, source: str) -> str:
    """``data`` as text; a file that is not UTF-8 is refused with the line and column of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ConfigError(f"{source}:{line}: not UTF-8 (byte 0x{data[e.start]:02x} at column {col}); save the file "
                          "as UTF-8") from None


def read_yaml(path: str | Path) -> tuple[Any, dict[str, str]]:
    """Parse one YAML file strictly (see the module docstring).

    Returns:
        (the document, ``file:line`` of each key path).

    Raises:
        ConfigError: naming the file and line.
    """
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError(f"{p}: {size:,} bytes; a sweep file is at most {MAX_FILE_BYTES:,} bytes")
        data = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"{p}: cannot be read ({e.strerror or e})") from None
    return parse_yaml(decode_utf8(data, str(p)), str(p))


def parse_yaml(text: str, source: str = "<string>") -> tuple[Any, dict[str, str]]:
    """:func:`read_yaml` for text already in memory."""
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, {}
        sizes = _expanded_sizes(root, source)
        if sizes[id(root)] > MAX_VALUES:
            raise _too_big(root, sizes, source)
        return loader.construct_document(root), _lines(root, source)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{where}: not valid YAML: {short(problem, 200)}") from None
    finally:
        loader.dispose()
