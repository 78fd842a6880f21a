"""The Volcano target: a Job that validates against Volcano's CRD, with policies from the same intent."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml
from kit.paths import REPO
from kit.schemas import volcano_job_schema as job_schema

from hacfg.plugin.provided import presets
from hacfg.scenario.config import load_config


def build(cli, path):
    result = cli("build", "--target", "volcano", path)
    assert result.code == 0, result.err
    config_map, job = yaml.safe_load_all(result.out)
    return config_map, job, result


def test_job_validates_against_the_volcano_crd(cli):
    from jsonschema import Draft202012Validator

    _, job, _ = build(cli, REPO / "examples/llama-pretrain/ha.yaml")
    assert [e.message for e in Draft202012Validator(job_schema()).iter_errors(job)] == []
    assert (job["apiVersion"], job["kind"]) == ("batch.volcano.sh/v1alpha1", "Job")


def test_shape_follows_the_scenario(cli):
    config_map, job, result = build(cli, REPO / "examples/llama-pretrain/ha.yaml")
    spec = job["spec"]
    assert (spec["schedulerName"], spec["minAvailable"], spec["maxRetry"]) == ("volcano", 4, 8)
    [task] = spec["tasks"]
    assert (task["name"], task["replicas"]) == ("worker", 4)
    pod = task["template"]["spec"]
    [container] = pod["containers"]
    node0 = "llama-pretrain-worker-0.llama-pretrain"  # the svc plugin's hostname: the pod's name, in the job's subdomain
    assert container["command"] == ["hacfg", "agent", "--config", "/etc/hacfg/ha.yaml", "--rdzv-endpoint", f"{node0}:29401", "--", "/bin/sh", "-c", "bash run.sh"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 8}, "requests": {"nvidia.com/gpu": 8}}  # an 8xlarge flavor has 8 cards
    secret = {"secretKeyRef": {"name": "llama-pretrain-hacfg-group", "key": "secret", "optional": True}}
    rank = {"fieldRef": {"fieldPath": "metadata.annotations['volcano.sh/task-index']"}}
    assert container["env"] == [
        {"name": "NCCL_DEBUG", "value": "INFO"},
        {"name": "MASTER_ADDR", "value": node0},
        {"name": "MASTER_PORT", "value": "29500"},
        {"name": "NNODES", "value": "4"},
        {"name": "WORLD_SIZE", "value": "4"},
        {"name": "NODE_RANK", "valueFrom": rank},
        {"name": "RANK", "valueFrom": rank},
        {"name": "HACFG_JOB_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['scheduling.k8s.io/group-name']"}}},
        {"name": "HACFG_GROUP_SECRET", "valueFrom": secret},
    ]  # the launcher's peers; the agent's counters are the job's: its PodGroup names it; the group's secret, if the Secret exists
    assert "kubectl create secret generic llama-pretrain-hacfg-group" in result.err
    assert pod["volumes"] == [
        {"name": "hacfg-config", "configMap": {"name": config_map["metadata"]["name"]}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}},
    ]
    assert pod["restartPolicy"] == "Never"
    assert "mount shared storage at /mnt/sfs/llama/ckpt" in result.err


def test_the_pod_gets_the_same_intent_without_the_preset(cli, tmp_path):
    config_map, _, _ = build(cli, REPO / "examples/llama-pretrain/ha.yaml")
    delivered = tmp_path / "ha.yaml"
    delivered.write_text(config_map["data"]["ha.yaml"])
    config = load_config(REPO / "examples/llama-pretrain/ha.yaml", presets()).config
    assert load_config(delivered, presets()).config == dataclasses.replace(config, job=dataclasses.replace(config.job, environment={}))


@pytest.mark.parametrize(("pod_reschedules", "action"), [(2, "RestartPod"), (0, "RestartJob")])
def test_exit_138_restarts_the_pod_or_the_job(cli, write, pod_reschedules, action):
    path = write("ha.yaml", f"version: 1\nscenario: multi-node\njob: {{name: t, image: img, command: python train.py}}\nrestart: {{max: 4, pod_reschedules: {pod_reschedules}}}\n")
    _, job, _ = build(cli, path)
    assert job["spec"]["policies"] == [
        {"exitCode": 138, "action": action},
        {"event": "PodEvicted", "action": "RestartJob"},
        {"event": "PodFailed", "action": "AbortJob"},
    ]
    assert job["spec"]["maxRetry"] == 4


def test_kubernetes_names_and_missing_pieces_are_reported(cli, write):
    path = write("ha.yaml", "version: 1\nscenario: single-node\njob: {name: My_Job, accelerator: npu, flavor: custom, command: python train.py, image: org/x:1}\n")
    config_map, job, result = build(cli, path)
    assert job["metadata"]["name"] == "my-job" and config_map["metadata"]["name"] == "my-job-hacfg"
    assert "no card count for flavor 'custom'" in result.err


def test_shipped_schema_embeds_the_crd_unchanged():
    shipped = json.loads((REPO / "schemas/volcano-job.schema.json").read_text())
    assert shipped["$defs"]["job"] == job_schema()


def test_a_job_with_no_command_is_refused(cli, write):
    """Otherwise the pod would run `/bin/sh -c true` and "succeed" doing nothing."""
    path = write("ha.yaml", "version: 1\nscenario: single-node\njob:\n  image: org/train:1.0\n")
    result = cli("build", "--target", "volcano", path)
    assert (result.code, result.out) == (2, "")
    assert result.err == f"{path}:4:3: the volcano job is incomplete: no command: set job.command\n"


