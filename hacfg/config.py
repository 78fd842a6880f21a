"""The scenario file, format version 1: the one model that the linter, the targets and the agent read.

``load_config`` is the whole front end: parse with positions, merge over the preset the file
extends, validate, and map every validation error back to ``file:line:col``. The presets are
an argument: this module knows nothing of the plugins that provide them.
"""

from __future__ import annotations

import copy
import functools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

from hacfg import platform as ma
from hacfg.names import Platform, Scenario
from hacfg.source import Document, InputError, LogicalPath, Span, did_you_mean, dotted, load, lookup

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

Presets = Mapping[str, Path]  # preset name -> scenario file, as the installed plugins provide them

# What only the user can know about their training script: a preset recommends these (its file
# states them, and lint messages quote them) but never supplies them to a file that extends it.
USER_ONLY: tuple[LogicalPath, ...] = (("checkpoint", "path"), ("checkpoint", "interval"), ("checkpoint", "resume"))

_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
DURATION_PATTERN = r"^(?=\d)(\d+d)?(\d+h)?(\d+m)?(\d+s)?$"


def parse_duration(value: Any) -> Any:
    """``90s``, ``30m``, ``2h``, ``1d`` or a combination such as ``1h30m``."""
    if isinstance(value, timedelta):
        return value
    if not isinstance(value, str):
        raise ValueError(f"a duration needs a unit, like '30m' or '2h' (got {value!r})")
    match = _DURATION.fullmatch(value.strip())
    if not value.strip() or not match:
        raise ValueError(f"{value!r} is not a duration; use a number and a unit: 90s, 30m, 2h, 1d")
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


def format_duration(value: timedelta) -> str:
    """The shortest spelling that ``parse_duration`` reads back."""
    seconds = int(value.total_seconds())
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            amount, seconds = divmod(seconds, size)
            if amount or not parts:
                parts.append(f"{amount}{unit}")
    return "".join(parts)


Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN, "examples": ["90s", "30m", "2h", "1d"]}),
]


def _numbers_as_strings(value: Any) -> Any:
    """Environment values are strings on the platform; a YAML number is what the user meant."""
    if isinstance(value, dict):
        return {k: str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v for k, v in value.items()}
    return value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Job(_Section):
    """What runs, and where."""

    name: str | None = Field(
        None, pattern=ma.JOB_NAME_PATTERN, description="metadata.name; defaults to the scenario name."
    )
    nodes: int = Field(1, ge=1, description="spec.resource.node_count")
    accelerator: Literal["gpu", "npu", "cpu"] = "gpu"
    network: Literal["infiniband", "roce", "ethernet"] = "ethernet"
    image: str | None = Field(None, description="algorithm.engine.image_url (SWR org/image:tag)")
    command: str | None = Field(None, description="algorithm.command")
    flavor: str | None = Field(None, description="spec.resource.flavor_id")
    pool: str | None = Field(None, description="spec.resource.pool_id (dedicated pool)")
    environment: Annotated[dict[str, str], BeforeValidator(_numbers_as_strings)] = Field(
        default_factory=dict, description="algorithm.environments"
    )


class Checkpoint(_Section):
    """Where the training script saves, so a restart resumes instead of starting over."""

    path: str | None = Field(None, description="obs://..., or a shared mount that survives a reschedule")
    interval: Duration | None = Field(None, description="How often the training script saves.")
    resume: bool = Field(False, description="The script reloads the newest checkpoint at start-up.")


class Restart(_Section):
    """The platform's restart budgets."""

    max: int = Field(
        0,
        ge=0,
        le=ma.RETRY_LIMITS["huaweicloud"][1],
        description="fault-tolerance/job-retry-num; 0 turns auto restart off.",
    )
    unconditional: bool = Field(False, description="fault-tolerance/job-unconditional-retry")
    on_hang: bool = Field(False, description="fault-tolerance/hang-retry")
    pod_reschedules: int = Field(0, ge=0, description="fault-tolerance/pod-retry-num")

    @field_validator("max")
    @classmethod
    def _within_platform_limits(cls, value: int, info: ValidationInfo) -> int:
        platform = (info.context or {}).get("platform")
        if value and platform in ma.RETRY_LIMITS:
            low, high = ma.RETRY_LIMITS[platform]
            if not low <= value <= high:
                raise ValueError(f"{platform} allows {low} to {high} restarts (0 turns auto restart off), got {value}")
        return value


