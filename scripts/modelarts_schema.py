"""Write schemas/modelarts-training-job.schema.json from Huawei Cloud's ModelArts SDK.

The SDK (``pip install huaweicloudsdkmodelarts``) is the platform's own description of the
create-training-job body: ``huaweicloudsdkmodelarts.v1.model.Job`` and the classes it names, each
with ``openapi_types``, ``attribute_map`` and a docstring per field. This script walks them into a
JSON Schema with every object closed, each field typed, and the ranges and rules the docstrings
state; and lists the fields only the job-details response has (``metadata.id``,
``status``, ...) under ``x-read-only``, so ``hacfg import`` can drop them from a fetched job.

hacfg reads the written file; it never imports the SDK (that takes longer than a whole lint).
tests/test_modelarts_sdk.py fails when the committed file differs from a fresh run::

    python scripts/modelarts_schema.py            # rewrite the committed schema
    python scripts/modelarts_schema.py --check    # exit 1 when it is stale
"""

from __future__ import annotations

import json
import re
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

SCHEMA = Path(__file__).resolve().parent.parent / "schemas" / "modelarts-training-job.schema.json"
REQUEST = "Job"  # CreateTrainingJobRequest.body
RESPONSE = "ShowTrainingJobDetailsResponse"
ANY_ITEM = "*"  # in an x-read-only path: every element of an array

_SCALARS = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}

# Required fields: the SDK's models mark none; these are the API reference's "Mandatory: Yes", less
# those with a documented default (Job.kind).
REQUIRED = {
    "Job": ["kind", "metadata"],
    "JobMetadata": ["name"],
    "Input": ["name", "remote"],
    "Output": ["name", "remote"],
    "AutoStop": ["time_unit", "duration"],
}

# What a docstring states in words, as JSON Schema. The phrase must still be in the docstring:
# when the SDK rewords or drops it, generation fails instead of keeping a rule it no longer states.
STATED: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {
    ("JobMetadata", "name"): ("限制为1-64位只含数字、字母、下划线和中划线", {"pattern": "^[A-Za-z0-9_-]{1,64}$"}),
    ("JobMetadata", "description"): ("字符串的长度限制为[0, 256]", {"maxLength": 256}),
    ("JobAlgorithm", "local_code_dir"): (
        "必须为/home下的目录",
        # under /home, and not /home/ma-user, nor /home/ma-user/{modelarts,modelarts-dev,infer} or below
        {"pattern": "^/home/(?!ma-user/?$|ma-user/(modelarts|modelarts-dev|infer)(/|$))[^/]"},
    ),
    ("JobAlgorithm", "environments"): (
        "key最大允许填写8192字符，value最大允许填写4096字符，最多允许100对环境变量",
        {
            "maxProperties": 100,
            "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$", "maxLength": 8192},
            "additionalProperties": {"type": "string", "maxLength": 4096, "pattern": "^[^$]*$"},
        },
    ),
}

# "**取值范围**： - job：普通作业 - edge_job：边缘作业", "枚举值： - JobStarted：作业开始", "可选取值如下： - HOURS":
# a list whose every item is a name, alone or followed by its meaning after a colon.
_CHOICES = re.compile(r"(?:取值范围\*\*：|枚举值：|可选取值如下：)\s*(-[^*]*)")
_CHOICE = re.compile(r"([A-Za-z][\w.-]*)\s*(?:[：:].*)?", re.DOTALL)
# "可选取值如下： - modelarts.pool.visual.xlarge（1卡） - ...": values a field takes in some cases (a dedicated
# pool's flavors; a public pool has others): examples, for editors to offer, not an enum.
_EXAMPLE = re.compile(r"-\s*([A-Za-z][\w.-]*)（")
_DEFAULT = re.compile(r"\*\*默认取值\*\*：\s*([A-Za-z][\w.-]*)。")  # "**默认取值**：job。"
_LISTED = re.compile(r"取值范围\*\*：([A-Za-z0-9]+(?:、[A-Za-z0-9]+)+)\s")  # "**取值范围**：v0、v1"
_RANGE = re.compile(r"(?:取值范围\*\*：|范围为\s*)(\d+)\s*-\s*(\d+)")  # "**取值范围**：0-3", "范围为 1-100"
_LEAST = re.compile(r"最小值为(\d+)")
_TOGETHER = re.compile(r"应与(\w+)一同出现")  # "应与boot_file一同出现": code_dir needs boot_file


def model(name: str) -> Any:
    from huaweicloudsdkmodelarts.v1 import model as sdk

    return getattr(sdk, name)


def is_model(name: str) -> bool:
    from huaweicloudsdkmodelarts.v1 import model as sdk

    return hasattr(sdk, name) and hasattr(getattr(sdk, name), "openapi_types")


def fields(name: str) -> dict[str, tuple[str, str, str]]:
    """A model's fields by JSON name: (attribute, openapi type, docstring)."""
    cls = model(name)
    return {
        cls.attribute_map[attribute]: (attribute, kind, getattr(cls, attribute).fget.__doc__ or "")
        for attribute, kind in cls.openapi_types.items()
    }


