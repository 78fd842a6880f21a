"""The ModelArts target: Table 4 exactly, only real platform keys, and a body that validates."""

from __future__ import annotations

import json

import pytest
from kit.cli import run_hacfg
from kit.packaging import imported_modules
from kit.paths import REPO

# What every full build needs besides fault tolerance: something to run, somewhere to run it.
RUNNABLE = "{image: org/train:1.0, command: bash run.sh, flavor: modelarts.pool.visual.xlarge}"

# The seed's Table 4 ("Common configuration combinations"). Its long-term row shows
# pod-retry-num as a bare 3; the platform takes Map<String,String>, so the right value is "3".
TABLE_4 = {
    "single-node": {"fault-tolerance/job-retry-num": "2"},
    "multi-node": {
        "fault-tolerance/job-retry-num": "3",
        "fault-tolerance/job-unconditional-retry": "true",
        "fault-tolerance/hang-retry": "true",
    },
    "llm-long-term": {
        "fault-tolerance/job-retry-num": "5",
        "fault-tolerance/job-unconditional-retry": "true",
        "fault-tolerance/hang-retry": "true",
        "fault-tolerance/pod-retry-num": "3",
    },
}


@pytest.mark.parametrize("scenario", sorted(TABLE_4))
def test_presets_print_table_4_byte_for_byte(cli, scenario):
    result = cli("build", "--only", "annotations", REPO / "presets" / f"{scenario}.yaml")
    assert result.code == 0, result.err
    expected = json.dumps({"metadata": {"annotations": TABLE_4[scenario]}}, indent=2) + "\n"
    assert result.out == expected
    assert result.err == ""


def test_a_preset_name_builds_too(cli):
    assert (
        cli("build", "--only", "annotations", "multi-node").out
        == cli("build", "--only", "annotations", REPO / "presets/multi-node.yaml").out
    )


def test_full_body_of_the_example(cli, tmp_path):
    result = cli("build", REPO / "examples/llama-pretrain/ha.yaml")
    assert result.code == 0, result.err
    body = json.loads(result.out)
    assert body == {
        "kind": "job",
        "metadata": {
            "name": "llama-pretrain",
            "annotations": {
                "fault-tolerance/job-retry-num": "8",
                "fault-tolerance/job-unconditional-retry": "true",
                "fault-tolerance/hang-retry": "true",
                "fault-tolerance/pod-retry-num": "2",
            },
        },
        "algorithm": {
            "engine": {"image_url": "org/train:1.0"},
            "command": "bash run.sh",
            "environments": {"NCCL_DEBUG": "INFO", "MA_HANG_DETECT_TIME": "45"},
        },
        "spec": {
            "resource": {"flavor_id": "modelarts.pool.visual.8xlarge", "node_count": 4, "pool_id": "pool-1234"},
            "volumes": [{"nfs": {"nfs_server_path": "192.168.0.82:/", "local_path": "/mnt/sfs", "read_only": False}}],
        },
    }
    (tmp_path / "job.json").write_text(result.out)
    assert cli("lint", tmp_path / "job.json").out == ""  # what it builds, it accepts


@pytest.mark.slow
@pytest.mark.parametrize("target", ["modelarts", "volcano"])
def test_output_is_deterministic(target):
    """Byte for byte, in processes whose string hashing (so set and dict-of-set order) differs."""
    outputs = {
        run_hacfg(
            "build", "--target", target, REPO / "examples/llama-pretrain/ha.yaml", env={"PYTHONHASHSEED": seed}
        ).out
        for seed in ("1", "2")
    }
    assert len(outputs) == 1 and outputs != {""}


def test_platform_variables_and_notes(cli, write):
    path = write(
        "ha.yaml",
        """
        version: 1
        scenario: single-node
        job: {name: cpu-job, image: org/train:1.0, command: bash run.sh, pool: pool-cpu}
        hang: {detect: false, timeout: 90s}
        precheck: false
    """,
    )
    result = cli("build", path)
    body = json.loads(result.out)
    assert body["algorithm"]["environments"] == {"MA_DETECT_TRAIN_INJECT_CODE": "0"}
    assert "hang.detect: false has no platform key" in result.err