class Hang(_Section):
    """Suspension detection: no output, heartbeat or accelerator activity for ``timeout``."""

    detect: bool = Field(True, description="Suspension detection (GPU/NPU jobs only).")
    timeout: Duration = Field(
        timedelta(minutes=ma.DEFAULT_HANG_MINUTES), description="MA_HANG_DETECT_TIME, in whole minutes."
    )


class HAConfig(_Section):
    """A training job's fault-tolerance intent."""

    model_config = ConfigDict(title="hacfg scenario file, version 1")

    version: Literal[1]
    scenario: Scenario
    platform: Platform = "huaweicloud"
    extends: str | None = Field(
        None, description="A preset name or a relative path; defaults to the scenario's preset."
    )
    job: Job = Field(default_factory=Job)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    restart: Restart = Field(default_factory=Restart)
    hang: Hang = Field(default_factory=Hang)
    operator_retry: bool = Field(False, description="fault-tolerance/hccl_op_retry (Ascend supernode pools only).")
    precheck: bool = Field(True, description="Environment pre-check before the command starts.")
    passthrough: dict[str, Any] = Field(
        default_factory=dict,
        description="ModelArts request fields hacfg does not model (hacfg import puts them here); "
        "merged verbatim into the modelarts output.",
    )

    @property
    def name(self) -> str:
        return self.job.name or self.scenario


class ConfigError(InputError):
    """One problem in a scenario file; ``unknown_key`` tells a misspelling from a bad value."""

    span: Span

    def __init__(self, message: str, span: Span, path: LogicalPath, unknown_key: bool = False) -> None:
        super().__init__(message, span)
        self.path = path
        self.unknown_key = unknown_key


class ConfigInvalid(Exception):
    """Every problem found in a scenario file, in file order."""

    def __init__(self, errors: Sequence[InputError]) -> None:
        super().__init__("\n".join(map(str, errors)))
        self.errors = list(errors)


@dataclass(frozen=True)
class Loaded:
    """A validated config and the merged document it came from (for positions)."""

    config: HAConfig
    document: Document


def load_config(path: str | Path, presets: Presets, *, platform: str | None = None) -> Loaded:
    """Parse, merge over presets, and validate; raises InputError or ConfigInvalid."""
    return validate(with_presets(load(path), presets), platform=platform)


def validate(document: Document, *, platform: str | None = None) -> Loaded:
    data = document.data
    if data is None:
        raise ConfigInvalid(
            [InputError("empty file: a scenario file needs at least 'version: 1' and 'scenario'", document.span(()))]
        )
    if not isinstance(data, dict):
        raise ConfigInvalid(
            [InputError("a scenario file is a mapping of keys (version, scenario, job, ...)", document.span(()))]
        )
    if platform is not None:
        data = {**data, "platform": platform}
    chosen = data.get("platform", "huaweicloud")  # a bad value is reported on its own line; limits need a name
    try:
        config = HAConfig.model_validate(data, context={"platform": chosen if isinstance(chosen, str) else None})
    except ValidationError as err:
        raise ConfigInvalid(_errors(err, document)) from None
    return Loaded(config=config, document=document)


def as_base(document: Document) -> Document:
    """A file that others extend, checkable alone: the keys only a whole scenario needs are filled in."""
    if not isinstance(document.data, dict):
        return document
    return replace(document, data={"version": 1, "scenario": "single-node", **document.data})


def with_presets(document: Document, presets: Presets, chain: tuple[Path, ...] = ()) -> Document:
    """The document merged over the preset it extends (explicitly, or through ``scenario``)."""
    data = document.data
    if not isinstance(data, dict):
        return document
    if "extends" in data:
        here = Path(document.path).resolve()
        extends_span = document.span(("extends",))
        base_path = find_preset(data["extends"], presets, relative_to=here.parent, span=extends_span).resolve()
        if base_path in (*chain, here):
            names = " -> ".join(p.name for p in (*chain, here, base_path))
            raise InputError(f"extends cycle: {names}", document.span(("extends",)))
    else:
        scenario = data.get("scenario")
        preset = presets.get(scenario) if isinstance(scenario, str) else None
        if preset is None or preset in chain or _same_file(preset, document.path):
            return document  # no preset, or this file is the preset itself
        base_path = preset
    base = with_presets(_load_base(base_path), presets, (*chain, base_path))
    if _is_preset(base_path, presets):
        base = _without(base, USER_ONLY)
    return _overlay(base, document)


def preset_advice(scenario: str, presets: Presets) -> dict[LogicalPath, Any]:
    """What the scenario's preset recommends for the paths only the user can know, for messages."""
    preset = presets.get(scenario)
    if preset is None:
        return {}
    data = _load_base(preset).data
    found = {path: lookup(data, path) for path in USER_ONLY}
    return {path: value for path, value in found.items() if value is not None}


