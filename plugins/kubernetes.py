"""What every Kubernetes target puts in a pod: the agent around the user's command, the scenario it
reads from a ConfigMap, the group's Secret, the cards, and a name Kubernetes takes.

The targets (``volcano``, ``jobset``, ``trainjob``) differ in the object around the pod and in
how it restarts; they build the pod from here, so the agent runs the same way on each.
"""

from __future__ import annotations

import re
from typing import Any

from hacfg.plugin import Build, HAConfig, Target, dump_yaml, scenario_document

CONFIG_DIR = "/etc/hacfg"
CONFIG_FILE = "ha.yaml"
CONFIG_VOLUME = "hacfg-config"
CHECKPOINT_VOLUME = "checkpoint"
GROUP_SECRET_KEY = "secret"
DEVICE_RESOURCE = {"gpu": "nvidia.com/gpu", "npu": "huawei.com/Ascend910"}
# The job's name for the agent's restart counters: the same for every pod of the job and across its
# restarts, new for a job created again. Each target says which field of the pod holds it.
JOB_ID = "HACFG_JOB_ID"
_CARDS = re.compile(r"(?:^|\.)(\d*)xlarge$")  # modelarts.pool.visual.{,2,4,8,16}xlarge: 1/2/4/8/16 cards


def kubernetes_name(config: HAConfig, built: Build) -> str:
    """The job name as a DNS label; the targets' schemas refuse what is still not one, at ``job.name``."""
    name = config.name.lower().replace("_", "-")
    if name != config.name:
        built.notes.append(f"job name {config.name!r} becomes {name!r}: Kubernetes names are lower case, with '-'")
    return name


def agent_command(config: HAConfig, *options: str) -> list[str]:
    """``hacfg agent`` reading the ConfigMap's scenario, then ``options``, then the user's command."""
    # without a command, missing() refuses the job: no placeholder reaches kubectl apply
    config_file = f"{CONFIG_DIR}/{CONFIG_FILE}"
    return ["hacfg", "agent", "--config", config_file, *options, "--", "/bin/sh", "-c", config.job.command or ""]


def container(
    config: HAConfig, built: Build, name: str, *, task: str, job_id_field: str, agent_options: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The training container, its command wrapped in ``hacfg agent`` (with ``agent_options``);
    ``job_id_field`` is the pod field naming the job for the agent's counters."""
    job = config.job
    made: dict[str, Any] = {"name": task, "image": job.image or "", "command": agent_command(config, *agent_options)}
    made["env"] = [{"name": key, "value": value} for key, value in job.environment.items()]
    if JOB_ID not in job.environment:
        made["env"].append({"name": JOB_ID, "valueFrom": {"fieldRef": {"fieldPath": job_id_field}}})
    if job.nodes > 1:
        made["env"].append(_group_secret(name, built))
    cards = _cards(config, built)
    if cards:
        made["resources"] = {"limits": {DEVICE_RESOURCE[job.accelerator]: cards}}
    made["volumeMounts"] = [{"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR, "readOnly": True}]
    path, claim = config.checkpoint.path, config.kubernetes.checkpoint_claim
    if path and claim:
        made["volumeMounts"].append({"name": CHECKPOINT_VOLUME, "mountPath": path})
    elif path and "://" not in path:
        built.notes.append(
            f"mount shared storage at {path} (checkpoint.path) in every pod: kubernetes.checkpoint_claim names "
            "a PersistentVolumeClaim to mount there"
        )
    return made


def volumes(config: HAConfig, name: str) -> list[dict[str, Any]]:
    """The pod's volumes: the ConfigMap :func:`config_map` writes, and the checkpoint claim."""
    found: list[dict[str, Any]] = [{"name": CONFIG_VOLUME, "configMap": {"name": f"{name}-hacfg"}}]
    if config.checkpoint.path and config.kubernetes.checkpoint_claim:
        claim = {"claimName": config.kubernetes.checkpoint_claim}
        found.append({"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": claim})
    return found


def config_map(config: HAConfig, name: str) -> dict[str, Any]:
    """The scenario, fully merged, as the agent in each pod reads it: no preset needed there."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-hacfg"},
        "data": {CONFIG_FILE: dump_yaml(scenario_document(config))},
    }


def _group_secret(name: str, built: Build) -> dict[str, Any]:
    """The agents' shared secret from a Kubernetes Secret, optional: without one, node 0 creates
    it on the checkpoint storage (see docs/security.md)."""
    secret = f"{name}-hacfg-group"
    built.notes.append(
        f"the agents sign their group's messages with Secret {secret!r} if it exists: "
        f"kubectl create secret generic {secret} --from-literal={GROUP_SECRET_KEY}=$(openssl rand -hex 32)"
    )
    reference = {"name": secret, "key": GROUP_SECRET_KEY, "optional": True}
    return {"name": "HACFG_GROUP_SECRET", "valueFrom": {"secretKeyRef": reference}}


def _cards(config: HAConfig, built: Build) -> int | None:
    if config.job.accelerator == "cpu":
        return None
    match = _CARDS.search(config.job.flavor or "")
    if match is None:
        built.notes.append(
            f"no card count for flavor {config.job.flavor!r}: "
            f"set resources.limits[{DEVICE_RESOURCE[config.job.accelerator]!r}] yourself"
        )
        return None
    return int(match.group(1) or 1)


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
