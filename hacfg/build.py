"""Compile a validated config into a target's document, check it against the target's schema, write it.

Targets are plugins (:class:`Target` subclasses from the ``hacfg_targets`` hook); this module
owns what every target shares: choosing one, schema validation with errors pointed back at
the scenario file, merging into an existing document, and deterministic output.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

from hacfg import plugin_manager
from hacfg.config import ConfigInvalid, HAConfig, Loaded, deep_merge
from hacfg.source import Document, InputError, LogicalPath, did_you_mean, dotted


@dataclass
class Build:
    """A target's output, the notes for the user, and which config key each output path came from."""

    document: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    origins: dict[LogicalPath, LogicalPath] = field(default_factory=dict)


class Target:
    """A compile target. Subclasses set the class attributes and implement :meth:`build`."""

    name: ClassVar[str]
    description: ClassVar[str]
    schema: ClassVar[Path | None] = None  # JSON Schema every output must satisfy
    format: ClassVar[str] = "json"  # json | yaml
    parts: ClassVar[tuple[str, ...]] = ()  # names accepted by --only

    def build(self, config: HAConfig) -> Build:
        raise NotImplementedError

    def part(self, document: dict[str, Any], name: str) -> dict[str, Any]:
        """The slice of ``document`` that ``--only NAME`` prints."""
        raise NotImplementedError

    def merge_into(self, existing: dict[str, Any], document: dict[str, Any], config: HAConfig) -> dict[str, Any]:
        """``document`` merged into an existing one, keeping everything it does not set."""
        return deep_merge(existing, document)

    def serialize(self, document: dict[str, Any]) -> str:
        return dump(document, self.format)


def schema_file(name: str) -> Path:
    """A schema shipped in hacfg's ``schemas/`` folder."""
    return Path(str(resources.files("hacfg.schemas").joinpath(name)))


@functools.cache
def targets() -> dict[str, Target]:
    found: dict[str, Target] = {}
    manager = plugin_manager.get()
    for plugin, target in manager.items("hacfg_targets", Target):
        if target.name in found:
            manager.fail(plugin, "hacfg_targets", f"target {target.name!r} is already provided")
        else:
            found[target.name] = target
    return found


def get_target(name: str) -> Target:
    available = targets()
    if name not in available:
        raise InputError(f"unknown target {name!r}{did_you_mean(name, list(available))} (known: {', '.join(sorted(available))})")
    return available[name]


def compile_config(loaded: Loaded, target: Target, *, only: str | None = None, into: Document | None = None) -> tuple[str, list[str]]:
    """The serialized output and the notes to show; raises ConfigInvalid when it fails the schema."""
    built = target.build(loaded.config)
    if only is not None and only not in target.parts:
        choices = ", ".join(target.parts) or "none"
        raise InputError(f"--only {only!r}: target {target.name!r} has no such part (parts: {choices})")
    document = built.document
    if into is not None:
        if not isinstance(into.data, dict):
            raise InputError("--into expects a request body, a mapping", into.span(()))
        document = target.merge_into(into.data, target.part(document, only) if only else document, loaded.config)
    _validate(document, target, built, loaded, into)
    if only is not None and into is None:
        document = target.part(document, only)
    return target.serialize(document), built.notes


def dump(document: Any, fmt: str) -> str:
    if fmt == "yaml":
        return dump_yaml(document)
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def dump_yaml(*documents: Any) -> str:
    """Block-style YAML in key order; multi-line strings (a file in a ConfigMap) as literal blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def string(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    Dumper.add_representer(str, string)
    return yaml.dump_all(documents, Dumper=Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True, explicit_start=len(documents) > 1)


def _validate(document: dict[str, Any], target: Target, built: Build, loaded: Loaded, into: Document | None) -> None:
    if target.schema is None:
        return
    from jsonschema import Draft202012Validator  # only here: it costs more to import than the rest of build

    validator = Draft202012Validator(json.loads(target.schema.read_text()))
    errors = [_locate(err, target, built, loaded, into) for err in validator.iter_errors(document)]
    if errors:
        raise ConfigInvalid(sorted(errors, key=str))


def _locate(err: Any, target: Target, built: Build, loaded: Loaded, into: Document | None) -> InputError:
    path = tuple(err.absolute_path)
    message = f"{target.name} output {dotted(path) or '(root)'}: {err.message}"
    for cut in range(len(path), 0, -1):
        if path[:cut] in built.origins:
            return InputError(message, loaded.document.span(built.origins[path[:cut]] + path[cut:]))
    if into is not None:
        return InputError(message, into.span(path))
    return InputError(message, file=loaded.document.path)
