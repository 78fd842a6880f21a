"""Kubeflow Trainer target: a ``trainer.kubeflow.org/v1alpha1`` TrainJob and the runtime it runs on.

By default hacfg writes the runtime too, a ``TrainingRuntime`` of the job's name whose JobSet
template is the jobset target's spec: the same pods, the same restart policy. With
``kubernetes.runtime`` the TrainJob runs on that existing ``ClusterTrainingRuntime`` instead: the
trainer's image, command and nodes come from the scenario, the ConfigMap is mounted through a
runtime patch, and the restarts are whatever that runtime's failure policy says (``hacfg lint``
reads a runtime's manifest).
"""

from __future__ import annotations

from typing import Any

from hacfg.plugin import Build, HAConfig, Target, hookimpl, schema_file
from hacfg.plugin import kubernetes as k8s

from .jobset import REPLICATED_JOB, JobSet, jobset_spec, node_container, policies
from .kubernetes import config_map, kubernetes_name, volumes

MANAGER = "hacfg"  # who owns the runtime patch


class TrainJob(JobSet):
    name = "trainjob"
    description = "Kubeflow TrainJob (trainer.kubeflow.org/v1alpha1), its TrainingRuntime and the scenario's ConfigMap"
    schema = schema_file("trainjob.schema.json")

    def build(self, config: HAConfig) -> Build:
        built = Build({})
        name = kubernetes_name(config, built)
        train_job: dict[str, Any] = {"apiVersion": k8s.TRAINER_API, "kind": "TrainJob", "metadata": {"name": name}}
        if config.kubernetes.runtime is None:
            spec = jobset_spec(config, built, name)
            runtime = {
                "apiVersion": k8s.TRAINER_API,
                "kind": "TrainingRuntime",
                "metadata": {"name": name},
                # torch: Trainer hands torchrun PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT
                "spec": {"mlPolicy": {"numNodes": config.job.nodes, "torch": {}}, "template": {"spec": spec}},
            }
            # TrainJob's trainer settings go to the replicated Job so labelled
            trainer = {"labels": {k8s.TRAINER_ANCESTOR_LABEL: k8s.TRAINER_ANCESTOR}}
            spec["replicatedJobs"][0]["template"]["metadata"] = trainer
            train_job["spec"] = {"runtimeRef": _reference("TrainingRuntime", name)}
            self.listed(built, config_map(config, name), runtime, train_job, *policies(config, name))
            built.origins[("items", 1, "spec", "template", "spec", "failurePolicy", "maxRestarts")] = ("restart", "max")
            built.origins[("items", 1, "spec", "mlPolicy", "numNodes")] = ("job", "nodes")
            return built
        train_job["spec"] = _on_runtime(config, built, name)
        self.listed(built, config_map(config, name), train_job, *policies(config, name))
        built.origins[("items", 1, "spec", "trainer", "numNodes")] = ("job", "nodes")
        return built

    def missing(self, config: HAConfig, document: dict[str, Any]) -> list[str]:
        """A runtime of the user's restarts as it says: a restart strategy of the scenario's would be ignored."""
        found = super().missing(config, document)
        if config.kubernetes.runtime and config.kubernetes.restart_strategy != "Recreate":
            found.append(f"kubernetes.restart_strategy is runtime {config.kubernetes.runtime!r}'s to set")
        return found


def _reference(kind: str, name: str) -> dict[str, str]:
    return {"apiGroup": k8s.TRAINER_API.partition("/")[0], "kind": kind, "name": name}


def _on_runtime(config: HAConfig, built: Build, name: str) -> dict[str, Any]:
    """The TrainJob's spec on an existing runtime: our container's settings as the trainer's, the
    ConfigMap mounted by a patch of the runtime's trainer Job."""
    runtime = config.kubernetes.runtime or ""
    ours = node_container(config, built, name)
    trainer = {"image": ours["image"], "command": ours["command"], "numNodes": config.job.nodes, "env": ours["env"]}
    if "resources" in ours:
        trainer["resourcesPerNode"] = ours["resources"]
    mount = {"name": REPLICATED_JOB, "volumeMounts": ours["volumeMounts"]}
    patch = {"containers": [mount], "volumes": volumes(config, name)}
    replicated = {"name": REPLICATED_JOB, "template": {"spec": {"template": {"spec": patch}}}}
    built.notes.append(
        f"ClusterTrainingRuntime {runtime!r} decides the restarts: hacfg's policy (docs/kubernetes.md) holds only "
        "if its failurePolicy says the same (hacfg lint checks a runtime's manifest); its trainer Job must be "
        f"named {REPLICATED_JOB!r}"
    )
    return {
        "runtimeRef": _reference("ClusterTrainingRuntime", runtime),
        "trainer": trainer,
        "runtimePatches": [
            {"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [replicated]}}}}
        ],
    }


@hookimpl
def hacfg_targets() -> list[Target]:
    return [TrainJob()]
