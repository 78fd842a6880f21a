"""Volcano target: a ``batch.volcano.sh/v1alpha1`` Job for any Kubernetes cluster.

The container runs the user's command under ``hacfg agent``, which applies the in-place
restart rules itself; Volcano only handles what the agent cannot: exit 138 ("retry
elsewhere") restarts the pod (with pod reschedules) or the whole job, an evicted pod restarts
the job, and any other failure ends it. ``maxRetry`` is ``restart.max``. With several nodes,
the agents sign what they tell each other with the Kubernetes Secret ``NAME-hacfg-group``
(key ``secret``) when it exists, else with a secret node 0 keeps on the checkpoint storage.
"""

from __future__ import annotations

from typing import Any

from hacfg.plugin import Build, HAConfig, Target, hookimpl, schema_file

from .kubernetes import KubernetesTarget, Pod, config_map, container, kubernetes_name, network_policies, volumes

TASK = "worker"
# The pod's PodGroup, <job name>-<job uid> on current Volcano.
JOB_ID_FIELD = "metadata.annotations['scheduling.k8s.io/group-name']"
# The label Volcano's job controller puts on every pod of the job.
JOB_NAME_LABEL = "volcano.sh/job-name"
# The pod's index in its task, which Volcano's job controller annotates (and its env plugin sets as VC_TASK_INDEX).
RANK_FIELD = "metadata.annotations['volcano.sh/task-index']"


def lifecycle_policies(config: HAConfig) -> list[dict[str, Any]]:
    """Exit-code policies first, so 138 is never mistaken for an ordinary failure."""
    from hacfg.plugin import RETRY_ELSEWHERE  # here: every build imports this plugin, few use it

    retry = "RestartPod" if config.restart.pod_reschedules else "RestartJob"
    return [
        {"exitCode": RETRY_ELSEWHERE, "action": retry},
        {"event": "PodEvicted", "action": "RestartJob"},
        {"event": "PodFailed", "action": "AbortJob"},  # the agent already applied the in-place rules
    ]


def _pod(name: str) -> Pod:
    """Node 0 at its hostname, as the svc plugin names it: the pod's name, NAME-worker-0, in subdomain NAME."""
    return Pod(TASK, JOB_ID_FIELD, RANK_FIELD, f"{name}-{TASK}-0.{name}")


class Volcano(KubernetesTarget):
    name = "volcano"
    description = "Volcano Job (batch.volcano.sh/v1alpha1) plus the ConfigMap holding the scenario (YAML)"
    schema = schema_file("volcano-job.schema.json")

    def build(self, config: HAConfig) -> Build:
        built = Build({})
        job = config.job
        name = kubernetes_name(config, built)
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
                                "containers": [container(config, built, name, _pod(name))],
                                "volumes": volumes(config, name),
                            }
                        },
                    }
                ],
            },
        }
        policies = network_policies(config, name, {JOB_NAME_LABEL: name})
        self.listed(built, config_map(config, name), volcano_job, *policies)
        built.origins[("items", 1, "spec", "minAvailable")] = ("job", "nodes")
        built.origins[("items", 1, "spec", "maxRetry")] = ("restart", "max")
        return built


@hookimpl
def hacfg_targets() -> list[Target]:
    return [Volcano()]
