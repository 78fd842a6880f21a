"""What every Kubernetes target puts in a pod: the agent around the user's command, the scenario it
reads from a ConfigMap, the launcher's rendezvous variables, Secrets by reference, the cards, a memory
volume at /dev/shm, and a name Kubernetes takes.

The targets (``volcano``, ``jobset``, ``trainjob``) differ in the object around the pod, in how it
restarts and in where a pod finds its rank and node 0; they say so in a :class:`Pod` and build the pod
from here, so the agent and the user's launcher run the same way on each.
"""

from __future__ import annotations

import copy
import re
from typing import Any, NamedTuple

from hacfg.plugin import Build, HAConfig, Target, dump_yaml, scenario_document
from hacfg.plugin import kubernetes as k8s
from hacfg.plugin import modelarts as ma

CONFIG_DIR = "/etc/hacfg"
CONFIG_FILE = "ha.yaml"
CONFIG_VOLUME = "hacfg-config"
CHECKPOINT_VOLUME = "checkpoint"
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"
GROUP_SECRET_KEY = "secret"
GROUP_SECRET = "HACFG_GROUP_SECRET"
# The job's name for the agent's restart counters: the same for every pod of the job and across its
# restarts, new for a job created again. Each target says which field of the pod holds it.
JOB_ID = "HACFG_JOB_ID"
# Ports on node 0: the training's rendezvous at torch's default MASTER_PORT (Kubeflow Trainer's
# PET_MASTER_PORT too), the agents' group one above torchrun's c10d port (29400), so that a torchrun of
# either rendezvous and the agent never ask for the same port.
MASTER_PORT = 29500
GROUP_PORT = 29401
# A name every object takes: an RFC 1035 label short enough for JobSet's pod names,
# NAME-node-0-INDEX-xxxxx, and Volcano's hostnames, NAME-worker-INDEX, to stay within 63 characters.
LONGEST_NAME = 45
NAME_RULE = (
    "a Kubernetes name takes lower case letters, digits and '-', begins with a letter, ends with a letter "
    f"or digit, and has at most {LONGEST_NAME} characters"
)
_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


class Pod(NamedTuple):
    """Where a target's pods find what the agent and the launcher need: the container's name, the pod
    field naming the job (:data:`JOB_ID`), the pod field holding the node's rank, node 0's hostname."""

    task: str
    job_id_field: str
    rank_field: str
    node0: str


def kubernetes_name(config: HAConfig, built: Build) -> str:
    """The job name as a DNS label (lower case, ``_`` as ``-``); any other it refuses at ``job.name``,
    offering one that would do."""
    name = config.name.lower().replace("_", "-")
    if not (_NAME.fullmatch(name) and len(name) <= LONGEST_NAME):
        built.refused.append((("job", "name"), f"job.name {config.name!r}: {NAME_RULE}; {_valid(name)!r} would do"))
    elif name != config.name:
        built.notes.append(f"job name {config.name!r} becomes {name!r}: Kubernetes names are lower case, with '-'")
    return name


def _valid(name: str) -> str:
    words = re.sub(r"[^a-z0-9]+", "-", name).strip("-")
    named = words if words[:1].isalpha() else f"job-{words}".rstrip("-")
    return named[:LONGEST_NAME].rstrip("-")


def agent_command(config: HAConfig, *options: str) -> list[str]:
    """``hacfg agent`` reading the ConfigMap's scenario, then ``options``, then the user's command."""
    # without a command, missing() refuses the job: no placeholder reaches kubectl apply
    config_file = f"{CONFIG_DIR}/{CONFIG_FILE}"
    return ["hacfg", "agent", "--config", config_file, *options, "--", "/bin/sh", "-c", config.job.command or ""]


