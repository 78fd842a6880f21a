"""Whether a document satisfies a JSON Schema, decided without importing jsonschema.

``hacfg build`` checks every output against its target's schema. jsonschema takes longer to
import than the rest of a build, and only an invalid document needs its messages. So
:func:`satisfies` says True only where jsonschema's ``Draft202012Validator`` (no format checker,
as build uses it) finds no error: each keyword below does what jsonschema's does, and a keyword
it does not know, or a ``$ref`` it cannot follow, makes it say False. False means "ask
jsonschema", which then gives the verdict and the messages; so no keyword here negates a
verdict (``not``, ``oneOf``): those are left to jsonschema.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from numbers import Number
from typing import Any
from urllib.parse import unquote

# Annotations: jsonschema asserts none of them (``format`` only with a format checker).
IGNORED = frozenset(
    {"$schema", "$comment", "$defs", "title", "description", "default", "examples", "deprecated", "format"}
    | {"readOnly", "writeOnly"}
)


def satisfies(instance: Any, schema: Any) -> bool:
    """True when ``instance`` is valid against ``schema``; False when it is not, or this module cannot tell."""
    return _Check(schema).valid(instance, schema)


class _Check:
    def __init__(self, root: Any) -> None:
        self.root = root

    def valid(self, instance: Any, schema: Any) -> bool:
        if schema is True or schema is False:
            return schema
        if not isinstance(schema, dict):
            return False
        for keyword, value in schema.items():
            check = KEYWORDS.get(keyword)
            if check is not None:
                if not check(self, value, instance, schema):
                    return False
            elif keyword not in IGNORED and not keyword.startswith("x-"):
                return False  # a keyword jsonschema may assert and this module does not know
        return True

    def ref(self, ref: str, instance: Any) -> bool:
        """Follow a JSON pointer into this schema (``#/$defs/job``); any other reference is left to jsonschema."""
        if ref != "#" and not ref.startswith("#/"):
            return False  # another document, or an anchor
        target = self.root
        for token in unquote(ref[1:]).split("/")[1:]:
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and token in target:
                target = target[token]
            elif isinstance(target, list) and token.isdigit() and int(token) < len(target):
                target = target[int(token)]
            else:
                return False
            if isinstance(target, dict) and "$id" in target:
                return False  # a resource of its own: references inside it resolve against its $id
        return self.valid(instance, target)


def _is_type(instance: Any, name: str) -> bool | None:
    """jsonschema's 2020-12 type checker; None for a type it does not know (it raises)."""
    if name == "object":
        return isinstance(instance, dict)
    if name == "array":
        return isinstance(instance, list)
    if name == "string":
        return isinstance(instance, str)
    if name == "boolean":
        return isinstance(instance, bool)
    if name == "null":
        return instance is None
    if name == "number":
        return isinstance(instance, Number) and not isinstance(instance, bool)
    if name == "integer":
        if isinstance(instance, bool):
            return False
        return isinstance(instance, int) or (isinstance(instance, float) and instance.is_integer())
    return None


def _type(check: _Check, types: Any, instance: Any, schema: dict[str, Any]) -> bool:
    verdicts = [_is_type(instance, name) for name in (types if isinstance(types, list) else [types])]
    return None not in verdicts and any(verdicts)


def _properties(check: _Check, properties: dict[str, Any], instance: Any, schema: dict[str, Any]) -> bool:
    if not isinstance(instance, dict):
        return True
    return all(check.valid(instance[name], sub) for name, sub in properties.items() if name in instance)


def _pattern_properties(check: _Check, patterns: dict[str, Any], instance: Any, schema: dict[str, Any]) -> bool:
    if not isinstance(instance, dict):
        return True
    return all(
        check.valid(value, sub) for pattern, sub in patterns.items() for key, value in instance.items()
        if re.search(pattern, key)
    )


def _additional_properties(check: _Check, additional: Any, instance: Any, schema: dict[str, Any]) -> bool:
    if not isinstance(instance, dict):
        return True
    properties = schema.get("properties", {})
    patterns = "|".join(schema.get("patternProperties", {}))
    extras = [key for key in instance if key not in properties and not (patterns and re.search(patterns, key))]
    if isinstance(additional, dict):
        return all(check.valid(instance[key], additional) for key in extras)
    return bool(additional) or not extras


def _property_names(check: _Check, names: Any, instance: Any, schema: dict[str, Any]) -> bool:
    return not isinstance(instance, dict) or all(check.valid(key, names) for key in instance)


def _required(check: _Check, required: list[str], instance: Any, schema: dict[str, Any]) -> bool:
    return not isinstance(instance, dict) or all(name in instance for name in required)


def _dependent_required(check: _Check, dependent: dict[str, list[str]], instance: Any, schema: dict[str, Any]) -> bool:
    if not isinstance(instance, dict):
        return True
    return all(each in instance for name, needs in dependent.items() if name in instance for each in needs)


def _min_properties(check: _Check, least: int, instance: Any, schema: dict[str, Any]) -> bool:
    return not isinstance(instance, dict) or len(instance) >= least


def _max_properties(check: _Check, most: int, instance: Any, schema: dict[str, Any]) -> bool:
    return not isinstance(instance, dict) or len(instance) <= most


def _prefix_items(check: _Check, prefix: list[Any], instance: Any, schema: dict[str, Any]) -> bool:
    if not isinstance(instance, list):
        return True
    return all(check.valid(item, sub) for item, sub in zip(instance, prefix, strict=False))  # either may be longer


def _items(check: _Check, items: Any, instance: Any, schema: dict[str, Any]) -> bool:
    if not isinstance(instance, list):
        return True
    return all(check.valid(item, items) for item in instance[len(schema.get("prefixItems", [])) :])


def _min_items(check: _Check, least: int, instance: Any, schema: dict[str, Any]) -> bool:
    return not isinstance(instance, list) or len(instance) >= least


def _max_items(check: _Check, most: int, instance: Any, schema: dict[str, Any]) -> bool:
    return not isinstance(instance, list) or len(instance) <= most


def _min_length(check: _Check, least: int, instance: Any, schema: dict[str, Any]) -> bool:
    return not isinstance(instance, str) or len(instance) >= least


def _max_length(check: _Check, most: int, instance: Any, schema: dict[str, Any]) -> bool:
    return not isinstance(instance, str) or len(instance) <= most


def _pattern(check: _Check, pattern: str, instance: Any, schema: dict[str, Any]) -> bool:
    return not isinstance(instance, str) or re.search(pattern, instance) is not None


def _minimum(check: _Check, least: Any, instance: Any, schema: dict[str, Any]) -> bool:
    return not _is_type(instance, "number") or not instance < least


def _maximum(check: _Check, most: Any, instance: Any, schema: dict[str, Any]) -> bool:
    return not _is_type(instance, "number") or not instance > most


def _enum(check: _Check, values: list[Any], instance: Any, schema: dict[str, Any]) -> bool:
    # jsonschema's own equality (1 is not True, 1 is 1.0) is == where one side is a string, and is for null.
    return all(isinstance(value, str) or value is None for value in values) and any(
        value is instance if value is None else value == instance for value in values
    )


def _const(check: _Check, value: Any, instance: Any, schema: dict[str, Any]) -> bool:
    return isinstance(value, str) and value == instance


def _all_of(check: _Check, schemas: list[Any], instance: Any, schema: dict[str, Any]) -> bool:
    return all(check.valid(instance, sub) for sub in schemas)


def _any_of(check: _Check, schemas: list[Any], instance: Any, schema: dict[str, Any]) -> bool:
    return any(check.valid(instance, sub) for sub in schemas)


def _ref(check: _Check, ref: str, instance: Any, schema: dict[str, Any]) -> bool:
    return check.ref(ref, instance)


KEYWORDS: dict[str, Callable[[_Check, Any, Any, dict[str, Any]], bool]] = {
    "type": _type,
    "properties": _properties,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "propertyNames": _property_names,
    "required": _required,
    "dependentRequired": _dependent_required,
    "minProperties": _min_properties,
    "maxProperties": _max_properties,
    "prefixItems": _prefix_items,
    "items": _items,
    "minItems": _min_items,
    "maxItems": _max_items,
    "minLength": _min_length,
    "maxLength": _max_length,
    "pattern": _pattern,
    "minimum": _minimum,
    "maximum": _maximum,
    "enum": _enum,
    "const": _const,
    "allOf": _all_of,
    "anyOf": _any_of,
    "$ref": _ref,
}
