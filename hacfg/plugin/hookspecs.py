"""The plugin API of hacfg: every extension point is one function below.

A plugin is a module (or object) with functions of the same names, marked ``@hookimpl``::

    from hacfg.plugin import hookimpl

    @hookimpl
    def hacfg_presets():
        return {"my-cluster": Path(__file__).with_name("my-cluster.yaml")}

and registered in its package's metadata under the ``hacfg`` entry-point group. hacfg's own
presets, rules and targets are plugins registered the same way. An implementation may accept
any subset of a hook's arguments. A plugin that fails to import or raises inside a hook is
reported by name and the rest keep working. ``docs/plugins.md`` walks through each hook.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # the extension types; none of their modules imports the plugin machinery
    from hacfg.plugin.precheck import Precheck
    from hacfg.plugin.recovery import CheckpointLayout, Classification, Failure, Restart
    from hacfg.plugin.ruletypes import Rule
    from hacfg.plugin.targets import Target

hookspec = pluggy.HookspecMarker("hacfg")
hookimpl = pluggy.HookimplMarker("hacfg")


@hookspec
def hacfg_presets() -> Mapping[str, Path]:
    """Scenario presets this plugin provides, as ``{name: path to a YAML scenario file}``.

    A scenario file is merged over the preset named by its ``extends`` key, or by its
    ``scenario`` when it has no ``extends``. Called once per process; two plugins offering one
    name is an error naming both.
    """


@hookspec
def hacfg_targets() -> Iterable[Target]:
    """Compile targets, each a :class:`hacfg.plugin.Target` with a unique ``name``.

    ``hacfg build --target NAME`` turns the validated config into that target's document,
    validates it against the target's JSON Schema and writes it out.
    """


@hookspec
def hacfg_rules() -> Iterable[Rule]:
    """Lint rules, each made with :func:`hacfg.plugin.rule` from a check per kind of file.

    Rule IDs are unique across all plugins: hacfg's own use ``HA000``-``HA199``; a plugin
    picks its own capital-letter prefix (``ASC101``). A duplicate ID, or a plugin claiming the
    ``HA`` prefix, is reported as a failure of that plugin and its rule is not loaded. A rule
    that raises becomes an ``HA000`` finding naming it; the other rules still run.
    """


@hookspec
def hacfg_prechecks() -> Iterable[Precheck]:
    """Environment pre-checks, each a :class:`hacfg.plugin.Precheck`.

    ``hacfg agent`` runs every pre-check before the command starts (and ``hacfg precheck``
    runs them alone). Each result is logged as one line with the keyword ``item``, as the
    platform's own pre-check does. Any failed result stops the agent with exit code 138
    (retry elsewhere) before the command runs. A pre-check that raises counts as failed.
    """


@hookspec
def hacfg_classify_failure(failure: Failure) -> Classification | None:
    """Say why an attempt failed: a :class:`hacfg.plugin.Classification` or None.

    ``failure`` has the exit code or signal, whether the agent found it hung, and the last
    lines of output. The agent asks the classifiers one at a time, plugins registered later
    first and all before the platform's own rules (so a site plugin can name its own errors),
    and the first Classification wins: the rest are not asked. None passes to the next; one that
    raises, or returns anything else, is reported as a failure of that plugin and the next is
    asked; when none answers, the platform's rules judge by precedence of evidence (how the
    process ended, then the exception, then the runtime's error lines). The cause decides the
    restart rule: ``environment`` and ``user`` count
    against ``restart.max``; only ``environment`` restarts without ``restart.unconditional``;
    ``hang`` never counts.
    """


@hookspec
def hacfg_checkpoint_layouts() -> Iterable[CheckpointLayout]:
    """Checkpoint layouts, each a :class:`hacfg.plugin.CheckpointLayout`.

    Before every attempt the agent asks each layout for the checkpoints under
    ``checkpoint.path`` and resumes from the complete one with the highest step (passed to
    the command as ``HACFG_RESUME_FROM``). A layout must mark partial checkpoints
    ``complete=False``; they are never chosen. A doubt about a checkpoint (``doubt=``, a pointer
    naming a missing folder, say) is said, a line and a ``checkpoint_doubt`` event, when that
    checkpoint is resumed or is newer than the one resumed.
    """


@hookspec
def hacfg_agent_event(event: Mapping[str, Any]) -> None:
    """Told of every event the agent records, once it is in the events log: notify a webhook,
    push a metric, page someone on ``give_up``.

    ``event`` is the JSON record, read-only: ``time``, ``event`` (``attempt_start``, ``hang``,
    ``decision``, ...) and its fields, as ``hacfg events --format json`` shows them. The hook
    runs on the agent's thread, so it should return quickly. One that raises is reported as a
    ``plugin_failure`` event (which is not passed to the event hooks again) and supervision goes on.
    """


@hookspec
def hacfg_before_restart(restart: Restart) -> None:
    """Runs after a restart is decided and before it happens: clean ``/dev/shm``, reset a
    device, mark this node bad for the scheduler.

    ``restart`` is a :class:`hacfg.plugin.Restart`: the ``action`` (``proc_restart`` when the
    agent starts the command again itself; ``pod_reschedule`` or ``job_reschedule`` when it is
    about to exit 138 so the platform restarts it elsewhere), the attempt that ended, its cause
    and reason, this node's rank and the checkpoint the next attempt resumes from. Every node of
    a group calls it. One that raises is reported as a ``plugin_failure`` event; the restart
    goes ahead.
    """
