"""The JobSet and Kubeflow TrainJob targets: objects that validate against their CRDs, with the same
intents as the Volcano and ModelArts targets mapped to JobSet's failure policy."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import shlex

import pytest
import yaml
from kit.cli import findings
from kit.paths import REPO, SHARED

from hacfg.plugin.provided import presets
from hacfg.scenario.config import load_config

SCHEMAS = SHARED / "reference" / "schemas"
CRD_FILES = {
    "JobSet": "jobset.x-k8s.io_jobsets.yaml",
    "TrainJob": "trainer.kubeflow.org_trainjobs.yaml",
    "TrainingRuntime": "trainer.kubeflow.org_trainingruntimes.yaml",
}
TARGETS = ("jobset", "trainjob")
LLAMA = REPO / "examples/llama-pretrain/ha.yaml"


def crd_schema(kind: str) -> dict:
    """The CRD as its project publishes it (the reference documents beside the repository)."""
    if not (SCHEMAS / CRD_FILES[kind]).is_file():
        pytest.skip(f"the published CRDs are missing: {SCHEMAS / CRD_FILES[kind]}")
    return _published(kind)


@functools.cache
def _published(kind: str) -> dict:
    [version] = yaml.load((SCHEMAS / CRD_FILES[kind]).read_text(), Loader=yaml.CSafeLoader)["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def build(cli, target, path):
    result = cli("build", "--target", target, path)
    assert result.code == 0, result.err
    return list(yaml.safe_load_all(result.out)), result


def jobset_spec(objects):
    """The JobSet spec in either target's output: the JobSet's, or the TrainingRuntime's template."""
    [spec] = [o["spec"] if o["kind"] == "JobSet" else o["spec"]["template"]["spec"] for o in objects if o["kind"] in ("JobSet", "TrainingRuntime")]
    return spec


def job_spec(objects):
    return jobset_spec(objects)["replicatedJobs"][0]["template"]["spec"]


def scenario(write, restart="{max: 4}", extra=""):
    return write("ha.yaml", f"version: 1\nscenario: multi-node\njob: {{name: t, nodes: 2, image: img, command: python train.py}}\nrestart: {restart}\n{extra}")


