"""The scenario presets: the seed's recommended combinations for each training scenario."""

from __future__ import annotations

import importlib
from pathlib import Path

from hacfg.plugin import hookimpl


@hookimpl
def hacfg_presets() -> dict[str, Path]:
    # The package's folder, not importlib.resources: that import alone costs a tenth of a lint; and
    # its listing, not a glob, which compiles a pattern.
    folder = Path(str(importlib.import_module("hacfg.presets").__file__)).parent
    return {path.stem: path for path in sorted(folder.iterdir()) if path.suffix == ".yaml"}
