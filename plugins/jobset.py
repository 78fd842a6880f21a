"""JobSet target: a ``jobset.x-k8s.io/v1alpha2`` JobSet, one Indexed Job with a pod per node.

The agent in each pod applies the in-place restart rules; JobSet handles what the agent hands
on (docs/kubernetes.md has the table):

- exit 138 ("retry elsewhere"), or the agent itself killed: the pod fails, its Job exceeds
  ``backoffLimit: 0``, and the JobSet restarts, counted against ``maxRestarts`` (``restart.max``);
- a give-up on a user error (the command's own code): the Job's ``podFailurePolicy`` fails it
  (reason ``PodFailurePolicy``) and a ``FailJobSet`` rule ends the JobSet without a restart;
- a disruption (preemption, eviction, node drain: the pod's ``DisruptionTarget`` condition): the
  same ``FailJob``, told apart by the Job controller's message, restarts the JobSet uncounted.

The node's rank is its completion index, node 0 is reached at its stable hostname
``NAME-node-0-0.NAME`` (JobSet's headless service), and the group's secret comes from a Secret.
"""

from __future__ import annotations

import shlex
from typing import Any

from hacfg.plugin import Build, HAConfig, Target, hookimpl, schema_file
from hacfg.plugin import kubernetes as k8s

from .kubernetes import KubernetesTarget, Pod, config_map, container, kubernetes_name, network_policies, volumes

REPLICATED_JOB = "node"  # also the container's name, as in Kubeflow's runtimes
JOB_ID_FIELD = f"metadata.labels['{k8s.JOBSET_UID_LABEL}']"
RANK_FIELD = f"metadata.annotations['{k8s.COMPLETION_INDEX}']"  # what the Job controller sets JOB_COMPLETION_INDEX from
# The agent killed (137: SIGKILL, the OOM killer) or stopped (143: SIGTERM) is no verdict on the code.
AGENT_KILLED = (137, 143)


def jobset_spec(config: HAConfig, built: Build, name: str) -> dict[str, Any]:
    """The JobSet's spec, also the template of the trainjob target's TrainingRuntime."""
    from hacfg.plugin import RETRY_ELSEWHERE  # here: every build imports this plugin, few use it

    nodes, in_place = config.job.nodes, config.kubernetes.restart_strategy == "InPlaceRestart"
    worker = node_container(config, built, name)
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [worker], "volumes": volumes(config, name)}
    job: dict[str, Any] = {
        "completionMode": "Indexed",  # JOB_COMPLETION_INDEX is the node's rank
        "completions": nodes,
        "parallelism": nodes,
        "backoffLimit": 0,  # one pod's failure is the Job's: the group restarts together
    }
    if config.restart.max:
        job["podFailurePolicy"] = {"rules": pod_failure_rules(RETRY_ELSEWHERE)}
    if in_place:
        _in_place(config, built, job, pod, RETRY_ELSEWHERE)
    if config.kubernetes.service_account:
        pod["serviceAccountName"] = config.kubernetes.service_account
    if config.restart.pod_reschedules:
        built.notes.append(
            f"restart.pod_reschedules ({config.restart.pod_reschedules}) has no place in a JobSet: "
            "exit 138 restarts the whole JobSet, counted against maxRestarts"
        )
    job["template"] = {"spec": pod}
    return {
        "failurePolicy": failure_policy(config),
        "network": {"enableDNSHostnames": True},  # node 0 at NAME-node-0-0.NAME for the agents' rendezvous
        "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": 1, "template": {"spec": job}}],
    }


def policies(config: HAConfig, name: str) -> list[dict[str, Any]]:
    """The NetworkPolicy over the JobSet's pods, which JobSet labels with its name (a TrainJob's too)."""
    return network_policies(config, name, {k8s.JOBSET_NAME_LABEL: name})


def node_container(config: HAConfig, built: Build, name: str) -> dict[str, Any]:
    """A node's container: its rank is the completion index, node 0 is at its stable hostname
    <jobset>-node-0-0.<subdomain> (JobSet's headless service; a TrainJob's JobSet has the TrainJob's name)."""
    node0 = f"{name}-{REPLICATED_JOB}-0-0.{name}"
    return container(config, built, name, Pod(REPLICATED_JOB, JOB_ID_FIELD, RANK_FIELD, node0))