IN_PLACE = "kubernetes: {restart_strategy: InPlaceRestart, service_account: jobset-in-place-restart}\n"
SCENARIOS = {
    "llama": None,
    "single-node": "version: 1\nscenario: single-node\njob: {name: one, image: img, command: python train.py, accelerator: cpu}\n",
    "no-restart": "version: 1\nscenario: multi-node\njob: {name: t, nodes: 2, image: img, command: x}\nrestart: {max: 0}\n",
    "in-place": f"version: 1\nscenario: multi-node\njob: {{name: t, nodes: 2, image: img, command: x}}\nrestart: {{max: 3}}\n{IN_PLACE}",
    "runtime": "version: 1\nscenario: multi-node\njob: {name: t, nodes: 2, image: img, command: x, flavor: x.8xlarge}\nrestart: {max: 3, pod_reschedules: 1}\nkubernetes: {runtime: torch-distributed}\n",
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", SCENARIOS)
def test_every_object_validates_against_its_crd(cli, write, target, case):
    from jsonschema import Draft202012Validator

    path = LLAMA if SCENARIOS[case] is None else write("ha.yaml", SCENARIOS[case])
    objects, _ = build(cli, target, path)
    assert objects[0]["kind"] == "ConfigMap"
    checked = [o["kind"] for o in objects[1:]]
    for obj in objects[1:]:
        assert [e.message for e in Draft202012Validator(crd_schema(obj["kind"])).iter_errors(obj)] == [], obj["kind"]
    expected = {"jobset": ["JobSet"], "trainjob": ["TrainJob"] if case == "runtime" else ["TrainingRuntime", "TrainJob"]}
    assert checked == expected[target]


@pytest.mark.parametrize("target", TARGETS)
def test_shipped_schema_embeds_the_crds_unchanged(target):
    shipped = json.loads((REPO / f"schemas/{target}.schema.json").read_text())
    embedded = {"jobset": {"jobset": "JobSet"}, "trainjob": {"trainJob": "TrainJob", "trainingRuntime": "TrainingRuntime"}}
    for key, kind in embedded[target].items():
        assert shipped["$defs"][key] == crd_schema(kind)


@pytest.mark.parametrize("target", TARGETS)
def test_exit_138_restarts_the_jobset_counted_against_restart_max(cli, write, target):
    objects, _ = build(cli, target, scenario(write))
    policy = jobset_spec(objects)["failurePolicy"]
    assert policy["maxRestarts"] == 4
    # 138 is no FailJob code: the pod's failure exceeds backoffLimit 0, and that reason restarts, counted
    assert job_spec(objects)["backoffLimit"] == 0
    assert 138 in job_spec(objects)["podFailurePolicy"]["rules"][1]["onExitCodes"]["values"]
    assert policy["rules"][2] == {"name": "retryElsewhere", "action": "RestartJobSet", "onJobFailureReasons": ["BackoffLimitExceeded"]}


@pytest.mark.parametrize("target", TARGETS)
def test_a_user_error_fails_the_jobset_without_a_restart(cli, write, target):
    """The agent gives up with the command's own code: FailJob on it, then FailJobSet on that reason."""
    objects, _ = build(cli, target, scenario(write))
    assert job_spec(objects)["podFailurePolicy"]["rules"][1] == {
        "action": "FailJob",
        "onExitCodes": {"containerName": "node", "operator": "NotIn", "values": [137, 138, 143]},
    }
    assert jobset_spec(objects)["failurePolicy"]["rules"][1] == {"name": "userError", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}


@pytest.mark.parametrize("target", TARGETS)
def test_a_disruption_restarts_uncounted_before_any_exit_code_is_read(cli, write, target):
    objects, _ = build(cli, target, scenario(write))
    assert job_spec(objects)["podFailurePolicy"]["rules"][0] == {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert jobset_spec(objects)["failurePolicy"]["rules"][0] == {
        "name": "disruption",
        "action": "RestartJobSetAndIgnoreMaxRestarts",
        "onJobFailureReasons": ["PodFailurePolicy"],
        "onJobFailureMessagePatterns": ["has condition DisruptionTarget"],  # the Job controller's message for a pod condition
    }


@pytest.mark.parametrize("target", TARGETS)
def test_restart_max_0_restarts_nothing(cli, write, target):
    objects, _ = build(cli, target, scenario(write, restart="{max: 0}"))
    assert jobset_spec(objects)["failurePolicy"] == {"maxRestarts": 0}  # no rule restarts, not even uncounted
    assert "podFailurePolicy" not in job_spec(objects)


@pytest.mark.parametrize("target", TARGETS)
def test_pod_reschedules_have_no_place_and_are_reported_not_invented(cli, write, target):
    without, _ = build(cli, target, scenario(write))
    objects, result = build(cli, target, scenario(write, restart="{max: 4, pod_reschedules: 2}"))
    assert "restart.pod_reschedules (2) has no place in a JobSet" in result.err
    assert jobset_spec(objects) == jobset_spec(without)


@pytest.mark.parametrize("target", TARGETS)
def test_in_place_restart_brings_its_prerequisites(cli, write, target):
    objects, result = build(cli, target, scenario(write, restart="{max: 3}", extra=IN_PLACE))
    assert jobset_spec(objects)["failurePolicy"]["restartStrategy"] == "InPlaceRestart"
    job = job_spec(objects)
    assert (job["backoffLimit"], job["podReplacementPolicy"]) == (2147483647, "Failed")
    pod = job["template"]["spec"]
    assert pod["serviceAccountName"] == "jobset-in-place-restart"
    [container] = pod["containers"]
    # JobSet's agent runs ours; our 138 restarts the container in place, which JobSet spreads to every pod
    assert container["command"] == ["/in-place-restart-agent"]
    env = {e["name"]: e for e in container["env"]}
    assert shlex.split(env["WORKER_COMMAND"]["value"])[:4] == ["hacfg", "agent", "--config", "/etc/hacfg/ha.yaml"]
    assert {"JOBSET_NAME", "POD_NAME"} <= env.keys()
    assert container["restartPolicyRules"] == [{"action": "Restart", "exitCodes": {"operator": "In", "values": [138]}}]
    assert "in-place restart agent at /in-place-restart-agent" in result.err


@pytest.mark.parametrize("target", TARGETS)
def test_in_place_restart_without_a_service_account_is_refused(cli, write, target):
    path = scenario(write, extra="kubernetes: {restart_strategy: InPlaceRestart}\n")
    result = cli("build", "--target", target, path)
    assert (result.code, result.out) == (2, "")
    assert result.err == f"{path}:3:6: the {target} job is incomplete: InPlaceRestart needs kubernetes.service_account, one that may patch its own pod\n"


@pytest.mark.parametrize("target", TARGETS)
def test_the_group_is_found_the_kubernetes_way(cli, target):
    objects, result = build(cli, target, LLAMA)
    job = job_spec(objects)
    assert (job["completionMode"], job["completions"], job["parallelism"]) == ("Indexed", 4, 4)  # rank: the completion index
    assert jobset_spec(objects)["network"] == {"enableDNSHostnames": True}
    [container] = job["template"]["spec"]["containers"]
    assert container["command"] == [
        "hacfg", "agent", "--config", "/etc/hacfg/ha.yaml", "--rdzv-endpoint", "llama-pretrain-node-0-0.llama-pretrain:29401",
        "--", "/bin/sh", "-c", "bash run.sh",
    ]  # node 0's stable hostname: <jobset>-<replicated job>-<job index>-<pod index>.<subdomain, the jobset's name>
    env = {e["name"]: e for e in container["env"]}
    assert env["HACFG_GROUP_SECRET"]["valueFrom"] == {"secretKeyRef": {"name": "llama-pretrain-hacfg-group", "key": "secret", "optional": True}}
    assert env["HACFG_JOB_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/jobset-uid']"}}
    assert "kubectl create secret generic llama-pretrain-hacfg-group" in result.err


@pytest.mark.parametrize("target", TARGETS)
def test_the_pod_gets_the_same_intent_without_the_preset(cli, tmp_path, target):
    objects, _ = build(cli, target, LLAMA)
    delivered = tmp_path / "ha.yaml"
    delivered.write_text(objects[0]["data"]["ha.yaml"])
    assert load_config(delivered, presets()).config == without_environment(load_config(LLAMA, presets()).config)


def without_environment(config):
    """The intent, without job.environment: the containers' env carries it, never the ConfigMap."""
    return dataclasses.replace(config, job=dataclasses.replace(config.job, environment={}))


def test_the_trainjob_runs_on_the_runtime_written_beside_it(cli):
    objects, _ = build(cli, "trainjob", LLAMA)
    _, runtime, train_job = objects
    assert train_job["spec"] == {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": "llama-pretrain"}}
    assert runtime["metadata"]["name"] == "llama-pretrain" and runtime["spec"]["mlPolicy"] == {"numNodes": 4, "torch": {}}
    jobset, _ = build(cli, "jobset", LLAMA)
    replicated = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    assert replicated.pop("template")["metadata"] == {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}}
    assert jobset_spec(objects) | {"replicatedJobs": []} == jobset[1]["spec"] | {"replicatedJobs": []}


def test_a_trainjob_on_an_existing_runtime_carries_the_agent_and_the_scenario(cli, write):
    objects, result = build(cli, "trainjob", write("ha.yaml", SCENARIOS["runtime"]))
    config_map, train_job = objects
    spec = train_job["spec"]
    assert spec["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": "torch-distributed"}
    trainer = spec["trainer"]
    assert trainer["command"][:2] == ["hacfg", "agent"] and trainer["numNodes"] == 2
    assert trainer["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": 8}, "requests": {"nvidia.com/gpu": 8}}
    [patch] = spec["runtimePatches"]
    pod = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["volumes"] == [
        {"name": "hacfg-config", "configMap": {"name": config_map["metadata"]["name"]}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}},
    ]
    assert "ClusterTrainingRuntime 'torch-distributed' decides the restarts" in result.err
    assert "pod_reschedules" not in result.err and "maxRestarts" not in json.dumps(objects)  # the runtime's to say


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("job", "what"), [("{image: org/train:1.0}", "no command: set job.command"), ("{command: python train.py}", "no image: set job.image (an image with hacfg installed)")])
def test_a_job_without_image_or_command_is_refused_in_one_line(cli, write, target, job, what):
    path = write("ha.yaml", f"version: 1\nscenario: single-node\njob: {job}\n")
    result = cli("build", "--target", target, path)
    assert (result.code, result.out) == (2, "")
    assert result.err == f"{path}:3:6: the {target} job is incomplete: {what}\n"


