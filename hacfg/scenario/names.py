"""The closed sets of names that the file format, the settings and the command line share.

Each is defined once, as a ``Literal`` (for pydantic, typer and mypy) and as a tuple of its
values (for messages and membership tests). Importing this module costs nothing.
"""

from __future__ import annotations

from typing import Literal, get_args

Scenario = Literal["single-node", "multi-node", "llm-long-term"]

Platform = Literal["huaweicloud", "otc"]
PLATFORMS: tuple[Platform, ...] = get_args(Platform)

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("info", "warning", "error")  # in rising order

Kind = Literal["scenario", "job", "manifest"]  # the kinds of file a rule can read
KINDS: tuple[Kind, ...] = get_args(Kind)


def at_least(severity: Severity, threshold: Severity) -> bool:
    """Whether ``severity`` is ``threshold`` or worse."""
    return SEVERITIES.index(severity) >= SEVERITIES.index(threshold)