def pod_failure_rules(retry_elsewhere: int) -> list[dict[str, Any]]:
    """A disruption first, so a preempted pod's exit code is never taken for the code's own."""
    codes = sorted({retry_elsewhere, *AGENT_KILLED})
    return [
        {"action": "FailJob", "onPodConditions": [{"type": k8s.DISRUPTION, "status": "True"}]},
        {"action": "FailJob", "onExitCodes": {"containerName": REPLICATED_JOB, "operator": "NotIn", "values": codes}},
    ]


def failure_policy(config: HAConfig) -> dict[str, Any]:
    """``restart.max`` restarts for 138; none at all when it is 0 (no rule restarts uncounted then)."""
    policy: dict[str, Any] = {"maxRestarts": config.restart.max}
    if config.kubernetes.restart_strategy != "Recreate":
        policy["restartStrategy"] = config.kubernetes.restart_strategy
    if config.restart.max:
        policy["rules"] = [
            {
                "name": "disruption",
                "action": k8s.RESTART_JOBSET_UNCOUNTED,
                "onJobFailureReasons": [k8s.POD_FAILURE_POLICY],
                "onJobFailureMessagePatterns": [k8s.DISRUPTION_MESSAGE],
            },
            {"name": "userError", "action": k8s.FAIL_JOBSET, "onJobFailureReasons": [k8s.POD_FAILURE_POLICY]},
            {
                "name": "retryElsewhere",
                "action": k8s.RESTART_JOBSET,
                "onJobFailureReasons": [k8s.BACKOFF_LIMIT_EXCEEDED],
            },
        ]
    return policy


def _in_place(config: HAConfig, built: Build, job: dict[str, Any], pod: dict[str, Any], retry_elsewhere: int) -> None:
    """InPlaceRestart: JobSet's agent (main-container mode) runs ours; exit 138 restarts the container in
    place, which JobSet turns into an in-place restart of every pod, counted against maxRestarts."""
    job["backoffLimit"] = k8s.IN_PLACE_BACKOFF_LIMIT
    job["podReplacementPolicy"] = k8s.IN_PLACE_REPLACEMENT
    worker = pod["containers"][0]
    jobset_name = {"fieldRef": {"fieldPath": f"metadata.annotations['{k8s.JOBSET_NAME_LABEL}']"}}
    worker["env"] += [
        {"name": "WORKER_COMMAND", "value": shlex.join(worker["command"])},
        {"name": "JOBSET_NAME", "valueFrom": jobset_name},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    worker["command"] = [k8s.IN_PLACE_AGENT]
    worker["restartPolicy"] = "Never"
    worker["restartPolicyRules"] = [
        {"action": "Restart", "exitCodes": {"operator": "In", "values": [retry_elsewhere]}}
    ]
    built.notes.append(
        f"InPlaceRestart: the image needs JobSet's in-place restart agent at {k8s.IN_PLACE_AGENT}, the pods a "
        "service account that may patch their own pod (kubernetes.service_account), the cluster "
        "Kubernetes' ContainerRestartRules feature"
    )


class JobSet(KubernetesTarget):
    name = "jobset"
    description = "JobSet (jobset.x-k8s.io/v1alpha2) plus the ConfigMap holding the scenario (YAML)"
    schema = schema_file("jobset.schema.json")

    def build(self, config: HAConfig) -> Build:
        built = Build({})
        name = kubernetes_name(config, built)
        jobset = {"apiVersion": k8s.JOBSET_API, "kind": "JobSet", "metadata": {"name": name}}
        jobset["spec"] = jobset_spec(config, built, name)
        self.listed(built, config_map(config, name), jobset, *policies(config, name))
        spec = ("items", 1, "spec")
        built.origins[(*spec, "failurePolicy", "maxRestarts")] = ("restart", "max")
        built.origins[(*spec, "replicatedJobs", 0, "template", "spec", "completions")] = ("job", "nodes")
        return built

    def missing(self, config: HAConfig, document: dict[str, Any]) -> list[str]:
        """InPlaceRestart without a service account: JobSet's agent could not mark its pod restarted."""
        found = super().missing(config, document)
        if config.kubernetes.restart_strategy == "InPlaceRestart" and not config.kubernetes.service_account:
            found.append("InPlaceRestart needs kubernetes.service_account, one that may patch its own pod")
        return found


@hookimpl
def hacfg_targets() -> list[Target]:
    return [JobSet()]
