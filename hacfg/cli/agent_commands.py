"""The bodies of the commands that supervise a job or read what its agents recorded: ``hacfg
agent``, ``precheck``, ``events`` and ``diagnose``.

Kept apart from :mod:`hacfg.cli.commands` (whose output helpers and exit codes they share) so
that a plain ``hacfg lint`` or ``build`` never loads them. Like those, each takes plain
arguments, returns an exit code and imports what it needs when it runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from hacfg.cli.commands import EXIT_FINDINGS, EXIT_OK, picture, say, write

if TYPE_CHECKING:
    from hacfg.restart.policy import Policy


def _agent_policy(config: Path | None) -> Policy:
    from hacfg.agent.settings import scenario_policy

    return scenario_policy(config)


def run_agent(command: list[str], config: Path | None, given: Mapping[str, Any]) -> int:
    """``hacfg agent``: supervise ``command`` with the scenario file's policy and the flags ``given``
    (each setting's field, None where its flag is absent: see :mod:`hacfg.agent.settings`)."""
    from hacfg.agent.loop import run_agent as supervise
    from hacfg.agent.settings import run_options

    return supervise(run_options(command, config, given))


def run_precheck(config: Path | None = None) -> int:
    """``hacfg precheck``: the environment pre-checks alone, exiting as the agent would on a failure."""
    from hacfg.agent.prechecks import run_prechecks
    from hacfg.plugin.precheck import PrecheckContext, PrecheckSettings
    from hacfg.restart.policy import RETRY_ELSEWHERE

    policy = _agent_policy(config)
    results = run_prechecks(PrecheckContext(policy, PrecheckSettings.from_environment(), dict(os.environ)))
    for result in results:
        write(result.line() + "\n", None)
    return RETRY_ELSEWHERE if any(r.status == "failed" for r in results) else EXIT_OK


def run_events(
    files: Sequence[Path], config: Path | None = None, fmt: Literal["table", "json"] = "table", plot: Path | None = None
) -> int:
    """``hacfg events``: the nodes' event logs merged into one job, with where the time went."""
    import dataclasses
    import json

    from hacfg.agent.records import recovery
    from hacfg.agent.records.calibration import measure
    from hacfg.agent.records.goodput import breakdown, report
    from hacfg.agent.records.timeline import read_logs, table

    plot = picture(plot)  # before any work
    records = read_logs(
        files or default_event_logs(config),
        damaged=lambda path, number: say(f"hacfg: warning: {path}:{number}: a damaged event record, skipped"),
    )
    result = breakdown(records)
    measured = measure(records)
    recoveries = recovery.recoveries(records)
    if fmt == "json":
        document = {
            "goodput": result.to_json(),
            "measured": dataclasses.asdict(measured),
            "recoveries": [found.to_json() for found in recoveries],
            "events": records,
        }
        write(json.dumps(document, indent=2) + "\n", None)
    else:
        stages = f"\n{recovery.report(recoveries)}" if recoveries else ""
        write(f"{table(records)}\n{report(result)}{stages}\n{measured.summary()}", None)
    if plot is not None:
        from hacfg.agent.records.timeline import plot as draw

        draw(records, str(plot))
        say(f"wrote {plot}")
    return EXIT_OK


def default_event_logs(config: Path | None) -> list[Path]:
    """Every node's log where the agent writes it by default: under the checkpoint path of the
    scenario file (``--config``, else ``./ha.yaml`` when there is one), else under ``./.hacfg``."""
    from hacfg.agent.loop import default_state_dir
    from hacfg.scenario.source import InputError

    scenario = config or (Path("ha.yaml") if Path("ha.yaml").is_file() else None)
    folder = default_state_dir(_agent_policy(scenario), 0).parent
    pattern = f"{folder}/node-*/events.jsonl"
    found = sorted(folder.glob("node-*/events.jsonl"))
    if not found:
        where = f" (checkpoint.path of {scenario})" if scenario else " (no --config and no ./ha.yaml)"
        raise InputError(f"no event logs at {pattern}{where}; name them: hacfg events PATH/.hacfg/node-*/events.jsonl")
    return found


def run_diagnose(logs: Sequence[Path], config: str | None = None, fmt: Literal["text", "json"] = "text") -> int:
    """``hacfg diagnose``: why each log's job failed, and what the restart rules would do (exit 1 if one did)."""
    import json

    from hacfg.agent import diagnose
    from hacfg.plugin import provided

    folders = [path for path in logs if path.is_dir()]  # a state folder: the hangs' evidence
    if folders:
        write("".join(diagnose.render_evidence(folder) for folder in folders), None)
    logs = [path for path in logs if not path.is_dir()]
    if not logs:
        return EXIT_OK
    policy = _agent_policy(provided.preset_or_path(config) if config else None)
    label = diagnose.policy_label(policy, config)
    results = [diagnose.diagnose(diagnose.read_log(path), policy) for path in logs]
    if fmt == "json":
        write(json.dumps(diagnose.to_json(results, label), indent=2) + "\n", None)
    else:
        write(diagnose.render_text(results, label), None)
    return EXIT_FINDINGS if any(result.failed for result in results) else EXIT_OK