def test_hang_timeout_is_rounded_up_to_whole_minutes(cli, write):
    path = write("ha.yaml", f"version: 1\nscenario: single-node\njob: {RUNNABLE}\nhang: {{timeout: 90s}}\n")
    result = cli("build", path)
    assert json.loads(result.out)["algorithm"]["environments"] == {"MA_HANG_DETECT_TIME": "2"}
    assert "hacfg: note: hang.timeout 1m30s rounded up to 2m" in result.err


def test_no_key_is_invented_for_intents_the_platform_lacks(cli, write):
    path = write("ha.yaml", "version: 1\nscenario: single-node\nrestart: {max: 0, on_hang: true}\n")
    result = cli("build", "--only", "annotations", path)
    assert json.loads(result.out) == {"metadata": {"annotations": {}}}  # 0 = off, hang restart with it
    assert "take effect only with restart.max >= 1" in result.err
    assert "pre-check only with auto restart" in result.err


def test_into_keeps_every_other_field(cli, tmp_path):
    body = {
        "kind": "job",
        "metadata": {
            "name": "existing-name",
            "description": "kept",
            "annotations": {"jupyter-lab/enable": "true", "fault-tolerance/hang-retry": "true"},
        },
        "algorithm": {
            "code_dir": "obs://b/code/",
            "boot_file": "obs://b/code/train.py",
            "environments": {"KEEP": "1", "MA_HANG_DETECT_TIME": "5"},
        },
        "spec": {"resource": {"flavor_id": "f", "node_count": 1}, "log_export_path": {"obs_url": "/bucket/logs/"}},
    }
    job = tmp_path / "job.json"
    job.write_text(json.dumps(body))
    result = cli("build", "--into", job, "single-node")
    assert result.code == 0, result.err
    merged = json.loads(job.read_text())
    assert merged["metadata"] == {
        "name": "existing-name",  # the preset names no job: the body's own name stays
        "description": "kept",
        "annotations": {"jupyter-lab/enable": "true", "fault-tolerance/job-retry-num": "2"},
    }
    assert merged["algorithm"] == {
        "code_dir": "obs://b/code/",
        "boot_file": "obs://b/code/train.py",
        "environments": {"KEEP": "1"},
    }
    assert merged["spec"] == {
        "resource": {"flavor_id": "f", "node_count": 1},
        "log_export_path": {"obs_url": "/bucket/logs/"},
    }


def test_into_with_output_leaves_the_original_alone(cli, tmp_path):
    job = tmp_path / "job.json"
    job.write_text('{"kind": "job", "metadata": {"name": "x"}}')
    out = tmp_path / "out.json"
    assert cli("build", "--into", job, "-o", out, "--only", "annotations", "multi-node").code == 0
    assert job.read_text() == '{"kind": "job", "metadata": {"name": "x"}}'
    assert json.loads(out.read_text())["metadata"]["annotations"]["fault-tolerance/job-retry-num"] == "3"


def test_schema_errors_point_at_the_scenario_line(cli, write):
    path = write(
        "ha.yaml",
        """
        version: 1
        scenario: single-node
        job:
          environment:
            GOOD: ok
            BAD: "$HOME/x"
    """,
    )
    result = cli("build", path)
    assert result.code == 2
    assert result.out == ""
    assert result.err.startswith(f"{path}:6:10: modelarts output algorithm.environments.BAD: '$HOME/x' does not match")


def test_failed_build_leaves_no_output_file(cli, write, tmp_path):
    path = write("ha.yaml", "version: 1\nscenario: single-node\njob: {environment: {BAD: $x}}\n")
    out = tmp_path / "out.json"
    assert cli("build", path, "-o", out).code == 2
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["ha.yaml"]


def test_unknown_target_and_part(cli):
    assert "unknown target 'modelart'; did you mean 'modelarts'?" in cli("build", "-t", "modelart", "single-node").err
    assert "has no such part" in cli("build", "--only", "spec", "single-node").err


