"""The bodies of the commands that supervise a job or read what its agents recorded: ``hacfg
agent``, ``precheck``, ``events`` and ``diagnose``.

Kept apart from :mod:`hacfg.cli.commands` (whose output helpers and exit codes they share) so
that a plain ``hacfg lint`` or ``build`` never loads them. Like those, each takes plain
arguments, returns an exit code and imports what it needs when it runs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from hacfg.cli.commands import EXIT_FINDINGS, EXIT_OK, picture, say, seconds, write

if TYPE_CHECKING:
    from hacfg.restart.policy import Policy


def _agent_policy(config: Path | None, **overrides: Any) -> Policy:
    from hacfg.plugin import provided
    from hacfg.restart.policy import load_policy

    return load_policy(config, provided.presets() if config else {}, **overrides)


def run_agent(
    command: list[str],
    config: Path | None = None,
    *,
    state_dir: Path | None = None,
    events: Path | None = None,
    max_restarts: int | None = None,
    unconditional: bool | None = None,
    hang_retry: bool | None = None,
    hang_timeout: str | None = None,
    initial_hang_timeout: str | None = None,
    phase_timeouts: Sequence[str] | None = None,
    learn: bool | None = None,
    learn_floor: str | None = None,
    learn_beyond_timeout: bool | None = None,
    checkpoint_path: str | None = None,
    no_precheck: bool = False,
    grace: float | None = None,
    nnodes: int | None = None,
    node_rank: int | None = None,
    rdzv_endpoint: str | None = None,
    rdzv_timeout: float = 900,
    standalone: bool = False,
    metrics_file: Path | None = None,
    metrics_listen: tuple[str, int] | None = None,
    metrics_linger: str = "30s",
    warm: bool = True,
    preload: str | None = None,
    py_spy: bool = False,
) -> int:
    """``hacfg agent``: supervise ``command`` with the scenario file's policy and the overrides given."""
    from hacfg.agent.loop import run_agent as supervise
    from hacfg.agent.options import RunOptions

    policy = _agent_policy(
        config,
        max_restarts=max_restarts,
        unconditional=unconditional,
        on_hang=hang_retry,
        hang_timeout=hang_timeout,
        initial_hang_timeout=initial_hang_timeout,
        phase_timeouts=phase_timeouts or None,
        learn=learn,
        learn_floor=learn_floor,
        learn_beyond_timeout=learn_beyond_timeout,
        checkpoint_path=checkpoint_path,
        precheck=False if no_precheck else None,
        grace=grace,
    )
    options = RunOptions(
        tuple(command),
        policy,
        state_dir=state_dir,
        events=events,
        nnodes=nnodes,
        node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint,
        rdzv_timeout=rdzv_timeout,
        standalone=standalone,
        config_nodes=policy.nodes if config else None,
        metrics_file=metrics_file,
        metrics_listen=metrics_listen,
        metrics_linger=seconds(metrics_linger, "--metrics-linger"),
        warm=warm,
        preload=_module_names(preload) if preload is not None else None,
        py_spy=_py_spy() if py_spy else None,
    )
    return supervise(options)


def _py_spy() -> str:
    """``--py-spy``: the executable, on PATH or beside this Python's (a virtualenv's bin)."""
    import shutil
    import sys

    from hacfg.scenario.source import InputError

    where = [os.environ.get("PATH", os.defpath), os.path.dirname(sys.executable)]
    found = shutil.which("py-spy", path=os.pathsep.join(where))
    if found is None:
        raise InputError("--py-spy: no py-spy on PATH or beside this Python (pip install py-spy)")
    return found


def _module_names(text: str) -> tuple[str, ...]:
    """``--preload torch,numpy``: the modules a warm interpreter imports, instead of the script's own."""
    from hacfg.scenario.source import InputError

    names = tuple(name.strip() for name in text.split(",") if name.strip())
    for name in names:
        if not all(part.isidentifier() for part in name.split(".")):
            raise InputError(f"--preload: {name!r} is not a module name")
    return names


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
