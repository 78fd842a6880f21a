"""The workers' own store, served by node 0's agent, as torchrun's agent serves it.

torch's ``env://`` rendezvous (``init_process_group`` without a store) makes rank 0's worker host a
``TCPStore`` on ``MASTER_ADDR:MASTER_PORT``; the other ranks connect to it, and one that connects
before rank 0's new worker listens sleeps a fixed second before it tries again. With
``TORCHELASTIC_USE_AGENT_STORE=True`` every rank only connects, to a store its agent already serves.
Node 0's agent serves one on ``MASTER_ADDR``, a fresh one for each round on a port no earlier round
had (the kernel's choice), opened once every node has stopped its workers of the last round and
before the round's plan, which names the port, is published; every rank gets it as its
``MASTER_PORT``. No key of an earlier attempt is ever read in a later one, and a worker of an
earlier attempt cannot reach a later one's store: its connection went with its store, and the port
it knows is closed (torch's client adds no per-attempt prefix in this mode; torchrun's agent serves
one store on one port for all its attempts).

Only for a Python command with ``MASTER_ADDR`` and ``MASTER_PORT`` set: torchrun, or a shell
script, rendezvous by themselves. ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (torchrun's own switch)
turns it off, and rank 0's worker hosts the store again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hacfg.agent.group.transport import first_line, fresh_store
from hacfg.agent.process.warm import RESTART_COUNT, Entry, python_entry

USE_AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"
OFF = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


def endpoint(env: dict[str, str], command: list[str]) -> str | None:
    """Where node 0's agent serves the workers' store: ``MASTER_ADDR``, when the command's ranks
    meet through ``env://`` (``MASTER_PORT`` set too); None when it does not (turned off, not a
    Python command, no such variables)."""
    host, port = env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", "").strip()
    if env.get(OFF) == "1" or not host or not port.isdigit() or not 0 < int(port) < 1 << 16:
        return None
    if not isinstance(python_entry(command, env.get("PATH")), Entry):
        return None  # a launcher or a shell: how its workers meet is its own business
    return host


def worker_env(attempt: int, port: int) -> dict[str, str]:
    """What tells a worker's ``env://`` rendezvous to connect to the agent's store of this attempt."""
    return {USE_AGENT_STORE: str(True), RESTART_COUNT: str(attempt - 1), "MASTER_PORT": str(port)}


class WorkerStores:
    """Node 0's stores for its workers, one per round."""

    def __init__(self, store_class: Any, host: str, timeout: float, echo: Callable[[str], None]):
        self.store_class = store_class
        self.host = host
        self.timeout = timeout
        self.echo = echo
        self.served: Any = None  # this round's store
        self.ports: set[int] = set()  # the ports the workers' stores had: never one again

    def serve(self) -> int | None:
        """A fresh store for this round's workers, once every node has stopped the last round's, on
        a port no earlier round's store had: the last round's keys and connections go with its store,
        and a worker of an earlier round finds nothing on the port it knows. Its port; None when no
        store can be served."""
        starting = self.served is None
        self.served = None  # closes the last round's server
        try:
            self.served, everywhere = fresh_store(self.store_class, self.host, self.timeout, self.ports)
        except (ConnectionError, RuntimeError) as err:  # torch's store errors are RuntimeErrors
            self.echo(f"[hacfg] cannot serve the workers' store on {self.host} ({first_line(err)}); rank 0 hosts it")
            return None
        port: int = self.served.port
        self.ports.add(port)
        if starting:
            self.echo(
                f"[hacfg] the workers' store is served here on {self.host}, on a new port each round"
                + (" (every interface)" if everywhere else "")
                + f"; {OFF}=1 leaves it to rank 0's worker on MASTER_PORT"
            )
        return port

    def close(self) -> None:
        self.served = None
