"""The plugin API: everything a plugin author imports, from one place.

::

    from hacfg.plugin import Problem, ScenarioContext, hookimpl, rule

Each hook is documented in :mod:`hacfg.hookspecs` and, with a working example, in
``docs/plugins.md``. The names below are the supported surface; what is not listed here may
change in any release. The API is 0.x: CHANGELOG.md records every break.
"""

from __future__ import annotations

from hacfg.agent.extensions import (
    CheckpointLayout,
    Classification,
    Failure,
    Precheck,
    PrecheckContext,
    PrecheckResult,
    PrecheckSettings,
    Restart,
    SavedCheckpoint,
    Status,
    human_size,
    step_of,
)
from hacfg.agent.policy import Cause, Policy
from hacfg.hookspecs import hookimpl
from hacfg.model import HAConfig
from hacfg.names import Kind, Platform, Scenario, Severity
from hacfg.rules import (
    FileContext,
    Fix,
    JobBody,
    JobCheck,
    JobContext,
    Problem,
    Rule,
    ScenarioCheck,
    ScenarioContext,
    annotation_path,
    rule,
)
from hacfg.source import Document, LogicalPath
from hacfg.target import Build, Target, schema_file

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
    "Problem",
    "Rule",
    "ScenarioCheck",
    "ScenarioContext",
    "Severity",
    "annotation_path",
    "rule",
    # hacfg_targets
    "Build",
    "Target",
    "schema_file",
    # what rules and targets read
    "Document",
    "HAConfig",
    "LogicalPath",
    "Platform",
    "Scenario",
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
    "Restart",
]
