"""Every ``hacfg agent`` setting in one table: its flag, the field it sets, its type, its help.

A setting's field is its flag's name (``--hang-timeout`` sets ``hang_timeout``), on the scenario's
:class:`~hacfg.restart.policy.Policy` when the scenario file says it too (its key is named in the
help: that is the default), else on :class:`~hacfg.agent.options.RunOptions`. The command line's
options are made from this table (:mod:`hacfg.cli.app`) and :func:`run_options` sets each field
from its flag the same way, as NVIDIA's resiliency extension maps each flag to its config field:
nothing between a flag and its field renames it.

Imported by the command line to declare its options, so it imports nothing heavy at the top.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional

if TYPE_CHECKING:
    from hacfg.agent.options import RunOptions
    from hacfg.restart.policy import Policy

Kind = Literal["count", "switch", "seconds", "share", "duration", "durations", "path", "text"]


@dataclass(frozen=True)
class Setting:
    flag: str  # "--hang-timeout", or "--warm/--no-warm" for a switch with both senses
    help: str
    kind: Kind
    scenario: str | None = None  # the scenario key the flag overrides (its field is then the policy's)
    metavar: str | None = None
    default: Any = None  # the value when the flag is absent (None: the scenario's, or RunOptions' own)
    minimum: float | None = None
    maximum: float | None = None
    parse: Callable[[Any], Any] | None = None  # the flag's value to the field's, beyond its kind

    @property
    def field(self) -> str:
        return self.flag.split("/")[0].removeprefix("--").replace("-", "_")

    def value(self, given: Any) -> Any:
        """The field's value for what the flag was given (an InputError naming the flag if it is wrong)."""
        from hacfg.scenario.model import duration_flag

        if self.kind == "duration":
            given = duration_flag(given, self.flag)
        elif self.kind == "durations":
            given = tuple(_phase_timeout(text) for text in given)
        elif self.kind == "path":
            given = Path(given)
        return self.parse(given) if self.parse is not None else given


def _phase_timeout(text: str) -> tuple[str, float]:
    """``--phase-timeout checkpoint=30m``: a phase of :mod:`hacfg.heartbeat` and its hang timeout."""
    from hacfg.scenario.model import duration_flag
    from hacfg.scenario.source import InputError

    name, _, duration = text.partition("=")
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name) or not duration:
        raise InputError(f"--phase-timeout: {text!r} is not NAME=DURATION (checkpoint=30m)")
    return name, duration_flag(duration, "--phase-timeout")