@pytest.mark.parametrize("target", [*TARGETS, "volcano"])
@pytest.mark.parametrize(
    ("name", "offered"),
    [("a" * 46, "a" * 45), ("job9_", "job9"), ("9job", "job-9job"), ("7b-pretrain", "job-7b-pretrain"), ("_job", "job"), ("Pretrain-", "pretrain")],
)
def test_a_name_kubernetes_refuses_is_one_line_at_job_name_with_the_rule_and_a_name_that_would_do(cli, write, target, name, offered):
    """A JobSet's pods are named NAME-node-0-INDEX-xxxxx within 63 characters, Volcano's hostnames NAME-worker-INDEX;
    TrainJob names, and the Services of JobSet and Volcano, begin with a letter."""
    path = write("ha.yaml", f"version: 1\nscenario: single-node\njob: {{name: {name}, image: org/x:1, command: x}}\n")
    result = cli("build", "--target", target, path)
    assert (result.code, result.out) == (2, "")
    rule = "a Kubernetes name takes lower case letters, digits and '-', begins with a letter, ends with a letter or digit, and has at most 45 characters"
    assert result.err == f"{path}:3:13: job.name {name!r}: {rule}; {offered!r} would do\n"
    fixed = write("fixed.yaml", f"version: 1\nscenario: single-node\njob: {{name: {offered}, image: org/x:1, command: x}}\n")
    assert cli("build", "--target", target, fixed).code == 0  # the name offered is taken


