"""Reading a scenario file: presets merged underneath, validated, errors at ``file:line:col``.

``load_config`` is the whole front end: parse with positions, merge over the preset the file
extends, validate, and map every validation error back to ``file:line:col``. The presets are
an argument: this module knows nothing of the plugins that provide them.

A plainly valid file is checked without importing pydantic (:mod:`hacfg.scenario.fastcheck`); any
other goes to pydantic (:mod:`hacfg.scenario.validation`), whose errors are mapped here.
"""

from __future__ import annotations

import copy
import functools
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hacfg.scenario import fastcheck
from hacfg.scenario.model import HAConfig
from hacfg.scenario.passthrough import PASSTHROUGH
from hacfg.scenario.request import environments_as_mapping, environments_note
from hacfg.scenario.source import (
    Document,
    InputError,
    LogicalPath,
    Span,
    closest,
    did_you_mean,
    dotted,
    load,
    lookup,
)

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

Presets = Mapping[str, Path]  # preset name -> scenario file, as the installed plugins provide them

# What only the user can know about their training script: a preset recommends these (its file
# states them, and lint messages quote them) but never supplies them to a file that extends it.
USER_ONLY: tuple[LogicalPath, ...] = (("checkpoint", "path"), ("checkpoint", "interval"), ("checkpoint", "resume"))


class ConfigError(InputError):
    """One problem in a scenario file; ``unknown_key`` tells a misspelling from a bad value, and
    ``suggestion`` is the known key it most likely meant."""

    span: Span

    def __init__(
        self, message: str, span: Span, path: LogicalPath, unknown_key: bool = False, suggestion: str | None = None
    ) -> None:
        super().__init__(message, span)
        self.path = path
        self.unknown_key = unknown_key
        self.suggestion = suggestion


class ConfigInvalid(Exception):
    """Every problem found in a scenario file, in file order."""

    def __init__(self, errors: Sequence[InputError]) -> None:
        super().__init__("\n".join(map(str, errors)))
        self.errors = list(errors)


class Loaded:
    """A validated config, the merged document it came from (for positions), and what was read
    differently from how it was written."""

    __slots__ = ("config", "document", "notes")

    def __init__(self, config: HAConfig, document: Document, notes: tuple[str, ...] = ()) -> None:
        self.config = config
        self.document = document
        self.notes = notes


def load_config(path: str | Path, presets: Presets, *, platform: str | None = None) -> Loaded:
    """Parse, merge over presets, and validate; raises InputError or ConfigInvalid. An installed preset's value
    refused here (``--platform otc`` of the long-term preset's 5 restarts) is reported where the user chose that
    preset: at this file's ``extends:`` or ``scenario:``, or at the command that names the preset itself. The
    user cannot edit the installed file, so no error points into it."""
    own = load(path)
    try:
        return validate(with_presets(own, presets), platform=platform)
    except ConfigInvalid as invalid:
        named = next((name for name, preset in presets.items() if _same_file(Path(path), str(preset))), None)
        if named is not None:
            raise ConfigInvalid([_at_command(error, named) for error in invalid.errors]) from None
        raise ConfigInvalid([_in_own_file(error, own, presets) for error in invalid.errors]) from None


def inherited_at(own: Document) -> LogicalPath:
    """Where a file chooses what it inherits: its ``extends:``, else its ``scenario:``."""
    return ("extends",) if ("extends",) in own.values else ("scenario",)


def _in_own_file(error: InputError, own: Document, presets: Presets) -> InputError:
    if error.span is None or not _is_preset(Path(error.span.file), presets):
        return error  # the file's own, or a base file the user wrote and can fix there
    message, span = f"{error.message} (inherited from {Path(error.span.file).name})", own.span(inherited_at(own))
    if isinstance(error, ConfigError):
        return ConfigError(message, span, error.path, error.unknown_key, error.suggestion)
    return InputError(message, span)


def _at_command(error: InputError, preset: str) -> InputError:
    """An error of a preset built by name, said of that name: what to write instead of where to edit."""
    key = dotted(error.path) if isinstance(error, ConfigError) and error.path else "the value"
    advice = f"the preset's own value; write a scenario file with 'extends: {preset}' that sets {key}, and build that"
    return InputError(f"{error.message} ({advice})", file=preset)


