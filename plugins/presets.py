"""The scenario presets: the seed's recommended combinations for each training scenario."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from hacfg.hookspecs import hookimpl


@hookimpl
def hacfg_presets() -> dict[str, Path]:
    folder = resources.files("hacfg.presets")
    return {
        entry.name.removesuffix(".yaml"): Path(str(entry))
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".yaml")
    }