def container(config: HAConfig, built: Build, name: str, pod: Pod) -> dict[str, Any]:
    """The training container, its command wrapped in ``hacfg agent``, which finds node 0's agent on
    :data:`GROUP_PORT`; the user's launcher finds node 0 in ``MASTER_ADDR`` and ``MASTER_PORT``."""
    job = config.job
    options = ("--rdzv-endpoint", f"{pod.node0}:{GROUP_PORT}") if job.nodes > 1 else ()
    made: dict[str, Any] = {"name": pod.task, "image": job.image or "", "command": agent_command(config, *options)}
    made["env"] = _environment(config, built, name) + launcher_env(config, pod)
    if JOB_ID not in job.environment:
        made["env"].append({"name": JOB_ID, "valueFrom": {"fieldRef": {"fieldPath": pod.job_id_field}}})
    if job.nodes > 1 and GROUP_SECRET not in job.environment and GROUP_SECRET not in config.kubernetes.secrets:
        made["env"].append(_group_secret(name, built))
    devices = _devices(config, built)
    if devices:
        made["resources"] = {"limits": devices, "requests": dict(devices)}  # Ascend's device plugin needs both
    made["volumeMounts"] = [
        {"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": SHM_VOLUME, "mountPath": SHM_PATH},
    ]
    path, claim = config.checkpoint.path, config.kubernetes.checkpoint_claim
    if path and claim:
        made["volumeMounts"].append({"name": CHECKPOINT_VOLUME, "mountPath": path})
    elif path and "://" not in path:
        built.notes.append(
            f"mount shared storage at {path} (checkpoint.path) in every pod: kubernetes.checkpoint_claim names "
            "a PersistentVolumeClaim to mount there"
        )
    return made


def launcher_env(config: HAConfig, pod: Pod) -> list[dict[str, Any]]:
    """What a launcher needs to find its peers, as JobSet's and Volcano's PyTorch examples set it:
    ``torchrun --nnodes $NNODES --node-rank $NODE_RANK --master-addr $MASTER_ADDR --master-port $MASTER_PORT``,
    or one process per node reading ``WORLD_SIZE`` and ``RANK`` (``init_process_group``'s ``env://``)."""
    nodes = str(config.job.nodes)
    rank = {"fieldRef": {"fieldPath": pod.rank_field}}
    return [
        {"name": "MASTER_ADDR", "value": pod.node0},
        {"name": "MASTER_PORT", "value": str(MASTER_PORT)},
        {"name": "NNODES", "value": nodes},
        {"name": "WORLD_SIZE", "value": nodes},
        {"name": "NODE_RANK", "valueFrom": rank},
        {"name": "RANK", "valueFrom": copy.deepcopy(rank)},  # its own: YAML would write one shared as an alias
    ]