def element(kind: str) -> str:
    """``list[Input]`` -> ``Input``; anything else as it is."""
    match = re.fullmatch(r"list\[(.*)\]", kind)
    return match.group(1) if match else kind


class Generator:
    def __init__(self) -> None:
        self.defs: dict[str, dict[str, Any]] = {}

    def type_of(self, kind: str) -> dict[str, Any]:
        if kind in _SCALARS:
            return {"type": _SCALARS[kind]}
        if kind == "object":
            return {}
        if match := re.fullmatch(r"list\[(.*)\]", kind):
            return {"type": "array", "items": self.type_of(match.group(1))}
        if match := re.fullmatch(r"dict\(str, (.*)\)", kind):
            return {"type": "object", "additionalProperties": self.type_of(match.group(1))}
        if is_model(kind):
            self.define(kind)
            return {"$ref": f"#/$defs/{kind}"}
        raise ValueError(f"unknown SDK type {kind!r}")

    def define(self, name: str) -> None:
        if name in self.defs:
            return
        self.defs[name] = {}  # a model that names itself (NodeSelectorTerm) refers to this one
        self.defs[name] = self.object(name, nullable=True)

    def object(self, name: str, *, nullable: bool = False) -> dict[str, Any]:
        """``name``'s fields, closed. The SDK reads a null as a field not given (real bodies carry
        ``"auto_search": null``), so every field that is not required may be null."""
        properties: dict[str, Any] = {}
        required = [key for key in REQUIRED.get(name, []) if _default(fields(name)[key][2]) is None]
        together: dict[str, list[str]] = {}
        for key, (attribute, kind, doc) in fields(name).items():
            schema = self.type_of(kind)
            scalar = schema if schema.get("type") != "array" else schema["items"]
            schema_type = scalar.get("type")
            if schema_type == "string" and (choices := _choices(doc)):
                scalar["x-documented"] = choices
                if (default := _default(doc)) in choices:
                    scalar["default"] = default
            elif schema_type == "string" and (examples := _EXAMPLE.findall(doc)):
                scalar["examples"] = examples
            if schema_type in ("integer", "number"):
                scalar.update(_bounds(doc))
            if (stated := STATED.get((name, attribute))) is not None:
                phrase, keywords = stated
                if phrase not in doc:
                    raise ValueError(f"{name}.{attribute}: the docstring no longer says {phrase!r}")
                schema.update(keywords)
            for other in _TOGETHER.findall(doc):
                if other in fields(name):
                    together[key] = [other]
            if "type" in schema and key not in required:
                schema["type"] = [schema["type"], "null"]
            properties[key] = schema
        made: dict[str, Any] = {"type": ["object", "null"] if nullable else "object"}
        if required:
            made["required"] = required
        made["properties"] = properties
        made["additionalProperties"] = False
        if together:
            made["dependentRequired"] = together
        return made


def _choices(doc: str) -> list[str]:
    if match := _CHOICES.search(doc):
        items = [_CHOICE.fullmatch(item.strip()) for item in re.split(r"\s+-\s+", match.group(1)[1:])]
        return [item.group(1) for item in items if item] if all(items) else []
    listed = _LISTED.search(doc)
    return listed.group(1).split("、") if listed else []


def _default(doc: str) -> str | None:
    """The default a docstring states, when it is one of the values it lists."""
    match = _DEFAULT.search(doc)
    return match.group(1) if match and match.group(1) in _choices(doc) else None


def _bounds(doc: str) -> dict[str, int]:
    if match := _RANGE.search(doc):
        return {"minimum": int(match.group(1)), "maximum": int(match.group(2))}
    if match := _LEAST.search(doc):
        return {"minimum": int(match.group(1))}
    return {}


def read_only(request: str, response: str, path: tuple[str, ...] = ()) -> list[list[str]]:
    """Paths of the fields ``response`` has and ``request`` has not: what the platform sets itself."""
    found: list[list[str]] = []
    asked = fields(request)
    for key, (_, kind, _) in fields(response).items():
        here = (*path, key) if not kind.startswith("list[") else (*path, key, ANY_ITEM)
        if key not in asked:
            found.append([*path, key])
        elif is_model(element(kind)) and is_model(element(asked[key][1])):
            found.extend(read_only(element(asked[key][1]), element(kind), here))
    return found


def generate() -> dict[str, Any]:
    """The schema, as the installed SDK describes the body."""
    made = Generator()
    root = made.object(REQUEST)
    sdk = f"huaweicloudsdkmodelarts {version('huaweicloudsdkmodelarts')}"
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "ModelArts create-training-job request body (POST /v2/{project_id}/training-jobs)",
        "description": (
            f"Generated by scripts/modelarts_schema.py from {sdk}"
            " (v1.model.Job and the classes it names): do not edit. x-read-only lists what only a fetched job has."
        ),
        **root,
        "x-read-only": read_only(REQUEST, RESPONSE),
        "$defs": dict(sorted(made.defs.items())),
    }


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    text = render(generate())
    if "--check" in argv:
        if SCHEMA.read_text(encoding="utf-8") != text:
            print(f"{SCHEMA}: stale; run python scripts/modelarts_schema.py", file=sys.stderr)
            return 1
        return 0
    SCHEMA.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
