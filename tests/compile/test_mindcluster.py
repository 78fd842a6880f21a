"""The MindCluster target: Volcano's Job with MindCluster's labels, the rank table ConfigMap its HCCL controller
fills, checked against Volcano's CRD and against MindCluster's own example vcjob (tests/data/upstream/mindcluster:
Ascend/mind-cluster's ``tests/st/testcases/multi_node_schedule/resources_0001/vcjob_kwok_simulator-8x8.yaml``,
Apache-2.0, byte for byte, from its GitHub mirror xiaobingling93-pixel/Ascend-mind-cluster at c7632a1)."""

from __future__ import annotations

import json

import pytest
import yaml
from kit.paths import REPO
from kit.schemas import volcano_job_schema as job_schema

from hacfg.plugin import provided

UPSTREAM = REPO / "tests/data/upstream/mindcluster/vcjob_kwok_simulator-8x8.yaml"
SCENARIO = """version: 1
scenario: multi-node
job: {{name: llama-npu, nodes: 2, accelerator: npu, image: org/train-npu:1.0, command: bash run.sh, flavor: {flavor}}}
restart: {restart}
"""


def build(cli, write, *, flavor="modelarts.pool.visual.npu.8snt9b3.d", restart="{max: 3}"):
    result = cli("build", "--target", "mindcluster", write("ha.yaml", SCENARIO.format(flavor=flavor, restart=restart)))
    assert result.code == 0, result.err
    return list(yaml.safe_load_all(result.out)), result


def shipped_schema() -> dict:
    """The schema a build checks the output against: the volcano target's, extended."""
    return provided.targets()["mindcluster"].schema_document()


def test_the_job_validates_against_volcanos_crd_and_the_list_against_the_shipped_schema(cli, write):
    from jsonschema import Draft202012Validator

    objects, _ = build(cli, write)
    scenario, rings, job = objects
    assert [e.message for e in Draft202012Validator(job_schema()).iter_errors(job)] == []
    document = {"apiVersion": "v1", "kind": "List", "items": objects}
    assert [e.message for e in Draft202012Validator(shipped_schema()).iter_errors(document)] == []
    assert shipped_schema()["$defs"]["job"] == job_schema()  # the CRD, unchanged
    assert (scenario["metadata"]["name"], rings["metadata"]["name"], job["metadata"]["name"]) == (
        "llama-npu-hacfg",
        "rings-config-llama-npu",
        "llama-npu",
    )


