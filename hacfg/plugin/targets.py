"""What a compile target is: the types target authors use (through :mod:`hacfg.plugin`).

A target turns the validated config into one document (a ModelArts request body, a Volcano
Job); :mod:`hacfg.compile.compiler` runs it, validates the output against ``schema`` and writes it.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from hacfg.scenario.config import deep_merge
from hacfg.scenario.model import HAConfig
from hacfg.scenario.source import LogicalPath


@dataclass
class Build:
    """A target's output, the notes for the user, and which config key each output path came from.

    ``refused``: config values the target cannot write, each with the key that states it and why, in the
    user's words; the build stops with one line for each, at that key.
    """

    document: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    origins: dict[LogicalPath, LogicalPath] = field(default_factory=dict)
    refused: list[tuple[LogicalPath, str]] = field(default_factory=list)


class Target:
    """A compile target. Subclasses set the class attributes and implement :meth:`build`."""

    name: ClassVar[str]
    description: ClassVar[str]
    schema: ClassVar[Path | None] = None  # JSON Schema every output must satisfy
    format: ClassVar[str] = "json"  # json | yaml
    parts: ClassVar[tuple[str, ...]] = ()  # names accepted by --only

    def build(self, config: HAConfig) -> Build:
        raise NotImplementedError

    def schema_document(self) -> dict[str, Any] | None:
        """The JSON Schema every output must satisfy: ``schema``'s file, read when a build checks its output.
        A target whose schema extends another's builds it here rather than ship a copy."""
        return json.loads(self.schema.read_text()) if self.schema is not None else None

    def missing(self, config: HAConfig, document: dict[str, Any]) -> list[str]:
        """What the platform needs before it runs ``document``, each in the user's words.

        Checked on every whole document, after ``--into`` merged in what the existing one
        supplies; ``--only`` prints a part and is not checked.
        """
        return []

    def part(self, document: dict[str, Any], name: str) -> dict[str, Any]:
        """The slice of ``document`` that ``--only NAME`` prints."""
        raise NotImplementedError

    def owns(self, path: LogicalPath) -> bool:
        """Whether ``--into`` replaces the existing document's value at ``path`` by design (no note)."""
        return False

    def merge_into(self, existing: dict[str, Any], document: dict[str, Any], config: HAConfig) -> dict[str, Any]:
        """``document`` merged into an existing one, keeping everything it does not set."""
        merged: dict[str, Any] = deep_merge(existing, document)
        return merged

    def serialize(self, document: dict[str, Any]) -> str:
        return dump(document, self.format)


def schema_file(name: str) -> Path:
    """A schema shipped in hacfg's ``schemas/`` folder (beside its package file, as pip installs it)."""
    package = importlib.import_module("hacfg.schemas")  # data only, mapped from schemas/ at install
    return Path(str(package.__file__)).with_name(name)


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
    text: str = yaml.dump_all(
        documents,
        Dumper=Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        explicit_start=len(documents) > 1,
    )
    return text