@pytest.mark.parametrize("target", TARGETS)
def test_the_output_is_deterministic(cli, target):
    first, _ = build(cli, target, LLAMA)
    again, _ = build(cli, target, LLAMA)
    assert first == again


CLAIMED = "version: 1\nscenario: multi-node\njob: {name: t, nodes: 2, image: img, command: python train.py}\ncheckpoint: {path: /mnt/ckpt, resume: true}\nrestart: {max: 4}\nkubernetes: {checkpoint_claim: llama-ckpt%s}\n"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("strategy", ["", ", restart_strategy: InPlaceRestart, service_account: jobset-in-place-restart"])
def test_hacfg_lint_of_the_output_is_clean(cli, write, tmp_path, target, strategy):
    out = tmp_path / f"{target}.yaml"
    assert cli("build", "--target", target, write("ha.yaml", CLAIMED % strategy), "-o", out).code == 0
    result = cli("lint", "-f", "json", out)
    report = json.loads(result.out)
    assert (result.code, report["findings"], report["summary"]["files"]) == (0, [], 1)  # linted, and clean


@pytest.mark.parametrize("target", TARGETS)
def test_the_checkpoint_claim_is_mounted_at_the_checkpoint_path(cli, write, target):
    objects, result = build(cli, target, write("ha.yaml", CLAIMED % ""))
    pod = job_spec(objects)["template"]["spec"]
    assert pod["volumes"][2] == {"name": "checkpoint", "persistentVolumeClaim": {"claimName": "llama-ckpt"}}
    assert pod["containers"][0]["volumeMounts"][2] == {"name": "checkpoint", "mountPath": "/mnt/ckpt"}
    assert "mount shared storage" not in result.err


