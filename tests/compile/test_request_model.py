"""Request bodies as the ModelArts SDK's request and response models describe them (the schema is generated
from them): unknown keys, environments as a fetched job lists them, what only a fetched job has, flavors,
and the constraints the SDK's docstrings state. Each case is a user's input."""

from __future__ import annotations

import json

import pytest
from kit.cli import findings

JOB = "{image: org/train:1.0, command: bash run.sh, flavor: modelarts.vm.gpu.t4u8}"
CHECKPOINT = "{path: /mnt/sfs/ckpt, interval: 30m, resume: true}"


def scenario(write, passthrough: str = "", **job: str):
    fields = ", ".join(f"{key}: {value}" for key, value in {"image": "org/train:1.0", "command": "bash run.sh", **job}.items())
    text = f"version: 1\nscenario: single-node\njob: {{{fields}}}\ncheckpoint: {CHECKPOINT}\n"
    return write("ha.yaml", text + (f"passthrough:\n{passthrough}" if passthrough else ""))


@pytest.mark.parametrize("flavor", ["modelarts.pool.visual.8xlarge", "modelarts.pool.visual.16xlarge"])
def test_operator_retry_on_an_ascend_dedicated_pool_flavor_is_not_refused_in_the_body_built(cli, write, flavor):
    """The SDK lists modelarts.pool.visual.* for GPU and Ascend dedicated pools: the flavor alone is no GPU."""
    ha = scenario(write, accelerator="npu", flavor=flavor, pool="pool-1234")
    ha.write_text(ha.read_text() + "operator_retry: true\n")
    assert "HA010" not in findings(cli, ha, keys="rule")
    body = write("job.json", cli("build", ha).out)
    assert "HA010" not in findings(cli, body, keys="rule")


def test_operator_retry_on_a_gpu_flavor_is_refused_in_a_body(cli, write):
    body = write("job.json", json.dumps({
        "kind": "job", "metadata": {"name": "j", "annotations": {"fault-tolerance/hccl_op_retry": "true"}},
        "spec": {"resource": {"flavor_id": "modelarts.vm.gpu.t4u8", "node_count": 1}}}))
    assert "HA010" in findings(cli, body, keys="rule")


# algorithm.environments as print(show_training_job_details(...)) shows them: the SDK's list of one-pair objects.
FETCHED = {
    "kind": "job",
    "metadata": {"name": "llama-pretrain", "id": "3c0d8a1e-0f2c-4b8e-9a55-1f0c2d3e4f5a", "create_time": 1764590000000,
                 "user_name": "alice", "annotations": {"fault-tolerance/job-retry-num": "3", "fault-tolerance/hang-retry": "true"}},
    "status": {"phase": "Running", "duration": 120000},
    "algorithm": {"engine": {"image_url": "org/train:1.0"}, "command": "bash run.sh",
                  "environments": [{"MA_HANG_DETECT_TIME": "5"}, {"NCCL_DEBUG": "INFO"}]},
    "spec": {"resource": {"flavor_id": "modelarts.vm.gpu.t4u8", "flavor_name": "GPU: 1*NVIDIA-T4(16GB)", "node_count": 1},
             "volumes": [{"nfs": {"nfs_server_path": "192.168.0.82:/", "local_path": "/mnt/sfs", "read_only": False}}]},
}


def test_environments_as_a_list_of_pairs_are_judged_as_the_mapping(cli, write):
    as_list = write("list.json", json.dumps(FETCHED))
    as_mapping = write("mapping.json", json.dumps({**FETCHED, "algorithm": {
        **FETCHED["algorithm"], "environments": {"MA_HANG_DETECT_TIME": "5", "NCCL_DEBUG": "INFO"}}}))
    listed = findings(cli, as_list, keys=("rule", "logical_path"))
    assert listed - {("HA103", "algorithm.environments")} == findings(cli, as_mapping, keys=("rule", "logical_path"))
    assert ("HA016", "algorithm.environments.MA_HANG_DETECT_TIME") in listed


