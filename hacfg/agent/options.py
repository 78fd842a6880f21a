"""One ``hacfg agent`` run's settings, built once from the command line and the scenario file and
checked there, then handed down whole, as torch's elastic agent hands down its ``WorkerSpec``.

Settings that contradict each other are refused when the options are made (an input error: one
line, exit 2), so nothing below has to wonder which of two settings wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from hacfg.restart.policy import Policy
from hacfg.scenario.model import format_duration
from hacfg.scenario.source import InputError


@dataclass(frozen=True)
class RunOptions:
    """What the agent supervises, by which rules, where it records, and how it finds its group."""

    command: tuple[str, ...]
    policy: Policy
    state_dir: Path | None = None  # default: per node, under checkpoint.path (loop.default_state_dir)
    events: Path | None = None  # default: events.jsonl in the state folder
    # The group, with torchrun's flags; unset ones come from the job's environment.
    nnodes: int | None = None
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_timeout: float = 900.0
    standalone: bool = False  # this node on its own, whatever the job's size
    config_nodes: int | None = None  # job.nodes of the scenario file; None without one
    peer_copy_every: int = 10  # in a group: the steps whose memory checkpoint goes to the next node
    peer_copy_share: float = 0.02  # in a group: the most those copies may cost the training, as measured
    # Prometheus exposition.
    metrics_file: Path | None = None
    metrics_port: tuple[str, int] | None = None  # (host, port)
    metrics_linger: float = 30.0
    # Restarts forked from a warm interpreter (Python commands), which imports ``preload``
    # (default: the script's installed top-level imports).
    warm: bool = True
    preload: tuple[str, ...] | None = None
    # At a hang, the py-spy executable that dumps the stacks of ranks that cannot write their own.
    py_spy: str | None = None

    def __post_init__(self) -> None:
        if not self.command:
            raise InputError("no command to supervise: hacfg agent [OPTIONS] -- COMMAND...")
        if self.preload is not None and not self.warm:
            raise InputError("--preload names what a warm interpreter imports, and --no-warm turns them off")
        policy = self.policy
        if policy.hang_detect and policy.first_hang_timeout < policy.hang_timeout:
            raise InputError(
                f"the initial hang timeout ({_duration(policy.first_hang_timeout)}) is shorter than the"
                f" hang timeout ({_duration(policy.hang_timeout)}): it covers start-up and the first step,"
                " so it is at least as long"
            )
        learning = policy.hang_detect and policy.learn_hang_timeouts
        if learning and policy.learn_floor <= 0:
            raise InputError("the floor of learned timeouts must be longer than 0s: one would fire at once")
        if learning and not policy.learn_beyond_hang_timeout and policy.learn_floor > policy.hang_timeout:
            raise InputError(
                f"the floor of learned timeouts ({_duration(policy.learn_floor)}) is longer than the hang timeout"
                f" ({_duration(policy.hang_timeout)}) they stay under: nothing could be learned; lower the floor"
                " (hang.learn_floor, --learn-floor) or let them go beyond it (hang.learn_beyond_timeout,"
                " --learn-beyond-hang-timeout)"
            )
        if self.metrics_linger < 0:
            raise InputError("--metrics-linger cannot be negative")


def _duration(seconds: float) -> str:
    return format_duration(timedelta(seconds=seconds))
