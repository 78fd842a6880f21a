"""Kubernetes facts in one place: the training APIs hacfg writes and lints, and their words.

Sources: JobSet's API (``jobset.x-k8s.io/v1alpha2``, ``api/jobset/v1alpha2/jobset_types.go`` and
``pkg/controllers/failure_policy.go``), Kubeflow Trainer v2 (``trainer.kubeflow.org/v1alpha1``) and the
``batch/v1`` Job's ``podFailurePolicy``. docs/kubernetes.md names the CRDs' commits.
"""

from __future__ import annotations

from typing import Literal

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
# The training objects hacfg lints, by apiVersion and kind; the runtimes embed a JobSet template.
TRAINING_KINDS = frozenset(
    {
        (JOBSET_API, "JobSet"),
        (TRAINER_API, "TrainJob"),
        (TRAINER_API, "TrainingRuntime"),
        (TRAINER_API, "ClusterTrainingRuntime"),
    }
)

RestartStrategy = Literal["Recreate", "BlockingRecreate", "InPlaceRestart"]

# failurePolicy.rules[].action hacfg writes; a Job failure no rule matches gets RestartJobSet.
FAIL_JOBSET = "FailJobSet"
RESTART_JOBSET = "RestartJobSet"
RESTART_JOBSET_UNCOUNTED = "RestartJobSetAndIgnoreMaxRestarts"
# Actions that restart even when maxRestarts is 0 or spent.
UNCOUNTED_ACTIONS = frozenset({RESTART_JOBSET_UNCOUNTED, "RestartJobAndIgnoreMaxRestarts"})

# Why a child Job failed (its Failed condition's reason), which failurePolicy rules match on.
POD_FAILURE_POLICY = "PodFailurePolicy"  # a podFailurePolicy FailJob rule matched
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
# The Job controller's message when a FailJob rule matched a pod condition: "Pod NS/NAME has condition
# DisruptionTarget matching FailJob rule at index N" (preemption, eviction, node drain, node shutdown).
DISRUPTION = "DisruptionTarget"
DISRUPTION_MESSAGE = f"has condition {DISRUPTION}"

# InPlaceRestart's prerequisites (keps/467-InPlaceRestart): Jobs that never fail for a pod's
# restart, replacement pods only once the old one is gone, and JobSet's in-place restart agent in
# every pod (its main-container mode runs the worker command from WORKER_COMMAND).
IN_PLACE_BACKOFF_LIMIT = 2147483647
IN_PLACE_REPLACEMENT = "Failed"
IN_PLACE_AGENT = "/in-place-restart-agent"
# How JobSet's examples run the agent besides naming it in the command: as an init sidecar whose startup
# probe waits for the barrier, or as the image's entrypoint, which runs the worker from WORKER_COMMAND.
IN_PLACE_BARRIER = "/barrier-is-down"
IN_PLACE_WORKER_COMMAND = "WORKER_COMMAND"
# A pod template's annotation naming the container whose image runs the agent, where nothing else shows it.
IN_PLACE_AGENT_ANNOTATION = "hacfg.io/in-place-restart-agent"

# Labels JobSet puts on every child Job and pod.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
# The replicated Job that runs the trainer in a Kubeflow runtime: TrainJob's trainer settings go there.
TRAINER_ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_ANCESTOR = "trainer"


def training_kind(data: object) -> str | None:
    """The kind of a JobSet or Kubeflow Trainer object, or None for anything else."""
    if not isinstance(data, dict):
        return None
    api, kind = data.get("apiVersion"), data.get("kind")
    if isinstance(api, str) and isinstance(kind, str) and (api, kind) in TRAINING_KINDS:
        return kind
    return None