def test_environments_as_a_list_are_fixed_into_the_mapping(cli, write):
    body = write("job.yaml", """
        kind: job
        metadata: {name: j}
        algorithm:
          environments:
            - MA_HANG_DETECT_TIME: "45"
            - {NCCL_DEBUG: INFO, NCCL_IB_HCA: mlx5}
        spec: {resource: {flavor_id: modelarts.vm.gpu.t4u8}}
        """)
    assert cli("fix", body).code == 0
    assert '  environments:\n    {"MA_HANG_DETECT_TIME": "45", "NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5"}\nspec:' in body.read_text()
    assert "HA103" not in findings(cli, body, keys="rule")


def test_a_fetched_job_is_adopted_and_built_as_a_create_request(cli, write, tmp_path):
    source = write("fetched.json", json.dumps(FETCHED))
    imported = tmp_path / "ha.yaml"
    result = cli("import", source, "-o", imported)
    assert result.code == 0, result.err
    text = imported.read_text()
    assert "timeout: 5m" in text  # not lost in the list
    for at in ("metadata.id", "metadata.create_time", "metadata.user_name", "status", "spec.resource.flavor_name"):
        assert result.err.count(f"note: {at}: left out") == 1
    built = cli("build", imported)
    assert built.code == 0, built.err
    body = json.loads(built.out)
    assert body["algorithm"]["environments"] == {"MA_HANG_DETECT_TIME": "5", "NCCL_DEBUG": "INFO"}
    assert "id" not in body["metadata"] and "status" not in body and "flavor_name" not in body["spec"]["resource"]


@pytest.mark.parametrize(("flavor", "hccl", "accelerator", "comment"), [
    ("modelarts.bm.npu.arm.8snt9b3.d", None, "npu", "from spec.resource.flavor_id"),
    ("modelarts.pool.visual.16xlarge", "true", "npu", "from spec.resource.flavor_id"),
    ("modelarts.pool.visual.8xlarge", "true", "npu", 'from metadata.annotations."fault-tolerance/hccl_op_retry" (operator retry runs on Ascend only)'),
    ("modelarts.vm.cpu.8u", None, "cpu", "from spec.resource.flavor_id"),
])  # fmt: skip
def test_import_says_which_accelerator_the_body_runs_on(cli, write, tmp_path, flavor, hccl, accelerator, comment):
    annotations = {"fault-tolerance/job-retry-num": "3"} | ({"fault-tolerance/hccl_op_retry": hccl} if hccl else {})
    source = write("job.json", json.dumps({
        "kind": "job", "metadata": {"name": "j", "annotations": annotations},
        "algorithm": {"engine": {"image_url": "org/train:1.0"}, "command": "bash run.sh"},
        "spec": {"resource": {"flavor_id": flavor, "pool_id": "pool-1", "node_count": 1}}}))
    imported = tmp_path / "ha.yaml"
    assert cli("import", source, "-o", imported).code == 0
    assert f"  accelerator: {accelerator}" in imported.read_text() and f"# {comment}\n" in imported.read_text()
    assert "HA010" not in findings(cli, imported, keys="rule")  # no advice to turn operator retry off


def test_import_then_build_adds_no_node_count(cli, write, tmp_path):
    source = write("job.json", json.dumps({
        "kind": "job", "metadata": {"name": "j"},
        "algorithm": {"engine": {"image_url": "org/train:1.0"}, "command": "bash run.sh"},
        "spec": {"resource": {"flavor_id": "modelarts.vm.gpu.t4u8"}}}))
    imported = tmp_path / "ha.yaml"
    assert cli("import", source, "-o", imported).code == 0
    built = cli("build", imported)
    assert built.code == 0, built.err
    body = json.loads(built.out)
    assert body["metadata"].pop("annotations") == {}  # the API reads an empty map as an absent one
    assert body == json.loads(source.read_text())


