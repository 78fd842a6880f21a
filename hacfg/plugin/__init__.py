"""The plugin API: everything a plugin author imports, from one place.

::

    from hacfg.plugin import Problem, ScenarioContext, hookimpl, rule

Each hook is documented in :mod:`hacfg.plugin.hookspecs` and, with a working example, in
``docs/plugins.md``. The names below are the supported surface; what is not listed here may
change in any release. The API is 0.x: CHANGELOG.md records every break.

The face is lazy (PEP 562): a name is imported from the module that defines it when a plugin
first asks for it, so a rule plugin costs a lint nothing of the agent, and a pre-check plugin
costs it only the few plain types it subclasses. hacfg's own plugins import from here too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hacfg.plan.forecast import Forecast, forecast_config
    from hacfg.plugin.hookspecs import hookimpl
    from hacfg.plugin.precheck import Precheck, PrecheckContext, PrecheckResult, PrecheckSettings, Status, human_size
    from hacfg.plugin.recovery import CheckpointLayout, Classification, Failure, Restart, SavedCheckpoint, step_of
    from hacfg.plugin.ruletypes import (
        FileContext,
        Fix,
        JobBody,
        JobCheck,
        JobContext,
        Manifest,
        ManifestContext,
        Problem,
        Rule,
        ScenarioCheck,
        ScenarioContext,
        annotation_path,
        rule,
    )
    from hacfg.plugin.targets import Build, Target, dump_yaml, schema_file
    from hacfg.restart.policy import RETRY_ELSEWHERE, Policy
    from hacfg.restart.vocabulary import Cause
    from hacfg.scenario import kubernetes, modelarts
    from hacfg.scenario.config import deep_merge
    from hacfg.scenario.model import HAConfig, format_duration, parse_duration, scenario_document
    from hacfg.scenario.names import Kind, Platform, Scenario, Severity
    from hacfg.scenario.passthrough import passthrough_overrides
    from hacfg.scenario.source import Document, LogicalPath, did_you_mean, lookup

__all__ = [
    # registering
    "hookimpl",
    # hacfg_rules
    "FileContext",
    "Fix",
    "JobBody",
    "JobCheck",
    "JobContext",
    "Kind",
    "Manifest",
    "ManifestContext",
    "Problem",
    "Rule",
    "ScenarioCheck",
    "ScenarioContext",
    "Severity",
    "annotation_path",
    "did_you_mean",
    "lookup",
    "rule",
    # hacfg_targets
    "Build",
    "Target",
    "deep_merge",
    "dump_yaml",
    "format_duration",
    "parse_duration",
    "scenario_document",
    "schema_file",
    # what rules and targets read
    "Document",
    "HAConfig",
    "LogicalPath",
    "Platform",
    "Scenario",
    "kubernetes",
    "modelarts",
    "passthrough_overrides",
    # what rules compute with, hacfg plan's model: import it inside the check, so a lint pays only when it runs
    "Forecast",
    "forecast_config",
    # hacfg_prechecks
    "Policy",
    "Precheck",
    "PrecheckContext",
    "PrecheckResult",
    "PrecheckSettings",
    "Status",
    "human_size",
    # hacfg_classify_failure
    "Cause",
    "Classification",
    "Failure",
    # hacfg_checkpoint_layouts
    "CheckpointLayout",
    "SavedCheckpoint",
    "step_of",
    # hacfg_before_restart (hacfg_agent_event receives a plain read-only mapping)
    "RETRY_ELSEWHERE",
    "Restart",
]

# Where each name of __all__ is defined (the imports above say the same to the type checker).
_HOME = {
    "hacfg.plugin.hookspecs": ("hookimpl",),
    "hacfg.plugin.ruletypes": (
        "FileContext", "Fix", "JobBody", "JobCheck", "JobContext", "Manifest", "ManifestContext", "Problem", "Rule",
        "ScenarioCheck", "ScenarioContext", "annotation_path", "rule",
    ),
    "hacfg.plugin.targets": ("Build", "Target", "dump_yaml", "schema_file"),
    "hacfg.plugin.precheck": (
        "Precheck", "PrecheckContext", "PrecheckResult", "PrecheckSettings", "Status", "human_size",
    ),
    "hacfg.plugin.recovery": ("CheckpointLayout", "Classification", "Failure", "Restart", "SavedCheckpoint", "step_of"),
    "hacfg.restart.policy": ("Policy", "RETRY_ELSEWHERE"),
    "hacfg.plan.forecast": ("Forecast", "forecast_config"),
    "hacfg.restart.vocabulary": ("Cause",),
    "hacfg.scenario.config": ("deep_merge",),
    "hacfg.scenario.model": ("HAConfig", "format_duration", "parse_duration", "scenario_document"),
    "hacfg.scenario.names": ("Kind", "Platform", "Scenario", "Severity"),
    "hacfg.scenario.passthrough": ("passthrough_overrides",),
    "hacfg.scenario.source": ("Document", "LogicalPath", "did_you_mean", "lookup"),
}
_MODULE_OF = {name: module for module, names in _HOME.items() for name in names}
# Modules of facts a plugin reads whole: ``from hacfg.plugin import modelarts as ma``, ``kubernetes as k8s``.
_MODULES = {"modelarts": "hacfg.scenario.modelarts", "kubernetes": "hacfg.scenario.kubernetes"}


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(_MODULE_OF[name]), name)
    elif name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    else:
        raise AttributeError(f"module 'hacfg.plugin' has no attribute {name!r}")
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
