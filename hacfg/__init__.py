"""hacfg: fault tolerance for ML training jobs, from one small scenario file.

Plugin authors import from :mod:`hacfg.plugin`.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    # Both read lazily, so code that only wants the heartbeat imports neither pluggy nor metadata.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("hacfg")
        except PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
            return "0+unknown"
    if name == "hookimpl":
        from hacfg.plugin.hookspecs import hookimpl

        return hookimpl
    raise AttributeError(f"module 'hacfg' has no attribute {name!r}")
