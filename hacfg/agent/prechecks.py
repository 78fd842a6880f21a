"""Environment pre-checks before the command starts; each is a plugin and logs one `item=` line.

Paths and thresholds come from ``HACFG_PRECHECK_*`` environment variables, so tests and odd
clusters can move them without code (``hacfg.plugin.precheck.PrecheckSettings`` lists them).
"""

from __future__ import annotations

from hacfg.plugin import manager as plugin_manager
from hacfg.plugin.precheck import Precheck, PrecheckContext, PrecheckResult


def prechecks() -> list[Precheck]:
    return [check for _, check in plugin_manager.get().items("hacfg_prechecks", Precheck)]


def run_prechecks(ctx: PrecheckContext) -> list[PrecheckResult]:
    """Every pre-check's results; one that raises fails with its error as the detail."""
    results = []
    for check in prechecks():
        try:
            results.extend(check.run(ctx))
        except Exception as err:
            results.append(
                PrecheckResult(check.name or type(check).__name__, "failed", detail=f"{type(err).__name__}: {err}")
            )
    return results