def parse_listen(text: str) -> tuple[str, int]:
    """``--metrics-port``: ``PORT`` (this machine only: 127.0.0.1) or ``HOST:PORT`` (``0.0.0.0:PORT``
    for every interface); port 0 picks a free one."""
    from hacfg.scenario.source import InputError

    host, _, port = text.rpartition(":")
    if not port.isdigit() or int(port) > 65535:
        raise InputError(f"--metrics-port: expected PORT or HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _module_names(text: str) -> tuple[str, ...]:
    """``--preload torch,numpy``: the modules a warm interpreter imports, instead of the script's own."""
    from hacfg.scenario.source import InputError

    names = tuple(name.strip() for name in text.split(",") if name.strip())
    for name in names:
        if not all(part.isidentifier() for part in name.split(".")):
            raise InputError(f"--preload: {name!r} is not a module name")
    return names


def _py_spy(wanted: bool) -> str | None:
    """``--py-spy``: the executable, on PATH or beside this Python's (a virtualenv's bin)."""
    import shutil
    import sys

    from hacfg.scenario.source import InputError

    if not wanted:
        return None
    where = [os.environ.get("PATH", os.defpath), os.path.dirname(sys.executable)]
    found = shutil.which("py-spy", path=os.pathsep.join(where))
    if found is None:
        raise InputError("--py-spy: no py-spy on PATH or beside this Python (pip install py-spy)")
    return found


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "--state-dir", "Where counters live (default: CHECKPOINT/.hacfg/node-RANK, else ./.hacfg/node-RANK).", "path"
    ),
    Setting("--events", "The JSON-lines event log (default: STATE_DIR/events.jsonl).", "path"),
    Setting("--max-restarts", "Overrides restart.max.", "count", "restart.max", metavar="N", minimum=0),
    Setting(
        "--unconditional/--no-unconditional", "Overrides restart.unconditional.", "switch", "restart.unconditional"
    ),
    Setting("--hang-retry/--no-hang-retry", "Overrides restart.on_hang.", "switch", "restart.on_hang"),
    Setting(
        "--hang-timeout", "Overrides hang.timeout (and turns detection on), e.g. 30m.", "duration", "hang.timeout",
        metavar="DURATION",
    ),
    Setting(
        "--initial-hang-timeout", "Until the training first speaks (default 2x).", "duration", metavar="DURATION",
    ),
    Setting(
        "--phase-timeout",
        "The hang timeout while the command is in a hacfg.heartbeat phase, e.g. checkpoint=30m (repeatable).",
        "durations",
        "hang.phases",
        metavar="NAME=DURATION",
    ),
    Setting(
        "--learn-hang-timeouts/--no-learn-hang-timeouts",
        "Learn each phase's timeout, 5x the p99 of its durations (overrides hang.learn).",
        "switch",
        "hang.learn",
    ),
    Setting(
        "--learn-floor", "No learned timeout is shorter (default 60s).", "duration", "hang.learn_floor",
        metavar="DURATION",
    ),
    Setting(
        "--learn-beyond-hang-timeout", "A learned timeout may be longer than the hang timeout.", "switch",
        "hang.learn_beyond_timeout",
    ),
    Setting("--checkpoint-path", "Overrides checkpoint.path.", "path", "checkpoint.path", metavar="PATH"),
    Setting("--precheck/--no-precheck", "Run the environment pre-checks (overrides precheck).", "switch", "precheck"),
    Setting(
        "--grace", "Seconds between SIGTERM and SIGKILL (default 30).", "seconds", metavar="SECONDS", minimum=0,
    ),
    Setting(
        "--nnodes", "Nodes in the job (default: job.nodes, VC_WORKER_NUM or MA_NUM_HOSTS).", "count", metavar="N",
        minimum=1,
    ),
    Setting(
        "--node-rank", "This node's rank (default: NODE_RANK or VC_TASK_INDEX).", "count", metavar="RANK", minimum=0
    ),
    Setting(
        "--rdzv-endpoint", "Node 0's agent store (default: MASTER_ADDR or the first VC_WORKER_HOSTS, port 29400).",
        "text", metavar="HOST:PORT",
    ),
    Setting(
        "--rdzv-timeout", "Seconds to wait for every node to join (default 900).", "seconds", metavar="SECONDS",
        default=900.0, minimum=1,
    ),
    Setting("--standalone", "One node on its own, whatever the job's size.", "switch", default=False),
    Setting(
        "--peer-copy-every",
        "In a group, copy each node's memory checkpoint of every N-th step to the next node (default 10).",
        "count", metavar="N", default=10, minimum=1,
    ),
    Setting(
        "--peer-copy-share",
        "In a group, the most the peer copies may cost the training, a share of its time as measured "
        "(default 0.02; 1: every copy point).",
        "share", metavar="FRACTION", default=0.02, minimum=0.001, maximum=1,
    ),
    Setting(
        "--metrics-file", "Rewrite Prometheus metrics here after every event (node_exporter textfile).", "path"
    ),
    Setting(
        "--metrics-port", "Serve Prometheus metrics on /metrics (127.0.0.1 unless HOST:PORT).", "text",
        metavar="[HOST:]PORT", parse=parse_listen,
    ),
    Setting(
        "--metrics-linger",
        "After the agent ends, serve the final metrics until a scrape reads them, or this long (default 30s).",
        "duration", metavar="DURATION", default="30s",
    ),
    Setting(
        "--warm/--no-warm",
        "Fork Python restarts from an interpreter that imported the script's packages (default: on).",
        "switch",
        default=True,
    ),
    Setting(
        "--preload", "What the warm interpreter imports (default: the script's imports).", "text", metavar="MOD,...",
        parse=_module_names,
    ),
    Setting(
        "--py-spy", "At a hang, py-spy dumps the stacks of ranks that cannot write their own.", "switch",
        default=False, parse=_py_spy,
    ),
)

_ANNOTATIONS: dict[Kind, Any] = {  # Optional: typer reads them at run time, and older ones need it
    "count": Optional[int],
    "switch": Optional[bool],
    "seconds": Optional[float],
    "share": Optional[float],
    "duration": Optional[str],
    "durations": Optional[list[str]],
    "path": Optional[Path],
    "text": Optional[str],
}


def annotation(setting: Setting) -> Any:
    """The type the command line parses the flag as."""
    return _ANNOTATIONS[setting.kind]


def run_options(command: list[str], config: Path | None, given: Mapping[str, Any]) -> RunOptions:
    """The run's options: the scenario file's policy (the defaults without one), then every flag
    given, each set on the field of its own name. ``given`` holds each setting's field, None where
    its flag is absent."""
    from hacfg.agent.options import RunOptions

    policy = scenario_policy(config)
    policy_fields = {field.name for field in dataclasses.fields(policy)}
    on_policy: dict[str, Any] = {}
    on_run: dict[str, Any] = {}
    for setting in SETTINGS:
        raw = given.get(setting.field)
        if raw is None or raw in ([], ()):  # absent (a repeatable flag given no time)
            raw = setting.default
        if raw is not None:
            (on_policy if setting.field in policy_fields else on_run)[setting.field] = setting.value(raw)
    if "phase_timeout" in on_policy:  # the command line's add to the scenario's, and win as they come last
        on_policy["phase_timeout"] = (*policy.phase_timeout, *on_policy["phase_timeout"])
    if "hang_timeout" in on_policy:
        on_policy["hang_detect"] = True
    policy = dataclasses.replace(policy, **on_policy)
    return RunOptions(tuple(command), policy, config_nodes=policy.nodes if config else None, **on_run)


def scenario_policy(config: Path | None) -> Policy:
    """The scenario file's policy, or the defaults without one."""
    from hacfg.plugin import provided
    from hacfg.restart.policy import Policy, policy_from_config
    from hacfg.scenario.config import load_config

    return policy_from_config(load_config(config, provided.presets()).config) if config else Policy()
