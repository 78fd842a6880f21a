"""The ModelArts request body as Huawei Cloud's SDK describes it, read from the schema generated from
it (scripts/modelarts_schema.py; the SDK itself is never imported here): which keys exist where,
which only a fetched job has, and the shape a fetched job gives its environment variables.

The SDK's ``Job`` drops a key it does not know without a word (``spec.volume`` for ``volumes``: the
checkpoint volume is never mounted), so lint reports each one (HA101) and ``hacfg import`` leaves out
what the platform sets itself (``metadata.id``, ``status``).
"""

from __future__ import annotations

import copy
import functools
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hacfg.scenario import modelarts as ma
from hacfg.scenario.source import Document, LogicalPath, Span, closest, dotted, lookup

SCHEMA_NAME = "modelarts-training-job.schema.json"
ANY_ITEM = "*"  # in a read-only path: every element of an array
# A member of a body: its parent's schema, its own (None for a key the parent's closed object has not),
# its value and where it stands.
_Member = tuple[dict[str, Any], Any, Any, LogicalPath]


@functools.cache
def schema() -> dict[str, Any]:
    import json

    package = importlib.import_module("hacfg.schemas")  # data only, mapped from schemas/ at install
    loaded: dict[str, Any] = json.loads(Path(str(package.__file__)).with_name(SCHEMA_NAME).read_text("utf-8"))
    return loaded


class Unknown:
    """A key the request model has not: misspelled (``suggestion``), or set only by the platform."""

    __slots__ = ("at", "read_only", "suggestion")

    def __init__(self, at: LogicalPath, suggestion: str | None, read_only: bool) -> None:
        self.at = at  # in the file: the body's path, under ``within``
        self.suggestion = suggestion
        self.read_only = read_only

    @property
    def misspelled(self) -> bool:
        """Whether the suggestion is clearly what was meant (one or two letters off: ``volume``,
        ``enviroments``, ``readonly``), so that renaming is a safe fix; ``obs_path`` is not ``host_path``."""
        return self.suggestion is not None and _edits(str(self.at[-1]), self.suggestion) <= 2

    @property
    def message(self) -> str:
        key, parent = self.at[-1], dotted(self.at[:-1]) or "the request body"
        if self.read_only:
            return f"{dotted(self.at)} is set by the platform, not by a create request: remove it"
        hint = f"; did you mean {self.suggestion!r}?" if self.suggestion else ""
        return f"unknown key {key!r} in {parent}: the platform drops it{hint}"


def unknown_keys(body: Any, within: LogicalPath = ()) -> Iterator[Unknown]:
    """Every key of ``body`` (a request body, or what ``passthrough:`` adds to one, standing at ``within`` in
    its file) that the request model has not, in document order."""
    if not body:
        return  # a scenario without passthrough: no need to read the schema
    root = schema()
    for parent, child, _, at in _members(root, root, body, ()):
        if child is None:
            names = list(parent.get("properties", {}))
            read_only = _is_read_only(at)
            yield Unknown((*within, *at), None if read_only else closest(str(at[-1]), names), read_only)


class Undocumented:
    """A value of a field whose values the SDK lists, not among them: its client sends it, and the
    platform may refuse it, or take a value newer than the SDK (``log_export_config.version``)."""

    __slots__ = ("at", "documented", "value")

    def __init__(self, at: LogicalPath, value: str, documented: tuple[str, ...]) -> None:
        self.at = at
        self.value = value
        self.documented = documented

    @property
    def message(self) -> str:
        suggestion = closest(self.value, list(self.documented))
        hint = f"; did you mean {suggestion!r}?" if suggestion else ""
        listed = ", ".join(self.documented)
        return (
            f"{dotted(self.at)}: {self.value!r} is not a value the ModelArts SDK documents ({listed}): "
            f"the platform may refuse the job{hint}"
        )


def undocumented_values(body: Any, within: LogicalPath = ()) -> Iterator[Undocumented]:
    """Every string in ``body`` (standing at ``within`` in its file) outside the values the SDK
    documents for its field (the schema's ``x-documented``), in document order."""
    if not body:
        return
    root = schema()
    for _, child, value, at in _members(root, root, body, ()):
        documented = _resolve(root, child).get("x-documented") if isinstance(child, dict) else None
        if isinstance(value, str) and documented and value not in documented:
            yield Undocumented((*within, *at), value, tuple(documented))


