"""MindCluster target: a Volcano Job for Ascend's cluster scheduler (MindCluster's Volcano, Ascend Device
Plugin and HCCL controller), from the same intents as the ``volcano`` target.

It is the Volcano target's Job with what MindCluster reads (the MindCluster scheduling guide: "configuring the
job YAML file" of resumable training and its vcjob, the PodGroup and Pod label tables; docs/ascend.md maps
each one to its intent and page):

- ``ring-controller.atlas`` on the Job and its pods: the product (``ascend-910``, ``ascend-910b`` for
  910B and A3, ``ascend-310P``), by which the device plugin and the scheduler know the job;
- ``fault-scheduling: grace`` when the job restarts at all: MindCluster moves the job off a chip or node
  it finds faulty (gracefully: the agent forwards SIGTERM, so the trainer may save);
- ``pod-rescheduling: "on"`` with ``restart.pod_reschedules``: only the failed pod is made again;
- ``fault-retry-times`` with ``restart.unconditional``: MindCluster reschedules a job whose container
  failed, whatever the cause, ``restart.max`` times; its policy for ``PodFailed`` is then ``Ignore``, as the
  guide's vcjob has it, where it is otherwise ``AbortJob`` (the agent already restarted in place);
- ``process-recover-enable: "off"``: the agent restarts the training processes in place; MindCluster's
  process-level recovery (MindIO in the trainer) beside it would be a second supervisor of one process;
- the ConfigMap ``rings-config-NAME`` MindCluster fills with the rank table, mounted where its examples
  mount it and named by ``RANK_TABLE_FILE``: the agent waits while its ``status`` is ``initializing``.
"""

from __future__ import annotations

import json
from typing import Any

from hacfg.plugin import Build, HAConfig, Target, hookimpl
from hacfg.plugin import modelarts as ma

from .kubernetes import KubernetesTarget, device_resource
from .volcano import Volcano

RANK_TABLE_DIR = "/user/serverid/devindex/config"  # where MindCluster's vcjob examples mount the rank table
RANK_TABLE_VOLUME = "ascend-910-config"
RANK_TABLE_KEY = "hccl.json"
PRODUCT_LABEL = "ring-controller.atlas"
ASSUMED_PRODUCT = "ascend-910b"  # today's training hardware (Atlas A2 and A3)
# What MindCluster's Pod and PodGroup label tables (dlug_api_173, dlug_api_024) and its resumable training guide
# list for each label hacfg writes; the schema holds the Job's labels to them.
PRODUCTS = ("ascend-910", "ascend-910b", "ascend-310P", "ascend-310")
LABELS: dict[str, Any] = {
    "type": "object",
    "required": [PRODUCT_LABEL],
    "properties": {
        PRODUCT_LABEL: {"enum": list(PRODUCTS)},
        "fault-scheduling": {"enum": ["grace", "force", "off"]},
        "pod-rescheduling": {"enum": ["on", "off"]},
        "process-recover-enable": {"enum": ["on", "pause", "off"]},
        "fault-retry-times": {"type": "string", "pattern": "^(100|[1-9]?[0-9])$"},
    },
}


def product(flavor: str | None) -> str | None:
    """``ring-controller.atlas`` for the chip ``flavor`` names, or None when it names none."""
    read = ma.read_flavor(flavor or "")
    text = (flavor or "").lower()
    if read.ascend_series in ("310P", "310"):
        return f"ascend-{read.ascend_series}"
    if "910b" in text or "snt9b" in text or flavor == ma.SUPERNODE_FLAVOR:
        return "ascend-910b"
    if "kat1" in text or read.chip == "snt9" or ".snt9." in text:
        return "ascend-910"
    return None


def fault_labels(config: HAConfig) -> dict[str, str]:
    """MindCluster's fault-handling labels for the scenario's restart intents (see the module's docstring)."""
    restart = config.restart
    labels = {"process-recover-enable": "off"}
    if restart.max:
        labels["fault-scheduling"] = "grace"
    if restart.pod_reschedules:
        labels["pod-rescheduling"] = "on"
    if restart.unconditional and restart.max:
        labels["fault-retry-times"] = str(restart.max)
    return labels


