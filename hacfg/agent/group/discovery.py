"""Where this node stands in its job's group: torchrun's flags, else the platform's environment.

The flags are torchrun's (``--nnodes``, ``--node-rank``, ``--rdzv-endpoint``); without them the
job's environment says: ModelArts (``MA_NUM_HOSTS``, ``VC_TASK_INDEX``), Volcano
(``VC_WORKER_NUM``, ``VC_WORKER_HOSTS``), an Indexed Job (``JOB_COMPLETION_INDEX``, as in a JobSet)
or torchrun's own variables.
"""

from __future__ import annotations

from dataclasses import dataclass

from hacfg.scenario.source import InputError

DEFAULT_PORT = 29400  # torchrun's c10d rendezvous port
# Where the job tells a node its rank: torchrun, ModelArts and Volcano, a Kubernetes Indexed Job (JobSet), torch.
RANK_VARIABLES = ("NODE_RANK", "VC_TASK_INDEX", "JOB_COMPLETION_INDEX", "GROUP_RANK")


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
) -> GroupSpec | None:
    """The group from flags, else the job's environment (ModelArts, Volcano, torchrun's variables);
    None for a one-node job."""
    count = nnodes or config_nodes or _int(env, "VC_WORKER_NUM", "MA_NUM_HOSTS", "WORLD_SIZE_NODES") or 1
    if count <= 1:
        return None
    rank = node_rank if node_rank is not None else _int(env, *RANK_VARIABLES)
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
