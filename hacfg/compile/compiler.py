"""Compile a validated config into a target's document and check it against the target's schema.

Targets are plugins (:class:`hacfg.plugin.targets.Target` subclasses from the ``hacfg_targets`` hook),
handed in by name; this module owns what every target shares: choosing one, schema validation
with errors pointed back at the scenario file, merging into an existing document.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hacfg.compile.schemacheck import satisfies
from hacfg.plugin.targets import Build, Target
from hacfg.scenario.config import ConfigInvalid, Loaded, Presets, load_config
from hacfg.scenario.source import Document, InputError, LogicalPath, did_you_mean, dotted, load, lookup


def build_file(
    scenario: Path,
    target: str,
    presets: Presets,
    targets: Mapping[str, Target],
    *,
    platform: str | None = None,
    only: str | None = None,
    into: Path | None = None,
) -> tuple[str, list[str]]:
    """``hacfg build``: the scenario file compiled by the named target, and the notes to show."""
    loaded = load_config(scenario, presets, platform=platform)
    chosen = get_target(target, targets)
    return compile_config(loaded, chosen, only=only, into=load(into) if into is not None else None)


def get_target(name: str, available: Mapping[str, Target]) -> Target:
    """The target called ``name`` among those the installed plugins provide."""
    if name not in available:
        known = ", ".join(sorted(available))
        raise InputError(f"unknown target {name!r}{did_you_mean(name, list(available))} (known: {known})")
    return available[name]


def compile_config(
    loaded: Loaded, target: Target, *, only: str | None = None, into: Document | None = None
) -> tuple[str, list[str]]:
    """The serialized output and the notes to show; raises ConfigInvalid when it fails the schema."""
    built = target.build(loaded.config)
    built.notes[:0] = loaded.notes
    if built.refused:
        raise ConfigInvalid([_at_key(loaded, key, message) for key, message in built.refused])
    if only is not None and only not in target.parts:
        choices = ", ".join(target.parts) or "none"
        raise InputError(f"--only {only!r}: target {target.name!r} has no such part (parts: {choices})")
    document = built.document
    if into is not None:
        if not isinstance(into.data, dict):
            raise InputError("--into expects a request body, a mapping", into.span(()))
        own = _unstated_removed(target.part(document, only) if only else document, built, loaded, into.data)
        document = target.merge_into(into.data, own, loaded.config)
        built.notes.extend(_changes(into.data, document, target, built))
    _validate(document, target, built, loaded, into)
    missing = target.missing(loaded.config, document) if only is None else []
    if missing:
        hint = f" (--only {target.parts[0]} builds just that part)" if target.parts else ""
        message = f"the {target.name} job is incomplete: {'; '.join(missing)}{hint}"
        where = next((path for path in (("job",), ("extends",), ("scenario",)) if stated(loaded, path)), None)
        if where is None:
            raise InputError(message, file=loaded.document.path)
        raise InputError(message, loaded.document.span(where))
    if only is not None and into is None:
        document = target.part(document, only)
    return target.serialize(document), built.notes


def _unstated_removed(document: dict[str, Any], built: Build, loaded: Loaded, existing: Any) -> dict[str, Any]:
    """``document`` without the job values the scenario file does not state itself (a preset's node count,
    a default name) where the existing body has its own: merging must not override the body with them."""
    document = copy.deepcopy(document)
    for output, origin in built.origins.items():
        if origin[0] != "job" or stated(loaded, origin) or lookup(existing, output) is None:
            continue
        parent = lookup(document, output[:-1]) if output[:-1] else document
        if isinstance(parent, dict):
            parent.pop(str(output[-1]), None)
    return document


def _changes(existing: Any, merged: Any, target: Target, built: Build, path: LogicalPath = ()) -> list[str]:
    """One line per field of the existing document that ``--into`` changes, outside what the target owns."""
    if isinstance(existing, dict) and existing:
        return [
            line for key, value in existing.items() for line in _changes(value, merged, target, built, (*path, key))
        ]
    now = lookup(merged, path)
    if target.owns(path) or json.dumps(now) == json.dumps(existing):
        return []
    origin = built.origins.get(path)
    source = f" (from {dotted(origin)})" if origin else ""
    return [f"--into changes {dotted(path)}: {json.dumps(existing)} -> {json.dumps(now)}{source}"]


def _at_key(loaded: Loaded, key: LogicalPath, message: str) -> InputError:
    """``message`` at ``key`` where a file states it, else at the file."""
    if key in loaded.document.values:
        return InputError(message, loaded.document.span(key))
    return InputError(message, file=loaded.document.path)


def stated(loaded: Loaded, path: LogicalPath) -> bool:
    """Whether the user's own file gives ``path``, rather than a preset or a default."""
    return path in loaded.document.values and loaded.document.values[path].file == loaded.document.path


def _validate(document: dict[str, Any], target: Target, built: Build, loaded: Loaded, into: Document | None) -> None:
    schema = target.schema_document()
    if schema is None:
        return
    if satisfies(document, schema):
        return
    from jsonschema import Draft202012Validator  # only to explain: it costs more to import than the rest of build

    errors = [_locate(err, target, built, loaded, into) for err in Draft202012Validator(schema).iter_errors(document)]
    if errors:
        raise ConfigInvalid(sorted(errors, key=str))


def _locate(err: Any, target: Target, built: Build, loaded: Loaded, into: Document | None) -> InputError:
    path = tuple(err.absolute_path)
    message = f"{target.name} output {dotted(path) or '(root)'}: {err.message}"
    on_key = err.validator == "additionalProperties"
    if err.validator == "additionalProperties" and err.validator_value is False and isinstance(err.instance, dict):
        # a closed object: name the first unknown key, at the place that wrote it, with the nearest known one
        known = list(err.schema.get("properties", {}))
        key = next(key for key in err.instance if key not in known)
        message = f"{target.name} output {dotted(path) or '(root)'}: unknown key {key!r}{did_you_mean(key, known)}"
        path = (*path, key)
    if err.validator == "dependentRequired" and isinstance(err.instance, dict):
        # "boot_file is a dependency of code_dir": point at the code_dir the file wrote
        path = (*path, next(key for key in err.validator_value if key in err.instance))
    for output, origin in built.origins.items():  # what wrote the values under path wrote path itself
        if path and output[: len(path)] == path and len(output) > len(path):
            written = origin[: len(origin) - len(output) + len(path)]
            return InputError(message, loaded.document.span(written, key=on_key))
    for cut in range(len(path), 0, -1):
        if path[:cut] in built.origins:
            return InputError(message, loaded.document.span(built.origins[path[:cut]] + path[cut:], key=on_key))
    if into is not None:
        return InputError(message, into.span(path, key=on_key))
    return InputError(message, file=loaded.document.path)