@pytest.mark.parametrize("target", TARGETS)
def test_without_a_claim_lint_says_what_the_build_noted(cli, tmp_path, target):
    out = tmp_path / f"{target}.yaml"
    built = cli("build", "--target", target, LLAMA, "-o", out)
    assert "mount shared storage at /mnt/sfs/llama/ckpt (checkpoint.path) in every pod" in built.err
    assert findings(cli, out, keys=("rule", "logical_path")) == {("HA032", f"{jobset_path(target)}.replicatedJobs[0].template.spec.template.spec.containers[0].name")}


def jobset_path(target):
    return {"jobset": "spec", "trainjob": "spec.template.spec"}[target]


def test_training_manifests_are_found_by_content(cli, tmp_path):
    (tmp_path / "pretrain.yaml").write_text((REPO / "tests/data/rules/HA033/fires.yaml").read_text())
    (tmp_path / "web.yaml").write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 1}\n")
    assert findings(cli, tmp_path, keys="path") == {str(tmp_path / "pretrain.yaml")}  # the Deployment is not read
    assert "HA033" in findings(cli, tmp_path, keys="rule")
    named = cli("lint", tmp_path / "web.yaml")
    assert "web.yaml: not a scenario file or a ModelArts request body; skipped" in named.err


def test_a_restart_strategy_on_an_existing_runtime_is_refused(cli, write):
    """The runtime's failure policy decides: an InPlaceRestart of the scenario's would silently not happen."""
    path = write("ha.yaml", SCENARIOS["runtime"].replace("{runtime: torch-distributed}", "{runtime: torch-distributed, restart_strategy: BlockingRecreate}"))
    result = cli("build", "--target", "trainjob", path)
    assert (result.code, result.out) == (2, "")
    assert result.err == f"{path}:3:6: the trainjob job is incomplete: kubernetes.restart_strategy is runtime 'torch-distributed''s to set\n"


def test_volcano_mounts_the_checkpoint_claim_too(cli, write):
    """The pod is built in one place for every Kubernetes target."""
    objects, _ = build(cli, "volcano", write("ha.yaml", CLAIMED % ""))
    pod = objects[1]["spec"]["tasks"][0]["template"]["spec"]
    assert pod["volumes"][2] == {"name": "checkpoint", "persistentVolumeClaim": {"claimName": "llama-ckpt"}}
    assert pod["containers"][0]["volumeMounts"][2] == {"name": "checkpoint", "mountPath": "/mnt/ckpt"}


ALL_TARGETS = (*TARGETS, "volcano")


def pod_of(objects):
    """The pod template of any Kubernetes target's output (a TrainJob's is its TrainingRuntime's)."""
    for o in objects:
        if o["kind"] == "Job":
            return o["spec"]["tasks"][0]["template"]["spec"]
    return job_spec(objects)["template"]["spec"]


def runnable(write, job="", extra=""):
    return write("ha.yaml", f"version: 1\nscenario: multi-node\njob: {{name: t, nodes: 2, image: img, command: python train.py{job}}}\nrestart: {{max: 3}}\n{extra}")