def _is_preset(path: Path, presets: Presets) -> bool:
    return any(_same_file(path, str(preset)) for preset in presets.values())


def _without(document: Document, paths: Sequence[LogicalPath]) -> Document:
    """``document`` with ``paths`` (and everything under them) taken out."""
    data = copy.deepcopy(document.data)
    for path in paths:
        parent = lookup(data, path[:-1])
        if isinstance(parent, dict):
            parent.pop(path[-1], None)

    def kept(spans: dict[LogicalPath, Span]) -> dict[LogicalPath, Span]:
        return {at: span for at, span in spans.items() if not any(at[: len(p)] == p for p in paths)}

    return Document(document.path, document.text, data, kept(document.values), kept(document.keys))


def _same_file(a: Path, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


@functools.lru_cache(maxsize=32)
def _load_base(path: Path) -> Document:
    """Presets and base files are read once per process, however many files extend them."""
    return load(path)


def find_preset(reference: object, presets: Presets, *, relative_to: Path, span: Span | None = None) -> Path:
    """A preset by name, or a scenario file by path relative to the file that names it."""
    if not isinstance(reference, str) or not reference:
        raise InputError("extends: expected a preset name or a relative path", span)
    if "/" in reference or reference.endswith((".yaml", ".yml", ".json")):
        path = relative_to / reference
        if not path.is_file():
            raise InputError(f"extends: no file {reference!r} next to this file", span)
        return path
    if reference not in presets:
        known = ", ".join(sorted(presets)) or "none installed"
        raise InputError(
            f"extends: unknown preset {reference!r}{did_you_mean(reference, list(presets))} (known: {known})", span
        )
    return presets[reference]


def _overlay(base: Document, top: Document) -> Document:
    merged = Document(top.path, top.text, deep_merge(base.data, top.data))
    merged.values = {**base.values, **top.values}
    merged.keys = {**base.keys, **top.keys}
    return merged


def deep_merge(base: Any, top: Any) -> Any:
    """``top`` over ``base``: mappings merge key by key, anything else replaces."""
    if isinstance(base, dict) and isinstance(top, dict):
        out = dict(base)
        for key, value in top.items():
            out[key] = deep_merge(base[key], value) if key in base else value
        return out
    return top


def _fields_at(path: LogicalPath) -> list[str]:
    model: Any = HAConfig
    for key in path:
        is_model = isinstance(model, type) and issubclass(model, BaseModel)
        field = model.model_fields.get(key) if is_model and isinstance(key, str) else None
        if field is None:
            return []
        model = field.annotation
    return list(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else []


def _errors(err: ValidationError, document: Document) -> list[ConfigError]:
    errors: list[ConfigError] = []
    for item in err.errors(include_url=False):
        path = tuple(item["loc"])
        kind = item["type"]
        if kind == "extra_forbidden":
            where = f" in {dotted(path[:-1])}" if path[:-1] else ""
            message = f"unknown key {path[-1]!r}{where}{did_you_mean(str(path[-1]), _fields_at(path[:-1]))}"
            errors.append(ConfigError(message, document.span(path, key=True), path, unknown_key=True))
            continue
        if kind == "missing":
            message = f"missing required key {dotted(path)!r}"
            span = document.span(path[:-1])
        else:
            message = f"{dotted(path)}: {_message(item)}"
            span = document.span(path)
        errors.append(ConfigError(message, span, path))
    return sorted(errors, key=lambda e: (e.span.file != document.path, e.span.line, e.span.column))


def _message(item: ErrorDetails) -> str:
    if item["type"] == "value_error":
        return item["msg"].removeprefix("Value error, ")  # hacfg's own words, which name the value
    message = item["msg"]
    if isinstance(item["input"], str | int | float | bool):
        message += f" (got {item['input']!r})"
    if item["type"] == "literal_error":
        choices = re.findall(r"'([^']*)'", item["ctx"]["expected"])
        message += did_you_mean(item["input"], choices)
    return message


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the scenario format, as committed in ``schemas/hacfg.schema.json``."""
    schema = HAConfig.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def scenario_document(config: HAConfig) -> dict[str, Any]:
    """The config, fully merged, as a scenario file needing no preset: what a pod is given."""

    def spell(value: Any) -> Any:
        if isinstance(value, timedelta):
            return format_duration(value)
        if isinstance(value, dict):
            return {k: spell(v) for k, v in value.items()}
        return value

    document: dict[str, Any] = spell(config.model_dump(exclude_none=True, exclude={"extends"}))
    return document
