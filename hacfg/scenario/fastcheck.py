"""Validation without importing pydantic, for documents that are plainly valid.

A cold ``hacfg lint`` spends most of its time importing pydantic and building the model's
validator. This module replays the core schema that pydantic compiles from the scenario model
(pruned and written to :mod:`hacfg.scenario._pruned_core_schema` by :mod:`hacfg.scenario.validation`), accepting only
what both pydantic's strict and lax modes accept unchanged: exact ``str``, ``int``, ``float``, ``bool``,
``dict`` and ``timedelta`` values, literals of the same type, the model's own validator
functions. Anything else, every error included, is declined (``None``) and pydantic decides,
so verdicts, values and messages are always pydantic's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

Node = dict[str, Any]  # one node of the pruned core schema


class Declined(Exception):
    """This document is not plainly valid: pydantic must judge it."""


class Info:
    """What a validator with info sees (pydantic's ``ValidationInfo``, as far as a valid document needs)."""

    __slots__ = ("context", "data", "field_name", "mode")

    def __init__(self, context: Any, data: dict[str, Any], field_name: str | None, mode: str = "python") -> None:
        self.context = context
        self.data = data
        self.field_name = field_name
        self.mode = mode


def validate(schema: Node, value: Any, context: Any = None) -> Any | None:
    """The validated value, exactly as pydantic would return it, or None when pydantic must decide."""
    try:
        return _check(schema, value, _Place(context, {}, None))
    except Declined:
        return None


def keys_at(schema: Node, path: tuple[str | int, ...]) -> list[str]:
    """The field names of the section at ``path`` (for did-you-mean), or none if it is no section."""
    node: Node | None = schema
    for key in path:
        node = _section(node)
        node = next((f["schema"] for f in node["fields"] if f["name"] == key), None) if node else None
    section = _section(node)
    return [f["name"] for f in section["fields"]] if section else []


def _section(node: Node | None) -> Node | None:
    while node is not None and node["type"] != "dataclass":
        node = node.get("schema")
    return node


class _Place:
    __slots__ = ("context", "data", "field_name")

    def __init__(self, context: Any, data: dict[str, Any], field_name: str | None) -> None:
        self.context = context
        self.data = data  # the fields of the enclosing section validated so far
        self.field_name = field_name


def _check(node: Node, value: Any, place: _Place) -> Any:
    return _CHECKS[node["type"]](node, value, place)


def _exact(kind: type) -> Callable[[Node, Any, _Place], Any]:
    def check(node: Node, value: Any, place: _Place) -> Any:
        if type(value) is not kind:
            raise Declined
        for bound, holds in _BOUNDS.items():
            if bound in node and not holds(value, node[bound]):
                raise Declined
        return value

    return check


def _string(node: Node, value: Any, place: _Place) -> Any:
    text = _exact_str(node, value, place)
    if "pattern" in node and ("\n" in text or not node["compiled"].search(text)):
        raise Declined  # a newline: Python's $ and pydantic's regex engine may disagree
    return text


_BOUNDS: dict[str, Callable[[Any, Any], bool]] = {
    "ge": lambda v, b: v >= b,
    "gt": lambda v, b: v > b,
    "le": lambda v, b: v <= b,
    "lt": lambda v, b: v < b,
    "min_length": lambda v, b: len(v) >= b,
    "max_length": lambda v, b: len(v) <= b,
}


def _literal(node: Node, value: Any, place: _Place) -> Any:
    for expected in node["expected"]:
        if type(value) is type(expected) and value == expected:
            return expected
    raise Declined


def _nullable(node: Node, value: Any, place: _Place) -> Any:
    return None if value is None else _check(node["schema"], value, place)


def _dict(node: Node, value: Any, place: _Place) -> Any:
    if type(value) is not dict:
        raise Declined
    keys, values = node["keys_schema"], node["values_schema"]
    return {_check(keys, k, place): _check(values, v, place) for k, v in value.items()}


def _any(node: Node, value: Any, place: _Place) -> Any:
    return value


def _function(node: Node, value: Any, place: _Place) -> Any:
    def call(argument: Any) -> Any:
        try:
            if node["info"]:
                return node["function"](argument, Info(place.context, place.data, place.field_name))
            return node["function"](argument)
        except Exception:
            raise Declined from None  # pydantic reports it (or raises it) in its own words

    if node["type"] == "function-before":
        return _check(node["schema"], call(value), place)
    return call(_check(node["schema"], value, place))


def _dataclass(node: Node, value: Any, place: _Place) -> Any:
    if type(value) is not dict:
        raise Declined
    if node["forbid_extra"] and not value.keys() <= {f["name"] for f in node["fields"]}:
        raise Declined
    data: dict[str, Any] = {}
    for field in node["fields"]:
        name = field["name"]
        if name in value:
            data[name] = _check(field["schema"], value[name], _Place(place.context, data, name))
        elif "default" in field:
            data[name] = field["default"]
        elif "default_factory" in field:
            data[name] = field["default_factory"]()
        else:
            raise Declined  # missing
    return node["cls"](**data)


_exact_str = _exact(str)
_CHECKS: dict[str, Callable[[Node, Any, _Place], Any]] = {
    "str": _string,
    "int": _exact(int),
    "float": _exact(float),
    "bool": _exact(bool),
    "timedelta": _exact(timedelta),
    "literal": _literal,
    "nullable": _nullable,
    "dict": _dict,
    "any": _any,
    "function-before": _function,
    "function-after": _function,
    "dataclass": _dataclass,
}