@pytest.mark.parametrize("target", ALL_TARGETS)
@pytest.mark.parametrize(
    ("job", "extra", "devices"),
    [
        (", flavor: modelarts.pool.visual.8xlarge", "", {"nvidia.com/gpu": 8}),
        (", accelerator: npu, flavor: modelarts.pool.visual.npu.8snt9b3.d", "", {"huawei.com/Ascend910": 8}),
        (", accelerator: npu, flavor: modelarts.bm.npu.arm.4snt9b1", "", {"huawei.com/Ascend910": 4}),
        (", accelerator: npu, flavor: modelarts.pool.visual.16xlarge", "", {"huawei.com/Ascend910": 16}),
        (", cards: 4", "", {"nvidia.com/gpu": 4}),  # no flavor: the scenario says
        (", accelerator: npu, cards: 2", "kubernetes: {device_resource: huawei.com/Ascend310P}\n", {"huawei.com/Ascend310P": 2}),
        (", flavor: modelarts.pool.visual.8xlarge, cards: 2", "", {"nvidia.com/gpu": 2}),  # job.cards wins
    ],
)
def test_each_node_requests_its_cards_from_the_device_plugin_requests_equal_to_limits(cli, write, target, job, extra, devices):
    objects, result = build(cli, target, runnable(write, job, extra))
    [container] = pod_of(objects)["containers"]
    assert container["resources"] == {"limits": devices, "requests": devices}  # the Ascend device plugin needs both
    assert "no card count" not in result.err


@pytest.mark.parametrize("target", ALL_TARGETS)
def test_without_a_card_count_the_build_says_which_key_gives_one(cli, write, target):
    objects, result = build(cli, target, runnable(write, ", flavor: modelarts.vm.gpu.v100"))
    assert "resources" not in pod_of(objects)["containers"][0]
    assert "no card count for flavor 'modelarts.vm.gpu.v100': set job.cards, the nvidia.com/gpu each node requests" in result.err


@pytest.mark.parametrize("target", ALL_TARGETS)
@pytest.mark.parametrize(
    ("line", "at", "says"),
    [
        ("job: {name: t, image: img, command: x, cards: -1}", "3:47", "job.cards: Input should be greater than or equal to 0"),
        ("job: {name: t, image: img, command: x, cards: 2.5}", "3:47", "job.cards: Input should be a valid integer"),
        ("job: {name: t, image: img, command: x, cards: '8'}", "3:47", "job.cards: Input should be a valid integer"),
        ("kubernetes: {device_resource: nvidia.com/mig-1g.5gb}", "3:31", "kubernetes.device_resource: Input should be 'nvidia.com/gpu', 'huawei.com/Ascend910', 'huawei.com/Ascend310P' or 'huawei.com/Ascend310'"),
        ("kubernetes: {secrets: {WANDB_API_KEY: {name: wandb}}}", "3:39", "missing required key 'kubernetes.secrets.WANDB_API_KEY.key'"),
        ("kubernetes: {shm_size: 512Mi}", "3:24", "kubernetes.shm_size: the agent's pre-check needs more than 1Gi at /dev/shm (disk-size shm), got 512Mi"),
        ("kubernetes: {shm_size: lots}", "3:24", "kubernetes.shm_size: String should match pattern"),
    ],
)
def test_bad_kubernetes_input_is_one_line_at_its_place_and_exit_2(cli, write, target, line, at, says):
    path = write("ha.yaml", f"version: 1\nscenario: single-node\n{line}\n")
    result = cli("build", "--target", target, path)
    assert (result.code, result.out) == (2, "")
    [error] = result.err.splitlines()
    assert error.startswith(f"{path}:{at}: {says}"), error


@pytest.mark.parametrize("target", ALL_TARGETS)
def test_every_pod_mounts_memory_at_dev_shm_sized_from_the_scenario(cli, write, target):
    objects, _ = build(cli, target, runnable(write))
    pod = pod_of(objects)
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}} in pod["volumes"]  # above the pre-check's 1Gi
    assert {"name": "dshm", "mountPath": "/dev/shm"} in pod["containers"][0]["volumeMounts"]
    objects, _ = build(cli, target, runnable(write, extra="kubernetes: {shm_size: 64Gi}\n"))
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}} in pod_of(objects)["volumes"]