def test_the_rank_table_is_mindclusters_to_fill_and_the_agent_reads_it_where_mindcluster_mounts_it(cli, write):
    (_, rings, job), _ = build(cli, write)
    assert rings["metadata"]["labels"] == {"ring-controller.atlas": "ascend-910b"}
    assert json.loads(rings["data"]["hccl.json"]) == {"status": "initializing"}
    [task] = job["spec"]["tasks"]
    assert task["template"]["metadata"] == {"labels": {"ring-controller.atlas": "ascend-910b"}}
    pod = task["template"]["spec"]
    [container] = pod["containers"]
    assert {"name": "ascend-910-config", "configMap": {"name": "rings-config-llama-npu"}} in pod["volumes"]
    assert {"name": "ascend-910-config", "mountPath": "/user/serverid/devindex/config"} in container["volumeMounts"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["RANK_TABLE_FILE"] == "/user/serverid/devindex/config/hccl.json"
    assert env["ASCEND_VISIBLE_DEVICES"] == {"fieldRef": {"fieldPath": "metadata.annotations['huawei.com/Ascend910']"}}
    assert container["resources"] == {"limits": {"huawei.com/Ascend910": 8}, "requests": {"huawei.com/Ascend910": 8}}
    assert "&id" not in yaml.safe_dump(job)  # every value its own: no YAML aliases for kubectl to meet


@pytest.mark.parametrize(("restart", "labels", "policies"), [
    ("{max: 0, unconditional: false}", {"process-recover-enable": "off"},
     [("exitCode", 138, "RestartJob"), ("event", "PodEvicted", "RestartJob"), ("event", "PodFailed", "AbortJob")]),
    ("{max: 3, unconditional: false}", {"process-recover-enable": "off", "fault-scheduling": "grace"},
     [("exitCode", 138, "RestartJob"), ("event", "PodEvicted", "RestartJob"), ("event", "PodFailed", "AbortJob")]),
    ("{max: 3, unconditional: false, pod_reschedules: 2}", {"process-recover-enable": "off", "fault-scheduling": "grace", "pod-rescheduling": "on"},
     [("exitCode", 138, "RestartPod"), ("event", "PodEvicted", "RestartJob"), ("event", "PodFailed", "AbortJob")]),
    ("{max: 5, unconditional: true}", {"process-recover-enable": "off", "fault-scheduling": "grace", "fault-retry-times": "5"},
     [("exitCode", 138, "RestartJob"), ("event", "PodEvicted", "RestartJob"), ("event", "PodFailed", "Ignore")]),
])  # fmt: skip
def test_the_labels_and_policies_follow_the_restart_intents(cli, write, restart, labels, policies):
    """fault-retry-times is MindCluster's unconditional retry: its guide's vcjob then ignores PodFailed."""
    (_, _, job), _ = build(cli, write, restart=restart)
    assert job["metadata"]["labels"] == {"ring-controller.atlas": "ascend-910b", **labels}
    assert [
        (key, p[key], p["action"]) for p in job["spec"]["policies"] for key in ("exitCode", "event") if key in p
    ] == policies


@pytest.mark.parametrize(("flavor", "product", "resource"), [
    ("modelarts.pool.visual.npu.8snt9b3.d", "ascend-910b", "huawei.com/Ascend910"),
    ("modelarts.bm.arm.24u.192g.npu.1d910b", "ascend-910b", "huawei.com/Ascend910"),
    ("modelarts.pool.visual.16xlarge", "ascend-910b", "huawei.com/Ascend910"),
    ("modelarts.kat1.8xlarge", "ascend-910", "huawei.com/Ascend910"),
    ("modelarts.bm.snt9.xlarge.8", "ascend-910", "huawei.com/Ascend910"),
    ("modelarts.bm.arm.24u.192g.npu.1d310p", "ascend-310P", "huawei.com/Ascend310P"),
])  # fmt: skip
def test_the_product_label_is_the_chip_the_flavor_names(cli, write, flavor, product, resource):
    (_, rings, job), _ = build(cli, write, flavor=flavor)
    assert (
        rings["metadata"]["labels"]["ring-controller.atlas"]
        == job["metadata"]["labels"]["ring-controller.atlas"]
        == product
    )
    [container] = job["spec"]["tasks"][0]["template"]["spec"]["containers"]
    assert list(container["resources"]["limits"]) == [resource]


def test_a_flavor_naming_no_chip_gets_910b_and_says_so(cli, write):
    (_, _, job), result = build(cli, write, flavor="modelarts.pool.visual.8xlarge")
    assert job["metadata"]["labels"]["ring-controller.atlas"] == "ascend-910b"
    assert (
        "ring-controller.atlas: ascend-910b assumed (flavor 'modelarts.pool.visual.8xlarge' names no chip)"
        in result.err
    )


def test_a_gpu_job_is_refused_at_its_accelerator(cli, write):
    path = write(
        "ha.yaml", SCENARIO.format(flavor="modelarts.pool.visual.8xlarge", restart="{max: 1}").replace("npu", "gpu")
    )
    result = cli("build", "--target", "mindcluster", path)
    assert (result.code, result.out) == (2, "")
    assert result.err == f"{path}:3:47: the mindcluster target schedules Ascend NPUs (job.accelerator: npu), not gpu\n"


def test_mindclusters_own_vcjob_speaks_the_labels_the_shipped_schema_admits(cli, write):
    """Its Job and pod labels, and the shape hacfg writes around them, as MindCluster's example has them."""
    from jsonschema import Draft202012Validator

    upstream = yaml.safe_load(UPSTREAM.read_text())
    assert [e.message for e in Draft202012Validator(job_schema()).iter_errors(upstream)] == []
    job = shipped_schema()["properties"]["items"]["prefixItems"][2]["allOf"][1]
    labels = Draft202012Validator(job["properties"]["metadata"]["properties"]["labels"])
    assert [e.message for e in labels.iter_errors(upstream["metadata"]["labels"])] == []
    assert list(labels.iter_errors({**upstream["metadata"]["labels"], "fault-scheduling": "now"}))  # held to the values
    (_, _, ours), _ = build(cli, write)
    theirs = upstream["spec"]["tasks"][0]["template"]
    mine = ours["spec"]["tasks"][0]["template"]
    assert mine["metadata"]["labels"]["ring-controller.atlas"] == theirs["metadata"]["labels"]["ring-controller.atlas"]
    for key in ("schedulerName", "maxRetry", "minAvailable"):
        assert key in ours["spec"] and key in upstream["spec"]
    assert mine["spec"]["restartPolicy"] == theirs["spec"]["restartPolicy"] == "Never"
    [their_container], [my_container] = theirs["spec"]["containers"], mine["spec"]["containers"]
    their_devices = next(e for e in their_container["env"] if e["name"] == "ASCEND_VISIBLE_DEVICES")
    assert their_devices in my_container["env"]
    assert my_container["resources"] == their_container["resources"]