def _environment(config: HAConfig, built: Build, name: str) -> list[dict[str, Any]]:
    """``job.environment``, a secret-looking value read from a Secret instead of written in clear, and
    ``kubernetes.secrets`` by reference."""
    found: list[dict[str, Any]] = []
    for key, value in config.job.environment.items():
        if key in config.kubernetes.secrets:
            built.notes.append(f"job.environment {key} is read from its Secret (kubernetes.secrets), not written")
        elif k8s.looks_secret(key) and value:
            secret = f"{name}-env"
            found.append({"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
            built.notes.append(
                f"job.environment {key} looks like a secret: the pods read it from Secret {secret!r} instead of a "
                f"value in clear (kubectl create secret generic {secret} --from-literal={key}=...), or name its "
                "Secret in kubernetes.secrets"
            )
        else:
            found.append({"name": key, "value": value})
    for key, reference in config.kubernetes.secrets.items():
        found.append({"name": key, "valueFrom": {"secretKeyRef": {"name": reference.name, "key": reference.key}}})
    return found


def volumes(config: HAConfig, name: str) -> list[dict[str, Any]]:
    """The pod's volumes: the ConfigMap :func:`config_map` writes, memory at /dev/shm, the checkpoint claim."""
    found: list[dict[str, Any]] = [
        {"name": CONFIG_VOLUME, "configMap": {"name": f"{name}-hacfg"}},
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": config.kubernetes.shm_size}},
    ]
    if config.checkpoint.path and config.kubernetes.checkpoint_claim:
        claim = {"claimName": config.kubernetes.checkpoint_claim}
        found.append({"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": claim})
    return found


def config_map(config: HAConfig, name: str) -> dict[str, Any]:
    """The scenario, fully merged, as the agent in each pod reads it: no preset needed there. Without
    ``job.environment``: the container's env carries it, and a ConfigMap is anyone's to read."""
    scenario = scenario_document(config)
    scenario["job"].pop("environment", None)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-hacfg"},
        "data": {CONFIG_FILE: dump_yaml(scenario)},
    }


def network_policies(config: HAConfig, name: str, labels: dict[str, str]) -> list[dict[str, Any]]:
    """With ``kubernetes.network_policy``, a NetworkPolicy over the job's pods (``labels`` select them):
    the agents' group port and ``MASTER_PORT`` admit only the job's own pods; every other port, anyone."""
    if not config.kubernetes.network_policy:
        return []
    pods = {"matchLabels": labels}
    others = [(1, GROUP_PORT - 1), (GROUP_PORT + 1, MASTER_PORT - 1), (MASTER_PORT + 1, 65535)]
    anyone = [{"protocol": "TCP", "port": low, "endPort": high} for low, high in others]
    anyone += [{"protocol": "UDP"}, {"protocol": "SCTP"}]
    ingress = [{"from": [{"podSelector": pods}]}, {"ports": anyone}]
    spec = {"podSelector": pods, "policyTypes": ["Ingress"], "ingress": ingress}
    return [{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": name}, "spec": spec}]


def _group_secret(name: str, built: Build) -> dict[str, Any]:
    """The agents' shared secret from a Kubernetes Secret, optional: without one, node 0 creates
    it on the checkpoint storage (see docs/security.md)."""
    secret = f"{name}-hacfg-group"
    built.notes.append(
        f"the agents sign their group's messages with Secret {secret!r} if it exists: "
        f"kubectl create secret generic {secret} --from-literal={GROUP_SECRET_KEY}=$(openssl rand -hex 32)"
    )
    reference = {"name": secret, "key": GROUP_SECRET_KEY, "optional": True}
    return {"name": GROUP_SECRET, "valueFrom": {"secretKeyRef": reference}}


def _devices(config: HAConfig, built: Build) -> dict[str, int]:
    """The node's cards as the device plugin's resource: ``job.cards``, else what the flavor names."""
    job = config.job
    if job.accelerator == "cpu":
        if job.cards:
            built.notes.append(f"job.cards ({job.cards}) is not requested: the job's accelerator is cpu")
        return {}
    resource = device_resource(config)
    cards = job.cards_per_node
    if cards is None:
        built.notes.append(
            f"no card count for flavor {job.flavor!r}: set job.cards, the {resource} each node requests"
        )
        return {}
    return {resource: cards} if cards else {}


def device_resource(config: HAConfig) -> str:
    """``kubernetes.device_resource``, else NVIDIA's for a GPU job and the Ascend series the flavor names."""
    if config.kubernetes.device_resource:
        return config.kubernetes.device_resource
    if config.job.accelerator == "gpu":
        return k8s.GPU_RESOURCE
    return k8s.ASCEND_RESOURCE.format(series=ma.read_flavor(config.job.flavor or "").ascend_series or "910")


class KubernetesTarget(Target):
    """A target whose output is a ``v1`` List of objects for ``kubectl apply -f``."""

    format = "yaml"

    def listed(self, built: Build, *items: dict[str, Any]) -> None:
        """``items`` as the built document; every object's name is the job name's doing."""
        built.document = {"apiVersion": "v1", "kind": "List", "items": list(items)}
        for item in range(len(items)):
            built.origins[("items", item, "metadata", "name")] = ("job", "name")

    def missing(self, config: HAConfig, document: dict[str, Any]) -> list[str]:
        """Without a command the pod would run nothing and succeed; without an image it would not start."""
        found = [] if config.job.command else ["no command: set job.command"]
        if not config.job.image:
            found.append("no image: set job.image (an image with hacfg installed)")
        return found

    def serialize(self, document: dict[str, Any]) -> str:
        """One YAML document per object, as ``kubectl apply -f`` reads them."""
        return dump_yaml(*document["items"])
