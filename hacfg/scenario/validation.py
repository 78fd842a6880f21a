"""pydantic's judgement of a scenario file: errors at ``file:line:col``, the JSON Schema, and the
pruned core schema that lets :mod:`hacfg.scenario.fastcheck` accept plainly valid files without pydantic.

Regenerate that core schema after changing the model in :mod:`hacfg.scenario.model`::

    python -m hacfg.scenario.validation
"""

from __future__ import annotations

import re
import sys
from datetime import timedelta
from pathlib import Path
from types import FunctionType
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter, ValidationError

from hacfg.scenario import fastcheck
from hacfg.scenario.model import HAConfig

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails


def _adapter() -> TypeAdapter[HAConfig]:
    """pydantic's validator for the model, whose annotations are strings naming the locals here:
    a TypeAdapter resolves them in the namespace of the frame that creates it."""
    from pydantic import (  # noqa: F401
        AfterValidator,
        BeforeValidator,
        Field,
        StrictBool,
        StrictFloat,
        StrictInt,
        StrictStr,
        WithJsonSchema,
    )

    return TypeAdapter(HAConfig)


ADAPTER = _adapter()
COMPILED = Path(__file__).with_name("_pruned_core_schema.py")


def model_or_errors(data: dict[str, Any], context: dict[str, Any]) -> HAConfig | list[ErrorDetails]:
    """The validated config, or pydantic's errors."""
    try:
        return ADAPTER.validate_python(data, context=context)
    except ValidationError as err:
        return err.errors(include_url=False)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the scenario format, as committed in ``schemas/hacfg.schema.json``."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **ADAPTER.json_schema()}


# The pruned core schema: what fastcheck replays. Every key pydantic sets is either kept, known to
# change nothing for the exact values fastcheck accepts, or refused here: a model change that needs
# more makes generation fail, rather than fastcheck silently judge less than pydantic does.
_KEPT = {
    "str": {"pattern", "min_length", "max_length"},
    "int": {"ge", "gt", "le", "lt"},
    "float": {"ge", "gt", "le", "lt"},
    "bool": set(),
    "timedelta": set(),
    "literal": {"expected"},
    "nullable": set(),
    "dict": set(),
    "any": set(),
}
_IGNORED = {"type", "metadata", "strict", "ref", "serialization", "microseconds_precision"}


def compile_schema(schema: Any) -> fastcheck.Node:
    """pydantic's core schema for the model, reduced to the nodes and keys fastcheck replays."""
    kind = schema["type"]
    if kind == "dataclass":
        args = schema["schema"]
        if args["type"] != "dataclass-args" or args.get("computed_fields") or schema.get("post_init"):
            raise ValueError(f"unsupported dataclass schema for {schema['cls'].__name__}")
        return {
            "type": "dataclass",
            "cls": schema["cls"],
            "forbid_extra": schema.get("config", {}).get("extra_fields_behavior") == "forbid",
            "fields": [_compile_field(f) for f in args["fields"]],
        }
    if kind in ("function-before", "function-after"):
        function = schema["function"]
        return {
            "type": kind,
            "function": function["function"],
            "info": function["type"] == "with-info",
            "schema": compile_schema(schema["schema"]),
        }
    if kind not in _KEPT:
        raise ValueError(f"fastcheck cannot replay a {kind!r} schema; teach it, or drop the field's fast path")
    unknown = set(schema) - _KEPT[kind] - _IGNORED - {"schema", "keys_schema", "values_schema"}
    if unknown:
        raise ValueError(f"fastcheck cannot replay {kind!r} with {', '.join(sorted(unknown))}")
    node: fastcheck.Node = {"type": kind, **{k: v for k, v in schema.items() if k in _KEPT[kind]}}
    if "pattern" in node:
        node["compiled"] = re.compile(node["pattern"])
    for inner in ("schema", "keys_schema", "values_schema"):
        if inner in schema:
            node[inner] = compile_schema(schema[inner])
    if kind == "dict" and "keys_schema" not in node:
        node["keys_schema"] = node["values_schema"] = {"type": "any"}
    return node


def _compile_field(field: Any) -> dict[str, Any]:
    if field["type"] != "dataclass-field" or not field.get("init", True) or field.get("init_only"):
        raise ValueError(f"unsupported field {field.get('name')!r}")
    schema = field["schema"]
    compiled: dict[str, Any] = {"name": field["name"]}
    if schema["type"] == "default":
        if schema.get("validate_default") or schema.get("default_factory_takes_data"):
            raise ValueError(f"unsupported default for {field['name']!r}")
        compiled.update({k: schema[k] for k in ("default", "default_factory") if k in schema})
        schema = schema["schema"]
    compiled["schema"] = compile_schema(schema)
    return compiled


def compiled_source() -> str:
    """The text of :mod:`hacfg.scenario._pruned_core_schema`, from the model as it is now."""
    return (
        '"""The scenario model\'s core schema, pruned for hacfg.scenario.fastcheck.\n\n'
        "Generated from hacfg.scenario.model by `python -m hacfg.scenario.validation`; do not edit.\n"
        '"""\n\n'
        "import re\n"
        "from datetime import timedelta\n\n"
        "from hacfg.scenario import model\n\n"
        f"SCHEMA = {_source(compile_schema(ADAPTER.core_schema), 0)}\n"
    )


def _source(value: Any, depth: int) -> str:
    """``value`` as Python source, one key or item per line."""
    pad, inner = "    " * depth, "    " * (depth + 1)
    if isinstance(value, dict):
        items = [f"{inner}{key!r}: {_source(item, depth + 1)},\n" for key, item in value.items()]
        return "{\n" + "".join(items) + pad + "}" if items else "{}"
    if isinstance(value, list):
        items = [f"{inner}{_source(item, depth + 1)},\n" for item in value]
        return "[\n" + "".join(items) + pad + "]" if items else "[]"
    if isinstance(value, re.Pattern):
        return f"re.compile({value.pattern!r})"
    if isinstance(value, timedelta):
        return f"timedelta(seconds={value.total_seconds()!r})"
    if isinstance(value, type | FunctionType):
        if value.__module__ == "builtins":
            return value.__qualname__
        if value.__module__ != "hacfg.scenario.model":
            name = f"{value.__module__}.{value.__qualname__}"
            raise ValueError(f"{name}: the model's functions live in hacfg.scenario.model")
        return f"model.{value.__qualname__}"
    if value is None or isinstance(value, bool | int | float | str):
        return repr(value)
    raise ValueError(f"cannot write {value!r} as source")


if __name__ == "__main__":
    from hacfg.fsutil import atomic_write

    atomic_write(COMPILED, compiled_source())
    sys.stdout.write(f"wrote {COMPILED}\n")
