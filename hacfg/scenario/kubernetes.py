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

# Accelerators as device plugins name them: NVIDIA's, and the Ascend Device Plugin's (910 and 910B share
# Ascend910; requests must equal limits: Ascend/mindcluster-deploy's train-volcano.yaml).
GPU_RESOURCE = "nvidia.com/gpu"
ASCEND_RESOURCE = "huawei.com/Ascend{series}"  # series as hacfg.scenario.modelarts.Flavor names it
DeviceResource = Literal["nvidia.com/gpu", "huawei.com/Ascend910", "huawei.com/Ascend310P", "huawei.com/Ascend310"]

# /dev/shm in every pod, above the agent's disk-size shm pre-check (more than 1 GiB), with room for DataLoader
# workers and NCCL's buffers.
DEFAULT_SHM_SIZE = "2Gi"
# A Kubernetes quantity (resource.Quantity), as a volume's sizeLimit takes it: 2Gi, 1500M, 2147483648.
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"
_QUANTITY_SCALE = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY_SCALE |= {f"{unit}i": 1 << (10 * (at + 1)) for at, unit in enumerate("KMGTPE")}
# A Secret's name and its keys, as Kubernetes takes them (a DNS subdomain; a ConfigMap key).
SECRET_NAME_PATTERN = r"^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$"
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"


def quantity_bytes(quantity: str) -> int:
    """The bytes a quantity such as ``2Gi`` stands for (one that matches :data:`QUANTITY_PATTERN`)."""
    number = quantity.rstrip("KMGTPEik")
    return int(float(number) * _QUANTITY_SCALE[quantity[len(number) :]])


# Environment variable names that hold a secret: kube-linter's env-var-secret flags *SECRET*; these add the
# usual spellings of keys, tokens and passwords (WANDB_API_KEY, HF_TOKEN, HUAWEICLOUD_SDK_SK, DB_PASSWORD).
SECRET_WORDS = frozenset({"PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "CREDENTIALS"})
SECRET_ENDINGS = frozenset({"KEY", "APIKEY", "TOKEN", "SK", "PWD"})


def looks_secret(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret."""
    words = name.upper().split("_")
    return "SECRET" in name.upper() or bool(SECRET_WORDS.intersection(words)) or words[-1] in SECRET_ENDINGS


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

# The Job controller's annotation of an Indexed Job's pod: its index (also JOB_COMPLETION_INDEX in its env).
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
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