def validate(document: Document, *, platform: str | None = None) -> Loaded:
    notes: tuple[str, ...] = ()
    if (pairs := environments_as_mapping(document, PASSTHROUGH)) is not None:
        document, notes = pairs, (environments_note(PASSTHROUGH),)
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
    context = {"platform": chosen if isinstance(chosen, str) else None}
    from hacfg.scenario._pruned_core_schema import SCHEMA  # generated from hacfg.scenario.model; imports it

    config: HAConfig | None = fastcheck.validate(SCHEMA, data, context)
    if config is None:
        from hacfg.scenario import validation  # pydantic: only for files that are not plainly valid

        judged = validation.model_or_errors(data, context)
        if not isinstance(judged, HAConfig):
            raise ConfigInvalid(_errors(judged, document, SCHEMA))
        config = judged
    return Loaded(config=config, document=document, notes=notes)


class Salvaged:
    """The valid part of an invalid scenario file, and where it is not to be judged: an unknown key,
    and the whole section of a bad value (without it, that section would be judged by its default)."""

    __slots__ = ("loaded", "unjudged")

    def __init__(self, loaded: Loaded, unjudged: tuple[LogicalPath, ...]) -> None:
        self.loaded = loaded
        self.unjudged = unjudged


def salvage(document: Document, invalid: ConfigInvalid, *, platform: str | None = None) -> Salvaged | None:
    """``document`` without every key and value ``invalid`` names, validated again, so that the
    rules can judge what is valid (a typo must not hide a risk); None when what is left is still
    invalid (a required key is missing or wrong) or an error names no key that can go."""
    data = copy.deepcopy(document.data)
    unjudged = []
    for error in invalid.errors:
        path = getattr(error, "path", None)
        while path:
            parent = lookup(data, path[:-1])
            if isinstance(parent, dict) and path[-1] in parent:
                break
            path = path[:-1]  # pydantic's place for a dict key ("[key]") or a value inside a value
        if not path:
            return None
        parent = lookup(data, path[:-1])
        assert isinstance(parent, dict)
        del parent[path[-1]]
        unknown_key = isinstance(error, ConfigError) and error.unknown_key
        unjudged.append(tuple(path if unknown_key or len(path) == 1 else path[:-1]))
    try:
        loaded = validate(document.with_data(data), platform=platform)
    except ConfigInvalid:
        return None
    return Salvaged(loaded, tuple(unjudged))


def as_base(document: Document) -> Document:
    """A file that others extend, checkable alone: the keys only a whole scenario needs are filled in."""
    if not isinstance(document.data, dict):
        return document
    return document.with_data({"version": 1, "scenario": "single-node", **document.data})


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
    return _overlay(_resolved_base(base_path, tuple(presets.items()), (*chain, base_path)), document)


@functools.lru_cache(maxsize=32)
def _resolved_base(path: Path, presets: tuple[tuple[str, Path], ...], chain: tuple[Path, ...]) -> Document:
    """A base as every file extending it sees it (merged over its own base; a preset without what
    only the user knows), made once per process however many files extend it."""
    known = dict(presets)
    base = with_presets(read_base(path), known, chain)
    return _without(base, USER_ONLY) if _is_preset(path, known) else base


def preset_advice(scenario: str, presets: Presets) -> dict[LogicalPath, Any]:
    """What the scenario's preset recommends for the paths only the user can know, for messages."""
    preset = presets.get(scenario)
    if preset is None:
        return {}
    data = read_base(preset).data
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
def read_base(path: Path) -> Document:
    """A preset or base file, text and data, read once per process however many files extend it
    (until :func:`forget_bases`); the lint engine reads its suppression comments from here too."""
    return load(path)


def forget_bases() -> None:
    """Read presets and base files afresh from now on: a long-lived process saw one change."""
    read_base.cache_clear()
    _resolved_base.cache_clear()


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


def _errors(items: list[ErrorDetails], document: Document, schema: fastcheck.Node) -> list[ConfigError]:
    """pydantic's errors in hacfg's words, each at its place in the file, in file order."""
    errors: list[ConfigError] = []
    for item in items:
        path = tuple(item["loc"])
        kind = item["type"]
        if kind == "unexpected_keyword_argument":
            where = f" in {dotted(path[:-1])}" if path[:-1] else ""
            suggestion = closest(path[-1], fastcheck.keys_at(schema, path[:-1]))
            hint = f"; did you mean {suggestion!r}?" if suggestion else ""
            message = f"unknown key {path[-1]!r}{where}{hint}"
            span = document.span(path, key=True)
            errors.append(ConfigError(message, span, path, unknown_key=True, suggestion=suggestion))
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