def test_misspelled_keys_under_passthrough_are_named_where_they_stand(cli, write):
    ha = scenario(write, "  algorithm:\n    enviroments: {NCCL_DEBUG: INFO}\n  spec:\n    volume:\n      - nfs: {nfs_server_path: '192.168.0.82:/', local_path: /mnt/sfs}\n",
                  flavor="modelarts.vm.gpu.t4u8")
    found = findings(cli, ha)
    assert {(f["rule"], f["line"], f["column"], f["message"].rpartition("; ")[2]) for f in found if f["rule"] == "HA101"} == {
        ("HA101", 7, 5, "did you mean 'environments'?"), ("HA101", 9, 5, "did you mean 'volumes'?")}
    built = cli("build", ha)
    assert (built.code, built.err.split(": modelarts")[0]) == (2, f"{ha}:7:5")
    assert cli("fix", ha).code == 0
    assert "    environments: {NCCL_DEBUG: INFO}\n  spec:\n    volumes:\n" in ha.read_text()
    assert cli("build", ha).code == 0


def test_a_preset_value_the_platform_refuses_is_reported_at_the_scenario_line(cli, write):
    ha = write("ha.yaml", f"version: 1\nscenario: llm-long-term\njob: {JOB}\ncheckpoint: {CHECKPOINT}\n")
    built = cli("build", "--platform", "otc", ha)
    assert built.code == 2
    assert built.err.startswith(f"{ha}:2:11: restart.max: otc allows 1 to 3 restarts") and "(inherited from llm-long-term.yaml)" in built.err


def test_a_preset_built_by_name_for_a_platform_it_exceeds_is_refused_at_the_command_with_what_to_write(cli, write):
    """Never a position inside the installed preset file, which the user cannot edit."""
    built = cli("build", "--platform", "otc", "--only", "annotations", "llm-long-term")
    assert built.code == 2 and built.out == ""
    assert built.err.splitlines() == [
        "llm-long-term: restart.max: otc allows 1 to 3 restarts (0 turns auto restart off), got 5 (the preset's own value;"
        " write a scenario file with 'extends: llm-long-term' that sets restart.max, and build that)"]
    advised = write("ha.yaml", "version: 1\nextends: llm-long-term\nrestart: {max: 3}\n")
    built = cli("build", "--platform", "otc", "--only", "annotations", advised)
    assert built.code == 0, built.err
    assert json.loads(built.out)["metadata"]["annotations"]["fault-tolerance/job-retry-num"] == "3"


@pytest.mark.parametrize(("passthrough", "where", "says"), [
    ("  spec: {schedule_policy: {priority: 5}}\n", "spec.schedule_policy.priority", "5 is greater than the maximum of 3"),
    ("  algorithm: {local_code_dir: /home/ma-user/modelarts/code}\n", "algorithm.local_code_dir", "does not match"),
    ("  algorithm: {local_code_dir: /opt/code}\n", "algorithm.local_code_dir", "does not match"),
    ("  spec: {volumes: [{nfs: {nfs_server_path: '1.2.3.4:/', local_path: /mnt, read_only: 'false'}}]}\n",
     "spec.volumes[0].nfs.read_only", "'false' is not of type 'boolean'"),
])  # fmt: skip
def test_what_the_sdk_docstrings_state_is_checked_at_build(cli, write, passthrough, where, says):
    ha = scenario(write, passthrough, flavor="modelarts.vm.gpu.t4u8")
    built = cli("build", ha)
    assert built.code == 2
    assert built.err.startswith(f"{ha}:6:") and f"modelarts output {where}: " in built.err and says in built.err


def test_a_value_the_sdk_does_not_document_is_a_lint_warning_and_is_built(cli, write):
    """The SDK lists the events but its client sends any: hacfg is no stricter, and lint names the nearest."""
    ha = scenario(write, "  spec: {notification: {topic_urn: 'urn:smn:x', events: [JobHung]}}\n", flavor="modelarts.vm.gpu.t4u8")
    found = [f for f in findings(cli, ha) if f["rule"] == "HA104"]
    assert [(f["severity"], f["line"], f["logical_path"]) for f in found] == [("warning", 6, "passthrough.spec.notification.events[0]")]
    assert "did you mean 'JobHanged'?" in found[0]["message"]
    built = cli("build", ha)
    assert built.code == 0, built.err
    assert json.loads(built.out)["spec"]["notification"]["events"] == ["JobHung"]


def test_a_code_dir_under_home_is_built(cli, write):
    ha = scenario(write, "  algorithm: {local_code_dir: /home/work/code}\n", flavor="modelarts.vm.gpu.t4u8")
    assert cli("build", ha).code == 0