@pytest.mark.parametrize(("target", "node0", "rank"), [
    ("jobset", "t-node-0-0.t", "metadata.annotations['batch.kubernetes.io/job-completion-index']"),
    ("trainjob", "t-node-0-0.t", "metadata.annotations['batch.kubernetes.io/job-completion-index']"),
    ("volcano", "t-worker-0.t", "metadata.annotations['volcano.sh/task-index']"),
])
def test_the_launcher_finds_its_peers_and_the_agent_another_port(cli, write, target, node0, rank):
    """As JobSet's PyTorch example (MASTER_ADDR node 0's hostname, the rank from the completion index) and Volcano's
    pytorch plugin (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK) set them; the agent's group is not on MASTER_PORT,
    nor on torchrun's c10d port 29400."""
    objects, _ = build(cli, target, runnable(write))
    [container] = pod_of(objects)["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    index = {"fieldRef": {"fieldPath": rank}}
    assert {key: env[key] for key in ("MASTER_ADDR", "MASTER_PORT", "NNODES", "WORLD_SIZE", "NODE_RANK", "RANK")} == {
        "MASTER_ADDR": node0, "MASTER_PORT": "29500", "NNODES": "2", "WORLD_SIZE": "2", "NODE_RANK": index, "RANK": index,
    }
    endpoint = container["command"][container["command"].index("--rdzv-endpoint") + 1]
    assert endpoint == f"{node0}:29401"


def test_the_training_runtime_has_trainer_hand_torchrun_its_variables(cli, write):
    """mlPolicy.torch: Kubeflow Trainer's torch plugin sets PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR (NAME-node-0-0.NAME)
    and PET_MASTER_PORT (29500) in the container named node, which torchrun reads as its flags."""
    objects, _ = build(cli, "trainjob", runnable(write))
    runtime = next(o for o in objects if o["kind"] == "TrainingRuntime")
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 2, "torch": {}}
    assert pod_of(objects)["containers"][0]["name"] == "node"


SECRETS = (
    "version: 1\nscenario: multi-node\n"
    "job: {name: t, nodes: 2, image: img, command: python train.py,\n"
    "      environment: {NCCL_DEBUG: INFO, WANDB_API_KEY: wandb-literal-0123, HUAWEICLOUD_SDK_SK: sk-literal-4567, HACFG_GROUP_SECRET: group-literal-89}}\n"
    "restart: {max: 3}\n"
    "kubernetes: {secrets: {HF_TOKEN: {name: hf, key: token}}}\n"
)


