"""Volcano target: a ``batch.volcano.sh/v1alpha1`` Job for any Kubernetes cluster.

The container runs the user's command under ``hacfg agent``, which applies the in-place
restart rules itself; Volcano only handles what the agent cannot: exit 138 ("retry
elsewhere") restarts the pod (with pod reschedules) or the whole job, an evicted pod restarts
the job, and any other failure ends it. ``maxRetry`` is ``restart.max``. With several nodes,
the agents sign what they tell each other with the Kubernetes Secret ``NAME-hacfg-group``
(key ``secret``) when it exists, else with a secret node 0 keeps on the checkpoint storage.
"""

from __future__ import annotations

import re
from typing import Any

from hacfg.plugin import Build, HAConfig, Target, dump_yaml, hookimpl, scenario_document, schema_file

CONFIG_DIR = "/etc/hacfg"
CONFIG_FILE = "ha.yaml"
TASK = "worker"
GROUP_SECRET_KEY = "secret"
DEVICE_RESOURCE = {"gpu": "nvidia.com/gpu", "npu": "huawei.com/Ascend910"}
# The job's name for the agent's restart counters: the pod's PodGroup, <job name>-<job uid> on current
# Volcano, the same for every pod of the job and across its restarts, new for a job created again.
JOB_ID = "HACFG_JOB_ID"
JOB_ID_FIELD = "metadata.annotations['scheduling.k8s.io/group-name']"
_CARDS = re.compile(r"(?:^|\.)(\d*)xlarge$")  # modelarts.pool.visual.{,2,4,8,16}xlarge: 1/2/4/8/16 cards


def lifecycle_policies(config: HAConfig) -> list[dict[str, Any]]:
    """Exit-code policies first, so 138 is never mistaken for an ordinary failure."""
    from hacfg.plugin import RETRY_ELSEWHERE  # here: every build imports this plugin, few use it

    retry = "RestartPod" if config.restart.pod_reschedules else "RestartJob"
    return [
        {"exitCode": RETRY_ELSEWHERE, "action": retry},
        {"event": "PodEvicted", "action": "RestartJob"},
        {"event": "PodFailed", "action": "AbortJob"},  # the agent already applied the in-place rules
    ]


class Volcano(Target):
    name = "volcano"
    description = "Volcano Job (batch.volcano.sh/v1alpha1) plus the ConfigMap holding the scenario (YAML)"
    schema = schema_file("volcano-job.schema.json")
    format = "yaml"

    def build(self, config: HAConfig) -> Build:
        built = Build({})
        job = config.job
        name = config.name.lower().replace("_", "-")  # Kubernetes names are DNS labels
        if name != config.name:
            built.notes.append(f"job name {config.name!r} becomes {name!r}: Kubernetes names are lower case, with '-'")
        command = [
            "hacfg",
            "agent",
            "--config",
            f"{CONFIG_DIR}/{CONFIG_FILE}",
            "--",
            "/bin/sh",
            "-c",
            job.command or "",
        ]
        # without an image, missing() refuses the job: no placeholder reaches kubectl apply
        container: dict[str, Any] = {"name": TASK, "image": job.image or "", "command": command}
        container["env"] = [{"name": key, "value": value} for key, value in job.environment.items()]
        if JOB_ID not in job.environment:
            container["env"].append({"name": JOB_ID, "valueFrom": {"fieldRef": {"fieldPath": JOB_ID_FIELD}}})
        if job.nodes > 1:
            container["env"].append(self._group_secret(name, built))
        cards = self._cards(config, built)
        if cards:
            container["resources"] = {"limits": {DEVICE_RESOURCE[job.accelerator]: cards}}
        container["volumeMounts"] = [{"name": "hacfg-config", "mountPath": CONFIG_DIR, "readOnly": True}]
        if config.checkpoint.path and "://" not in config.checkpoint.path:
            built.notes.append(f"mount shared storage at {config.checkpoint.path} (checkpoint.path) in every pod")
        config_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-hacfg"},
            "data": {CONFIG_FILE: dump_yaml(scenario_document(config))},
        }
        volcano_job = {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {
                "schedulerName": "volcano",
                "minAvailable": job.nodes,
                "maxRetry": config.restart.max,
                "plugins": {"svc": [], "env": []},  # /etc/volcano/*.host and VC_* variables, read by the dns pre-check
                "policies": lifecycle_policies(config),
                "tasks": [
                    {
                        "name": TASK,
                        "replicas": job.nodes,
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [container],
                                "volumes": [{"name": "hacfg-config", "configMap": {"name": f"{name}-hacfg"}}],
                            }
                        },
                    }
                ],
            },
        }
        built.document = {"apiVersion": "v1", "kind": "List", "items": [config_map, volcano_job]}
        for item in range(len(built.document["items"])):  # a name Kubernetes refuses is the job name's fault
            built.origins[("items", item, "metadata", "name")] = ("job", "name")
        built.origins[("items", 1, "spec", "minAvailable")] = ("job", "nodes")
        built.origins[("items", 1, "spec", "maxRetry")] = ("restart", "max")
        return built

    @staticmethod
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

    @staticmethod
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

    def missing(self, config: HAConfig, document: dict[str, Any]) -> list[str]:
        """Without a command the pod would run nothing and succeed; without an image it would not start."""
        found = [] if config.job.command else ["no command: set job.command"]
        if not config.job.image:
            found.append("no image: set job.image (an image with hacfg installed)")
        return found

    def serialize(self, document: dict[str, Any]) -> str:
        """One YAML document per object, as ``kubectl apply -f`` reads them."""
        return dump_yaml(*document["items"])


@hookimpl
def hacfg_targets() -> list[Target]:
    return [Volcano()]