def test_a_body_the_api_would_refuse_is_an_error_naming_what_is_missing(cli, write):
    path = write("ha.yaml", "version: 1\nscenario: multi-node\njob:\n  name: x\n")
    result = cli("build", path)
    assert (result.code, result.out) == (2, "")
    assert result.err == (
        f"{path}:4:3: the modelarts job is incomplete: no algorithm source: set job.image and job.command, or passthrough.algorithm.id; "
        "no flavor or pool: set job.flavor or job.pool (--only annotations builds just that part)\n"
    )
    write("image-only.yaml", "version: 1\nscenario: multi-node\njob: {image: org/train:1.0, pool: p}\n")
    assert "no algorithm source" in cli("build", path.parent / "image-only.yaml").err  # an image needs its command
    assert cli("build", "--only", "annotations", path).code == 0


@pytest.mark.parametrize(
    "job",
    [
        "job: {image: org/train:1.0, command: bash run.sh, flavor: modelarts.pool.visual.xlarge}",
        "job: {pool: pool-cpu}\npassthrough: {algorithm: {id: 2d2b3cc0-algorithm}}",
        "job: {flavor: f}\npassthrough: {algorithm: {code_dir: obs://b/code/, boot_file: obs://b/code/train.py}}",
        "job: {flavor: f}\npassthrough: {algorithm: {subscription_id: s, item_version_id: v}}",
    ],
    ids=["custom-image", "algorithm-id", "code-dir", "subscription"],
)
def test_every_algorithm_source_the_api_accepts_builds(cli, write, job):
    path = write("ha.yaml", f"version: 1\nscenario: single-node\n{job}\n")
    result = cli("build", path)
    assert result.code == 0, result.err


def test_into_counts_what_the_existing_body_has(cli, write, tmp_path):
    path = write("ha.yaml", "version: 1\nscenario: single-node\n")
    complete = tmp_path / "complete.json"
    complete.write_text(
        '{"kind": "job", "metadata": {"name": "x"}, "algorithm": {"id": "a"}, "spec": {"resource": {"pool_id": "p"}}}'
    )
    assert cli("build", path, "--into", complete).code == 0
    bare = tmp_path / "bare.json"
    bare.write_text('{"kind": "job", "metadata": {"name": "x"}}')
    result = cli("build", path, "--into", bare)
    assert result.code == 2 and "no algorithm source" in result.err
    assert bare.read_text() == '{"kind": "job", "metadata": {"name": "x"}}'
    assert cli("build", path, "--into", bare, "--only", "annotations").code == 0


def test_into_keeps_the_bodys_node_count_unless_the_file_states_one(cli, write, tmp_path):
    body = tmp_path / "job.json"
    body.write_text('{"kind": "job", "metadata": {"name": "x"}, "algorithm": {"id": "a"}, "spec": {"resource": {"pool_id": "p", "node_count": 4}}}')
    preset_only = write("a.yaml", "version: 1\nscenario: multi-node\n")  # the preset's 2 nodes must not shrink the job
    assert cli("build", preset_only, "--into", body, "-o", tmp_path / "out.json").code == 0
    assert json.loads((tmp_path / "out.json").read_text())["spec"]["resource"]["node_count"] == 4
    stated = write("b.yaml", "version: 1\nscenario: multi-node\njob: {nodes: 8}\n")
    assert cli("build", stated, "--into", body, "-o", tmp_path / "out.json").code == 0
    assert json.loads((tmp_path / "out.json").read_text())["spec"]["resource"]["node_count"] == 8


@pytest.mark.slow
def test_jsonschema_is_imported_only_to_explain_an_invalid_output(write):
    """It takes longer to import than the rest of a build; a valid output is decided without it."""
    for target in ("modelarts", "volcano"):
        assert not any(name.startswith("jsonschema") for name in imported_modules("build", "-t", target, "examples/llama-pretrain/ha.yaml"))
    path = write("ha.yaml", "version: 1\nscenario: single-node\njob: {environment: {BAD: $x}}\n")
    assert "jsonschema" in imported_modules("build", path)
