"""What the installed plugins provide by name, collected once per plugin manager: presets and targets.

Domain modules take these as arguments (``config.load_config(path, presets())``); only this
module and the lint engine ask the plugin manager for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from hacfg.plugin import manager as plugin_manager
from hacfg.scenario.source import InputError, did_you_mean

if TYPE_CHECKING:
    from hacfg.plugin.targets import Target


def presets() -> dict[str, Path]:
    """Every preset by name; two plugins offering one name is a failure of the later one."""
    manager = plugin_manager.get()
    manager.require_builtins("hacfg_presets")

    def collect() -> dict[str, Path]:
        found = manager.unique("hacfg_presets", _preset_entries(manager), what="preset")
        return {name: provided.item for name, provided in found.items()}

    return manager.memo("presets", collect)


def _preset_entries(manager: plugin_manager.Manager) -> Iterator[tuple[str, str, Path]]:
    for plugin, provided in manager.results("hacfg_presets"):
        if not isinstance(provided, dict):
            manager.fail(
                plugin, "hacfg_presets", f"returned {type(provided).__name__}, expected a dict of name -> path"
            )
            continue
        for name, path in provided.items():
            yield plugin, str(name), Path(path).resolve()


def targets() -> dict[str, Target]:
    """Every compile target by name."""
    from hacfg.plugin.targets import Target  # a lint of a scenario without passthrough builds nothing

    manager = plugin_manager.get()
    manager.require_builtins("hacfg_targets")

    def collect() -> dict[str, Target]:
        entries = ((plugin, target.name, target) for plugin, target in manager.items("hacfg_targets", Target))
        found = manager.unique("hacfg_targets", entries, what="target")
        return {name: provided.item for name, provided in found.items()}

    return manager.memo("targets", collect)


def preset_or_path(reference: str) -> Path:
    """A path, or the scenario file of an installed preset: what ``hacfg build NAME`` accepts."""
    path = Path(reference)
    if path.exists() or "/" in reference or reference.endswith((".yaml", ".yml", ".json")):
        return path
    known = presets()
    if reference not in known:
        hint = did_you_mean(reference, list(known))
        raise InputError(f"no such file, nor a preset{hint} (presets: {', '.join(sorted(known))})", file=reference)
    return known[reference]
