"""hacfg lint on JobSet's and Kubeflow Trainer's own example manifests, unchanged, as their users copy them.

Sources (Apache-2.0), copied byte for byte into tests/data/upstream/:
- jobset/: kubernetes-sigs/jobset at 08dfbdf, ``site/static/examples/<dir>/<file>`` (the file name is
  ``<dir>_<file>``, with ``/`` written as ``_``);
- trainer/: kubeflow/trainer at 8c0f505, ``examples/yaml/`` (the TrainJobs) and ``manifests/base/runtimes/``
  (the ClusterTrainingRuntimes);
- mindcluster/: Ascend/mind-cluster's example vcjob (see tests/test_mindcluster.py).

Each file gets exactly the findings below, as (rule, line): what it must get, and by equality, nothing it
must not. Why, where it is not plain:

- HA030 follows ``targetReplicatedJobs`` as JobSet's controller does (pkg/controllers/failure_policy.go,
  ``ruleIsApplicable``): in failjobset-action a leader pod's exit 138 fails the leader Job
  (BackoffLimitExceeded) and its FailJobSet rule ends the JobSet; where the rules restart, or target
  another replicated Job, it stays quiet.
- HA031 stays quiet on both in-place examples: the agent runs as an init sidecar whose startup probe waits
  on /barrier-is-down, or as the image's entrypoint, handed WORKER_COMMAND.
- host-maintenance-event-model has maxRestarts 0, yet restarts without limit on a disruption
  (RestartJobSetAndIgnoreMaxRestarts): its pods restart, so HA032 and HA033 speak.
- The PyTorch examples, the PVC example and Trainer's files restart nothing (no failure policy): quiet.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kit.cli import findings
from kit.paths import REPO

UPSTREAM = REPO / "tests/data/upstream"
# Every replicated Job of these restarts from step 0 in a pod with no durable volume: HA033 at its name,
# HA032 at its container's.
EXPECTED: dict[str, set[tuple[str, int]]] = {
    "jobset/failure-policy_failjobset-action.yaml": {
        ("HA030", 10),
        ("HA033", 14),
        ("HA032", 25),
        ("HA033", 45),
        ("HA032", 55),
    },
    "jobset/failure-policy_host-maintenance-event-model.yaml": {
        ("HA033", 18),
        ("HA032", 30),
        ("HA033", 58),
        ("HA032", 68),
    },
    "jobset/failure-policy_onjobfailurereasons-present-podfailurepolicy.yaml": {
        ("HA033", 18),
        ("HA032", 30),
        ("HA033", 58),
        ("HA032", 68),
    },
    "jobset/failure-policy_onjobfailurereasons-present.yaml": {
        ("HA033", 17),
        ("HA032", 28),
        ("HA033", 48),
        ("HA032", 58),
    },
    "jobset/failure-policy_restartjob-action.yaml": {("HA033", 22), ("HA032", 34), ("HA033", 51), ("HA032", 63)},
    "jobset/failure-policy_restartjobandignoremaxrestarts-action.yaml": {
        ("HA033", 22),
        ("HA032", 34),
        ("HA033", 51),
        ("HA032", 63),
    },
    "jobset/failure-policy_restartjobset-action.yaml": {("HA033", 14), ("HA032", 25), ("HA033", 45), ("HA032", 55)},
    "jobset/failure-policy_restartjobsetandignoremaxrestarts-action.yaml": {
        ("HA033", 16),
        ("HA032", 27),
        ("HA033", 47),
        ("HA032", 57),
    },
    "jobset/simple_failure-policy.yaml": {("HA033", 13), ("HA032", 24), ("HA033", 48), ("HA032", 58)},
    "jobset/in-place-restart_jobset-main-container-mode.yaml": {("HA033", 11), ("HA032", 26)},
    "jobset/in-place-restart_jobset-sidecar-container-mode.yaml": {("HA033", 11), ("HA032", 53)},
    "jobset/pytorch_cnn-mnist_mnist.yaml": set(),
    "jobset/pytorch_resnet-cifar10_resnet.yaml": set(),
    "jobset/volume-claim-policy_single-pvc.yaml": set(),
    "trainer/01-multi-node.yaml": set(),
    "trainer/02-runtime-patches.yaml": set(),
    "trainer/deepspeed_distributed.yaml": set(),
    "trainer/torch_distributed.yaml": set(),
    "mindcluster/vcjob_kwok_simulator-8x8.yaml": set(),  # a Volcano Job: lint reads none (tests/test_mindcluster.py does)
}


def test_every_upstream_file_has_its_expectation():
    assert sorted(str(path.relative_to(UPSTREAM)) for path in UPSTREAM.glob("*/*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_lint_reads_the_upstream_example_as_its_controllers_do(cli, name):
    found = findings(cli, UPSTREAM / name)
    assert {(f["rule"], f["line"]) for f in found} == EXPECTED[name]
    assert not [f["message"] for f in found if "None" in f["message"]]


def test_hacfg_030_names_the_replicated_job_a_rule_targets(cli):
    [finding] = [
        f for f in findings(cli, UPSTREAM / "jobset/failure-policy_failjobset-action.yaml") if f["rule"] == "HA030"
    ]
    assert finding["logical_path"] == "spec.failurePolicy.rules[0].action"
    assert finding["message"].startswith(
        "a pod of 'leader' exiting 138 (retry elsewhere) fails its Job with BackoffLimitExceeded"
    )


def test_an_init_container_that_is_no_sidecar_runs_no_agent(cli, tmp_path: Path):
    """Without restartPolicy: Always an init container runs to its end before the worker: the rule speaks."""
    sidecar = (UPSTREAM / "jobset/in-place-restart_jobset-sidecar-container-mode.yaml").read_text()
    plain = tmp_path / "init.yaml"
    plain.write_text(sidecar.replace("restartPolicy: Always\n", "restartPolicy: Never\n", 1))
    assert ("HA031", 8) in findings(cli, plain, keys=("rule", "line"))


def test_an_annotation_declares_the_image_that_runs_the_agent(cli, tmp_path: Path):
    main = (UPSTREAM / "jobset/in-place-restart_jobset-main-container-mode.yaml").read_text()
    # the image's entrypoint runs the agent, which gets its worker command some other way
    hidden = main.replace("- name: WORKER_COMMAND", "- name: COMMAND")
    (tmp_path / "hidden.yaml").write_text(hidden)
    assert ("HA031", 8) in findings(cli, tmp_path / "hidden.yaml", keys=("rule", "line"))
    declared = hidden.replace(
        "        template:\n          spec:\n            # See",
        "        template:\n          metadata:\n            annotations:\n"
        "              hacfg.io/in-place-restart-agent: in-place-restart-agent\n          spec:\n            # See",
    )
    assert declared != hidden
    (tmp_path / "declared.yaml").write_text(declared)
    assert "HA031" not in findings(cli, tmp_path / "declared.yaml", keys="rule")
