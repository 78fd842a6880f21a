"""Where this node stands in its job's group: torchrun's flags, else the platform's environment.

The flags are torchrun's (``--nnodes``, ``--node-rank``, ``--rdzv-endpoint``); without them the
job's environment says: ModelArts (``MA_NUM_HOSTS``, ``VC_TASK_INDEX``), Volcano
(``VC_WORKER_NUM``, ``VC_WORKER_HOSTS``), an Indexed Job (``JOB_COMPLETION_INDEX``, as in a JobSet)
or torchrun's own variables; and under a per-card launch, the rank table, which also says which
card this agent is (:func:`per_card`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hacfg.agent.group import ranktable
from hacfg.agent.group.ranktable import Card, RankTable
from hacfg.scenario.source import InputError

DEFAULT_PORT = 29400  # torchrun's c10d rendezvous port
# Where the job tells a node its rank: torchrun, ModelArts and Volcano, a Kubernetes Indexed Job (JobSet), torch.
RANK_VARIABLES = ("NODE_RANK", "VC_TASK_INDEX", "JOB_COMPLETION_INDEX", "GROUP_RANK")
COUNT_VARIABLES = ("VC_WORKER_NUM", "MA_NUM_HOSTS", "WORLD_SIZE_NODES")


@dataclass(frozen=True)
class GroupSpec:
    """Where this node stands in the job: torchrun's ``--nnodes``, ``--node-rank``, ``--rdzv-endpoint``."""

    nnodes: int
    rank: int
    host: str
    port: int
    timeout: float = 900.0  # torchrun's --rdzv-timeout default

    @property
    def leader(self) -> bool:
        return self.rank == 0


def resolve_spec(
    *,
    nnodes: int | None,
    node_rank: int | None,
    endpoint: str | None,
    timeout: float,
    config_nodes: int | None,
    env: dict[str, str],
    table: RankTable | None = None,
    card: Card | None = None,
) -> GroupSpec | None:
    """The group from flags, else the job's environment (ModelArts, Volcano, torchrun's variables), else
    the rank table (``table``), whose servers are the job's nodes; a per-card launch's ``card`` is one of
    them. None for a one-node job."""
    stated = nnodes or config_nodes or _int(env, *COUNT_VARIABLES)
    servers = len(table.servers) if table is not None else None
    if table is not None and stated and stated != servers:
        raise InputError(f"{ranktable.ENV} {table.path} lists {servers} servers, but the job has {stated} nodes")
    count = stated or servers or 1
    if count <= 1:
        return None
    rank = node_rank if node_rank is not None else _int(env, *RANK_VARIABLES)
    if rank is None and card is not None:
        rank = card.server
    if rank is None:
        raise InputError(
            f"a {count}-node job needs this node's rank: pass --node-rank or set NODE_RANK"
            " (VC_TASK_INDEX on ModelArts and Volcano)"
        )
    if not 0 <= rank < count:
        raise InputError(f"--node-rank {rank} is outside a {count}-node job (0 to {count - 1})")
    host, port = _endpoint(endpoint, env)
    return GroupSpec(count, rank, host, port, timeout)


def _int(env: dict[str, str], *names: str) -> int | None:
    for name in names:
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def _endpoint(endpoint: str | None, env: dict[str, str]) -> tuple[str, int]:
    """``HOST[:PORT]``; by default node 0's address on torchrun's rendezvous port, never the training's."""
    if endpoint:
        host, _, port_text = endpoint.rpartition(":") if ":" in endpoint else (endpoint, "", "")
        if port_text and not port_text.isdigit():
            raise InputError(f"--rdzv-endpoint {endpoint!r} is not HOST:PORT")
        if port_text:
            return host.strip("[]"), int(port_text)
    else:
        host = env.get("MASTER_ADDR") or env.get("VC_WORKER_HOSTS", "").split(",")[0].strip()
        if not host:
            raise InputError(
                "a multi-node job needs node 0's address: pass --rdzv-endpoint HOST:PORT or set MASTER_ADDR"
                " (VC_WORKER_HOSTS on Volcano)"
            )
    training_port = _int(env, "MASTER_PORT")
    return host, DEFAULT_PORT + 1 if training_port == DEFAULT_PORT else DEFAULT_PORT


def rank_table(env: dict[str, str], *, timeout: float, echo: Callable[[str], None]) -> RankTable | None:
    """The job's rank table (``RANK_TABLE_FILE``) once the platform has completed it, or None without one.
    HCCL reads it as the job starts, so no command starts before it is complete (MindCluster writes it
    into a ConfigMap once the cards are allocated; ModelArts before the per-card launch)."""
    path = env.get(ranktable.ENV, "").strip()
    return ranktable.wait_for(Path(path), timeout, echo) if path else None


def per_card(env: dict[str, str], table: RankTable | None) -> Card | None:
    """This agent's card when the platform starts the command once per card (ModelArts' Ascend-Powered-Engine
    sets ``RANK_TABLE_FILE`` and ``ASCEND_DEVICE_ID``: develop-modelarts-1415), from the completed rank
    ``table``; None otherwise."""
    if table is None or not env.get("ASCEND_DEVICE_ID", "").strip():
        return None
    rank = _launch_number(env, "RANK_ID", table)
    size = env.get("RANK_SIZE", "").strip()
    if size and size != str(table.size):
        raise InputError(f"RANK_SIZE {size} but {ranktable.ENV} {table.path} has {table.size} ranks")
    server = table.server_of(rank)
    if server is None:
        raise InputError(f"RANK_ID {rank} is not in {ranktable.ENV} {table.path} (ranks 0 to {table.size - 1})")
    cards = table.servers[server].devices
    logical = _launch_number(env, "ASCEND_DEVICE_ID", table)
    if logical >= len(cards):
        raise InputError(
            f"ASCEND_DEVICE_ID {logical} is out of range: server {table.servers[server].server_id!r} of"
            f" {table.path} has {len(cards)} cards (0 to {len(cards) - 1})"
        )
    place = [card_rank for card_rank, _ in cards].index(rank)
    return Card(rank, cards[place][1], server, place, table)


def _launch_number(env: dict[str, str], name: str, table: RankTable) -> int:
    value = env.get(name, "").strip()
    if not (value.isdigit() and value.isascii()):
        shown = repr(value) if value else "unset"
        raise InputError(f"{name} is {shown}: a per-card launch ({ranktable.ENV}={table.path}) sets it to a number")
    return int(value)