class MindCluster(KubernetesTarget):
    name = "mindcluster"
    description = "Volcano Job for MindCluster (Ascend's cluster scheduler), its rank table ConfigMap and the scenario"
    schema = Volcano.schema  # the Volcano target's, with MindCluster's objects and labels: see schema_document

    def schema_document(self) -> dict[str, Any] | None:
        """The Volcano target's schema (Volcano's CRD), its List with the rank table's ConfigMap after the
        scenario's and the Job's labels held to MindCluster's values."""
        document = super().schema_document()
        assert document is not None
        items = document["properties"]["items"]
        scenario_map, job = items["prefixItems"]
        metadata = job["allOf"][1]["properties"]["metadata"]
        metadata["required"] = ["name", "labels"]
        metadata["properties"]["labels"] = LABELS
        rank_table = {
            "type": "object",
            "required": ["apiVersion", "kind", "metadata", "data"],
            "properties": {
                "apiVersion": {"const": "v1"},
                "kind": {"const": "ConfigMap"},
                "metadata": {
                    "type": "object",
                    "required": ["name", "labels"],
                    "properties": {
                        "name": {"type": "string", "pattern": "^rings-config-[a-z]([-a-z0-9]*[a-z0-9])?$"},
                        "labels": {"type": "object", "properties": {PRODUCT_LABEL: {"enum": list(PRODUCTS)}}},
                    },
                },
                "data": {"type": "object", "required": [RANK_TABLE_KEY], "additionalProperties": {"type": "string"}},
            },
        }
        items.update(minItems=3, maxItems=4, prefixItems=[scenario_map, rank_table, job])
        document["title"] = "hacfg mindcluster target output: the volcano target's, with the rank table's ConfigMap"
        return document

    def build(self, config: HAConfig) -> Build:
        built = Volcano().build(config)
        if config.job.accelerator != "npu":
            why = f"the mindcluster target schedules Ascend NPUs (job.accelerator: npu), not {config.job.accelerator}"
            built.refused.append((("job", "accelerator"), why))
            return built
        label = product(config.job.flavor)
        if label is None:
            label = ASSUMED_PRODUCT
            built.notes.append(
                f"{PRODUCT_LABEL}: {label} assumed (flavor {config.job.flavor!r} names no chip): "
                "ascend-910 for Atlas 800 (910) training servers"
            )
        config_map, job, *network_policies = built.document["items"]
        name = job["metadata"]["name"]
        job["metadata"]["labels"] = {PRODUCT_LABEL: label, **fault_labels(config)}
        spec = job["spec"]
        if "fault-retry-times" in job["metadata"]["labels"]:  # MindCluster's unconditional retry decides
            ignored = {"event": "PodFailed", "action": "Ignore"}
            spec["policies"] = [ignored if p.get("event") == "PodFailed" else p for p in spec["policies"]]
        [task] = spec["tasks"]
        pod = task["template"]["spec"]
        task["template"] = {"metadata": {"labels": {PRODUCT_LABEL: label}}, "spec": pod}
        pod["volumes"].append({"name": RANK_TABLE_VOLUME, "configMap": {"name": f"rings-config-{name}"}})
        [container] = pod["containers"]
        container["volumeMounts"].append({"name": RANK_TABLE_VOLUME, "mountPath": RANK_TABLE_DIR})
        annotation = f"metadata.annotations['{device_resource(config)}']"  # the cards the scheduler chose
        container["env"] += [
            {"name": "RANK_TABLE_FILE", "value": f"{RANK_TABLE_DIR}/{RANK_TABLE_KEY}"},
            {"name": "ASCEND_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {"fieldPath": annotation}}},
        ]
        built.document["items"] = [config_map, rank_table_map(name, label), job, *network_policies]
        built.origins = {_shifted(path): key for path, key in built.origins.items()}
        built.origins[("items", 1, "metadata", "name")] = ("job", "name")
        return built


def rank_table_map(name: str, label: str) -> dict[str, Any]:
    """The ConfigMap MindCluster's HCCL controller fills with the job's rank table: named for the Job, with the
    Job's product label, ``initializing`` until the cards are allocated."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"rings-config-{name}", "labels": {PRODUCT_LABEL: label}},
        "data": {RANK_TABLE_KEY: json.dumps({"status": "initializing"})},
    }


def _shifted(path: tuple[Any, ...]) -> tuple[Any, ...]:
    """An output path of the Volcano build, the Job now one item further down the list."""
    if path[:1] == ("items",) and isinstance(path[1], int) and path[1] >= 1:
        return ("items", path[1] + 1, *path[2:])
    return path


@hookimpl
def hacfg_targets() -> list[Target]:
    return [MindCluster()]