def _resolve(root: dict[str, Any], node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        node = root["$defs"][node["$ref"].rpartition("/")[2]]
    return node


def _child(root: dict[str, Any], node: Any, key: Any) -> Any:
    """The schema of ``node``'s member ``key`` (an index into an array, a name into an object); None if closed."""
    node = _resolve(root, node)
    if not isinstance(node, dict):
        return {}
    if isinstance(key, int):
        return node.get("items", {})
    properties = node.get("properties", {})
    if key in properties:
        return properties[key]
    additional = node.get("additionalProperties", True)
    return None if additional is False else additional if isinstance(additional, dict) else {}


def _members(root: dict[str, Any], node: Any, value: Any, at: LogicalPath) -> Iterator[_Member]:
    """Every member of ``value`` with its schema and its parent's, in document order; nothing under an
    unknown key."""
    node = _resolve(root, node)
    members = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in members:
        child = _child(root, node, key)
        yield node if isinstance(node, dict) else {}, child, item, (*at, key)
        if child is not None:
            yield from _members(root, child, item, (*at, key))


def _edits(a: str, b: str) -> int:
    """Levenshtein distance: letters inserted, deleted or replaced to turn ``a`` into ``b``."""
    row = list(range(len(b) + 1))
    for i, left in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, right in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (left != right))
    return row[-1]


def _is_read_only(at: LogicalPath) -> bool:
    general = tuple(ANY_ITEM if isinstance(key, int) else key for key in at)
    return any(tuple(path) == general for path in schema()["x-read-only"])


def without_read_only(body: dict[str, Any]) -> tuple[dict[str, Any], list[LogicalPath]]:
    """``body`` without what only a fetched job has, and where each was."""
    body = copy.deepcopy(body)
    removed: list[LogicalPath] = []
    for path in schema()["x-read-only"]:
        for parent, at in _parents(body, tuple(path)):
            del parent[at[-1]]
            removed.append(at)
    return body, removed


def _parents(tree: Any, path: LogicalPath, done: LogicalPath = ()) -> Iterator[tuple[dict[Any, Any], LogicalPath]]:
    """Each mapping that holds ``path``'s last key, with where that key is; ``*`` stands for every element."""
    head, rest = path[0], path[1:]
    if head == ANY_ITEM:
        for index, item in enumerate(tree if isinstance(tree, list) else []):
            yield from _parents(item, rest, (*done, index))
    elif isinstance(tree, dict) and head in tree:
        if rest:
            yield from _parents(tree[head], rest, (*done, head))
        else:
            yield tree, (*done, head)


def environments_as_mapping(document: Document, within: LogicalPath = ()) -> Document | None:
    """``document`` with the ``algorithm.environments`` under ``within`` read as the mapping it means when
    it is a list of objects of one pair or more, as the SDK shows a fetched job (``JobAlgorithmResponse``:
    ``list[dict(str, str)]``); every position kept, each variable's at its pair. None for any other shape."""
    at = (*within, *ma.ENVIRONMENTS_AT)
    pairs = lookup(document.data, at)
    if not isinstance(pairs, list) or not all(isinstance(pair, dict) for pair in pairs):
        return None
    mapping = {key: value for pair in pairs for key, value in pair.items()}
    data = copy.deepcopy(document.data)
    parent = lookup(data, at[:-1])
    assert isinstance(parent, dict)
    parent[at[-1]] = mapping

    def rekeyed(spans: dict[LogicalPath, Span]) -> dict[LogicalPath, Span]:
        kept: dict[LogicalPath, Span] = {}
        for path, span in spans.items():
            if path[: len(at)] != at or len(path) == len(at):
                kept[path] = span
            elif len(path) > len(at) + 1:  # (..., environments, 3, NAME) -> (..., environments, NAME)
                kept[(*at, *path[len(at) + 1 :])] = span
        return kept

    return Document(document.path, document.text, data, rekeyed(document.values), rekeyed(document.keys))


def environments_note(within: LogicalPath = ()) -> str:
    """What is said wherever :func:`environments_as_mapping` reads a list."""
    return (
        f"{dotted((*within, *ma.ENVIRONMENTS_AT))} is a list of pairs, as a fetched job shows it: "
        "read as the mapping it means, which a create request takes"
    )