@pytest.mark.parametrize("target", ALL_TARGETS)
def test_secrets_are_read_from_secrets_and_never_printed(cli, write, target):
    objects, result = build(cli, target, write("ha.yaml", SECRETS))
    for literal in ("wandb-literal-0123", "sk-literal-4567", "group-literal-89"):
        assert literal not in result.out
    assert "NCCL_DEBUG" not in objects[0]["data"]["ha.yaml"]  # the ConfigMap carries no job.environment
    env = pod_of(objects)["containers"][0]["env"]
    by_name = {e["name"]: e for e in env}
    assert by_name["NCCL_DEBUG"] == {"name": "NCCL_DEBUG", "value": "INFO"}
    assert by_name["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    for key in ("WANDB_API_KEY", "HUAWEICLOUD_SDK_SK", "HACFG_GROUP_SECRET"):
        assert by_name[key]["valueFrom"] == {"secretKeyRef": {"name": "t-env", "key": key}}
        assert f"job.environment {key} looks like a secret: the pods read it from Secret 't-env'" in result.err
    assert [e["name"] for e in env].count("HACFG_GROUP_SECRET") == 1  # once: the user's, not also the optional one
    delivered = write("delivered.yaml", objects[0]["data"]["ha.yaml"])
    assert load_config(delivered, presets()).config.kubernetes.secrets["HF_TOKEN"].key == "token"  # what hacfg writes, it reads


def test_a_modelarts_request_refuses_a_secret_it_could_only_write_in_clear(cli, write):
    """A request body has no reference to a secret: the value would be printed, and its lint would flag it."""
    complete = SECRETS.replace("image: img,", "image: img, pool: pool-1,")
    result = cli("build", str(write("ha.yaml", complete)))
    assert result.code == 2 and "literal" not in result.out + result.err
    first = result.err.splitlines()[0]
    assert "ha.yaml:4:54: job.environment WANDB_API_KEY looks like a secret, and a ModelArts job request" in first
    plain = complete.replace("WANDB_API_KEY: wandb-literal-0123, HUAWEICLOUD_SDK_SK: sk-literal-4567, ", "")
    assert cli("build", str(write("plain.yaml", plain.replace("HACFG_GROUP_SECRET: group-literal-89", "A: b")))).code == 0


SCHEMA_FILES = {"jobset": "jobset.schema.json", "trainjob": "trainjob.schema.json", "volcano": "volcano-job.schema.json"}


@pytest.mark.parametrize(("target", "label"), [("jobset", "jobset.sigs.k8s.io/jobset-name"), ("trainjob", "jobset.sigs.k8s.io/jobset-name"), ("volcano", "volcano.sh/job-name")])
def test_a_network_policy_admits_the_group_and_master_ports_only_from_the_jobs_own_pods(cli, write, target, label):
    from jsonschema import Draft202012Validator

    objects, _ = build(cli, target, runnable(write, extra="kubernetes: {network_policy: true}\n"))
    policy = objects[-1]
    assert (policy["kind"], policy["metadata"]["name"]) == ("NetworkPolicy", "t")
    own = {"podSelector": {"matchLabels": {label: "t"}}}  # the label each controller puts on the job's pods
    assert policy["spec"]["podSelector"] == own["podSelector"] and policy["spec"]["policyTypes"] == ["Ingress"]
    ours, anyone = policy["spec"]["ingress"]
    assert ours == {"from": [own]}  # every port, from the job's own pods
    tcp = [(p["port"], p["endPort"]) for p in anyone["ports"] if p["protocol"] == "TCP"]
    assert tcp == [(1, 29400), (29402, 29499), (29501, 65535)]  # anyone else: all but the group's 29401 and MASTER_PORT 29500
    assert {"protocol": "UDP"} in anyone["ports"] and "from" not in anyone
    schema = json.loads((REPO / "schemas" / SCHEMA_FILES[target]).read_text())
    document = {"apiVersion": "v1", "kind": "List", "items": objects}
    assert not list(Draft202012Validator(schema).iter_errors(document))
    assert "NetworkPolicy" not in json.dumps(build(cli, target, runnable(write))[0])  # only when asked


@pytest.mark.parametrize("target", ALL_TARGETS)
def test_the_torchrun_example_of_the_docs_builds_for_every_target_and_lints_clean(cli, tmp_path, target):
    """docs/kubernetes.md's one scenario: the same command on every target, its variables in every pod."""
    text = (REPO / "docs/kubernetes.md").read_text()
    [example] = [block for block in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL) if block.startswith("# ha.yaml")]
    (tmp_path / "ha.yaml").write_text(example)
    objects, result = build(cli, target, tmp_path / "ha.yaml")
    [container] = pod_of(objects)["containers"]
    assert container["command"][-1].startswith("torchrun --nnodes $NNODES --node-rank $NODE_RANK --nproc-per-node 8")
    assert {"NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "WANDB_API_KEY"} <= {e["name"] for e in container["env"]}
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}
    if target != "volcano":  # lint reads JobSet and Trainer manifests
        out = tmp_path / "out.yaml"
        out.write_text(result.out)
        assert findings(cli, out) == []
