"""The pods each Kubernetes target builds, run as a kubelet would run them, on this machine.

A :class:`Cluster` is one machine playing the control plane and the kubelets for one built manifest:

- the controllers make the pods: JobSet's (one Indexed Job per replicated Job, its pods named and labelled as
  JobSet and the Job controller name them), Kubeflow Trainer's (a TrainJob's runtime expanded into its JobSet,
  ``mlPolicy.torch`` handing the ``node`` container PET_*), Volcano's (a pod per task index, the env and svc
  plugins' variables and hosts files);
- each pod runs its container's command and args, with its env as the kubelet resolves it (the downward API's
  fields, the completion index, Secrets' keys, ``$(VAR)``), in namespaces of its own: a mount namespace with its
  volumes (a ConfigMap's files, a memory ``emptyDir`` as a tmpfs of its ``sizeLimit``, a claim as a shared
  folder, the container runtime's 64 MiB tmpfs at /dev/shm unless a volume is mounted there, the device
  plugin's device nodes for the cards it requests) and an /etc/hosts of its own where the headless service's
  hostnames resolve to loopback; a PID namespace whose end ends every process in it; the job's pods share one
  network namespace of their own, so their ports are private to the job and tests run side by side;
- the Job, JobSet and Volcano controllers' decisions are replayed on each pod's exit code: a pod failure policy,
  the backoff limit, the JobSet's failure policy rules and maxRestarts, Volcano's lifecycle policies and maxRetry.

Needs root (namespaces, mounts), util-linux's ``nsenter`` and ``unshare``, and ``ip``: skipped without them.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kit.agents import rank_table
from kit.paths import REPO
from kit.processes import children_of, end

from hacfg.scenario.kubernetes import quantity_bytes

TOOLS = {tool: shutil.which(tool) for tool in ("nsenter", "unshare", "ip")}
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not all(TOOLS.values()), reason="the pod harness needs root, nsenter, unshare and ip"
)

# What the image's own environment gives every container: this interpreter's hacfg and python first.
IMAGE_ENV = {
    "PATH": f"{Path(sys.executable).parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}
RUNTIME_SHM = 64 << 20  # what containerd and Docker mount at /dev/shm
GRACE = 30.0  # terminationGracePeriodSeconds' default
TRAINER = "trainer.kubeflow.org/trainjob-ancestor-step"
# Kubeflow Trainer's torch plugin (pkg/runtime/framework/plugins/torch/torch.go at 8c0f505): PET_* for torchrun.
TRAINER_MASTER_PORT = 29500
# Where the device plugins put a card, and what they tell the container (NVIDIA's and Ascend's).
DEVICES = {
    "nvidia.com/gpu": ("nvidia{}", "NVIDIA_VISIBLE_DEVICES", ()),
    "huawei.com/Ascend910": ("davinci{}", "ASCEND_VISIBLE_DEVICES", ("davinci_manager", "devmm_svm", "hisi_hdc")),
    "huawei.com/Ascend310P": ("davinci{}", "ASCEND_VISIBLE_DEVICES", ("davinci_manager", "devmm_svm", "hisi_hdc")),
}


@dataclass
class Pod:
    """One pod as its controller made it: names, labels and annotations, and the template's spec."""

    name: str
    hostname: str
    subdomain: str
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: dict[str, Any]
    owner: str  # the Job (or the Volcano Job's task) it belongs to
    index: int
    injected: list[dict[str, Any]] = field(default_factory=list)  # env a controller adds to every container
    folders: dict[str, dict[str, str]] = field(default_factory=dict)  # a controller's own volumes: path -> files


@dataclass
class Running:
    pod: Pod
    process: subprocess.Popen
    log: Path
    env: dict[str, str]
    scratch: Path  # the pod's own files: its volumes' folders
    code: int | None = None


@dataclass
class Job:
    """A batch/v1 Indexed Job of a JobSet: its spec, its pods by index, what became of them."""

    name: str
    replicated: str
    spec: dict[str, Any]
    succeeded: set[int] = field(default_factory=set)
    failures: int = 0
    failed: tuple[str, str] | None = None  # (reason, message) of its Failed condition


class Cluster:
    """One machine as the control plane and kubelets of one built manifest (see the module's docstring)."""

    def __init__(self, root: Path, objects: list[dict], *, claims: dict[str, Path] | None = None, secrets: dict[str, dict[str, str]] | None = None, missing_cards: int = 0, path: str = IMAGE_ENV["PATH"]):
        self.root, self.claims, self.secrets, self.missing_cards, self.path = root, claims or {}, secrets or {}, missing_cards, path
        root.mkdir(parents=True)
        self.config_maps = {o["metadata"]["name"]: o["data"] for o in objects if o["kind"] == "ConfigMap"}
        self.running: dict[str, Running] = {}
        self.finished: list[Running] = []
        self.decisions: list[str] = []  # what the controllers did, in order, in their words
        self.phase: str | None = None  # the workload's end: Completed, Failed
        self.uid = str(uuid.uuid4())
        self.restarts = self.counted = 0
        kinds = {o["kind"]: o for o in objects}
        if "Job" in kinds:
            self.volcano: dict[str, Any] | None = kinds["Job"]
            self.jobset: dict[str, Any] = {}
        else:
            self.volcano = None
            self.jobset = kinds.get("JobSet") or self._from_train_job(kinds["TrainJob"], [o for o in objects if o["kind"] == "TrainingRuntime"])
        self.name = (self.volcano or self.jobset)["metadata"]["name"]
        self.jobs: dict[str, Job] = {}
        self.hosts = root / "hosts"
        # the job's network: a namespace whose loopback is up before any pod joins it
        self.netns = subprocess.Popen([TOOLS["unshare"], "--net", "--", "sh", "-c", f"{TOOLS['ip']} link set lo up && echo up && exec sleep 100000"], stdout=subprocess.PIPE)
        assert self.netns.stdout is not None and self.netns.stdout.readline() == b"up\n"

    # --- the controllers: what each object makes

    @staticmethod
    def _from_train_job(train_job: dict, runtimes: list[dict]) -> dict:
        """The JobSet Kubeflow Trainer makes of a TrainJob: its runtime's template, named as the TrainJob, the
        trainer's node count, and with mlPolicy.torch the PET_* variables in the trainer's ``node`` container."""
        [runtime] = [r for r in runtimes if r["metadata"]["name"] == train_job["spec"]["runtimeRef"]["name"]]
        policy = runtime["spec"]["mlPolicy"]
        name = train_job["metadata"]["name"]
        nodes = (train_job["spec"].get("trainer") or {}).get("numNodes") or policy.get("numNodes", 1)
        spec = copy.deepcopy(runtime["spec"]["template"]["spec"])
        for replicated in spec["replicatedJobs"]:
            if replicated["template"].get("metadata", {}).get("labels", {}).get(TRAINER) != "trainer":
                continue
            job = replicated["template"]["spec"]
            job["parallelism"] = job["completions"] = nodes
            for container in job["template"]["spec"]["containers"]:
                if container["name"] == "node" and "torch" in policy:
                    index = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
                    container.setdefault("env", []).extend([
                        {"name": "PET_NNODES", "value": str(nodes)},
                        {"name": "PET_NPROC_PER_NODE", "value": "auto"},
                        {"name": "PET_NODE_RANK", "valueFrom": index},
                        {"name": "PET_MASTER_ADDR", "value": f"{name}-node-0-0.{name}"},
                        {"name": "PET_MASTER_PORT", "value": str(TRAINER_MASTER_PORT)},
                    ])
        return {"metadata": {"name": name}, "spec": spec}

    def _jobset_pods(self) -> list[Pod]:
        """A JobSet's Jobs, <jobset>-<replicated job>-<i>, and their Indexed pods, as JobSet and the Job controller make them."""
        spec = self.jobset["spec"]
        network = spec.get("network") or {}
        subdomain = network.get("subdomain") or self.name if network.get("enableDNSHostnames", True) else ""
        pods = []
        for replicated in spec["replicatedJobs"]:
            for number in range(replicated.get("replicas", 1)):
                job = Job(f"{self.name}-{replicated['name']}-{number}", replicated["name"], replicated["template"]["spec"])
                self.jobs[job.name] = job
                for index in range(job.spec.get("completions", 1)):
                    pods.append(self._job_pod(job, number, index, subdomain))
        return pods

    def _job_pod(self, job: Job, number: int, index: int, subdomain: str) -> Pod:
        labels = {
            "jobset.sigs.k8s.io/jobset-name": self.name,
            "jobset.sigs.k8s.io/replicatedjob-name": job.replicated,
            "jobset.sigs.k8s.io/job-index": str(number),
            "jobset.sigs.k8s.io/jobset-uid": self.uid,
            "jobset.sigs.k8s.io/restart-attempt": str(self.restarts),
            "batch.kubernetes.io/job-completion-index": str(index),
        }
        annotations = {**labels}
        index_env = {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}
        return Pod(f"{job.name}-{index}-{uuid.uuid4().hex[:5]}", f"{job.name}-{index}", subdomain, labels, annotations, job.spec["template"]["spec"], job.name, index, [index_env])

    def _volcano_pods(self) -> list[Pod]:
        """A Volcano Job's pods, <job>-<task>-<index>: the svc plugin's hostnames and hosts files, the env plugin's index."""
        assert self.volcano is not None
        tasks = self.volcano["spec"]["tasks"]
        hosts = {task["name"]: [f"{self.name}-{task['name']}-{i}.{self.name}" for i in range(task.get("replicas", 1))] for task in tasks}
        pods = []
        for task in tasks:
            for index in range(task.get("replicas", 1)):
                name = f"{self.name}-{task['name']}-{index}"
                annotations = {"volcano.sh/task-index": str(index), "volcano.sh/task-spec": task["name"], "scheduling.k8s.io/group-name": f"{self.name}-{self.uid}", "volcano.sh/job-name": self.name}
                injected = [{"name": "VC_TASK_INDEX", "value": str(index)}, {"name": "VK_TASK_INDEX", "value": str(index)}]
                for other, names in hosts.items():
                    injected += [{"name": f"VC_{other.upper()}_HOSTS", "value": ",".join(names)}, {"name": f"VC_{other.upper()}_NUM", "value": str(len(names))}]
                files = {f"{other}.host": "\n".join(names) + "\n" for other, names in hosts.items()}  # the svc plugin's ConfigMap
                pods.append(Pod(name, name, self.name, {"volcano.sh/job-name": self.name}, annotations, task["template"]["spec"], task["name"], index, injected, {"/etc/volcano": files}))
        return pods

    def pods(self) -> list[Pod]:
        """The workload's pods, as its controllers create them (again on each restart of the whole)."""
        pods = self._volcano_pods() if self.volcano else self._jobset_pods()
        lines = ["127.0.0.1 localhost"] + [f"127.0.0.1 {p.hostname}.{p.subdomain} {p.hostname}" if p.subdomain else f"127.0.0.1 {p.hostname}" for p in pods]
        hosts = "\n".join(lines) + "\n"
        if not self.hosts.exists():  # the same names on every restart; running pods read it, so it is written once
            self.hosts.write_text(hosts)
        assert self.hosts.read_text() == hosts
        return pods

    def start(self) -> None:
        for pod in self.pods():
            self.launch(pod)

    # --- the kubelet: one pod's process, namespaces, volumes and env

    def launch(self, pod: Pod, command: list[str] | None = None) -> Running:
        """Start ``pod`` (its first container) as the kubelet would; ``command`` runs instead of its own, as a debug copy of the pod does."""
        [container] = pod.spec["containers"]
        env = self.environment(pod, container)
        argv = command or [expand(word, env) for word in container.get("command", []) + container.get("args", [])]
        instance = f"{pod.name}.{len(self.finished) + len(self.running)}"  # Volcano recreates a pod under its name
        scratch = self.root / "pods" / instance
        scratch.mkdir(parents=True)
        script = self.mounts(pod, container, scratch, env)
        log = self.root / "logs" / f"{instance}.log"
        log.parent.mkdir(exist_ok=True)
        with log.open("wb") as out:
            process = subprocess.Popen(
                [TOOLS["nsenter"], f"--net=/proc/{self.netns.pid}/ns/net", "--", TOOLS["unshare"], "--mount", "--uts", "--pid", "--fork", "--kill-child", "--mount-proc", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", *argv],
                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=container.get("workingDir", "/"),
            )
        running = Running(pod, process, log, env, scratch)
        self.running[pod.name] = running
        return running

    def environment(self, pod: Pod, container: dict) -> dict[str, str]:
        """The container's env as the kubelet resolves it, over the image's: downward API, Secrets' keys, $(VAR)."""
        env = {**IMAGE_ENV, "PATH": self.path, "HOSTNAME": pod.hostname}
        for variable in [*container.get("env", []), *pod.injected]:
            name, source = variable["name"], variable.get("valueFrom")
            if source is None:
                env[name] = expand(variable.get("value", ""), env)
            elif "fieldRef" in source:
                env[name] = self.field(pod, source["fieldRef"]["fieldPath"])
            elif "secretKeyRef" in source:
                reference = source["secretKeyRef"]
                value = self.secrets.get(reference["name"], {}).get(reference["key"])
                if value is None and not reference.get("optional"):
                    raise AssertionError(f"CreateContainerConfigError: pod {pod.name}: secret {reference['name']!r} key {reference['key']!r} not found")
                if value is not None:
                    env[name] = value
            else:
                raise AssertionError(f"the harness resolves no {sorted(source)} (env {name})")
        for resource, count in (container.get("resources", {}).get("limits") or {}).items():
            if resource in DEVICES:
                env[DEVICES[resource][1]] = ",".join(map(str, range(int(count) - self.missing_cards)))
        return env

    @staticmethod
    def field(pod: Pod, path: str) -> str:
        if path == "metadata.name":
            return pod.name
        if path == "metadata.namespace":
            return "default"
        found = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
        if found is None:
            raise AssertionError(f"the harness resolves no fieldRef {path}")
        return (pod.labels if found.group(1) == "labels" else pod.annotations).get(found.group(2), "")

    def mounts(self, pod: Pod, container: dict, scratch: Path, env: dict[str, str]) -> str:
        """The shell that sets up the pod's mount namespace before its command: volumes, /dev/shm, devices, hosts."""
        volumes = {v["name"]: v for v in pod.spec.get("volumes", [])}
        steps: list[tuple[str, list[str]]] = []  # (mount point, commands)
        for mount in container.get("volumeMounts", []):
            volume, path = volumes[mount["name"]], mount["mountPath"]
            if "configMap" in volume:
                folder = scratch / f"configmap-{mount['name']}"
                folder.mkdir()
                for key, text in self.config_maps[volume["configMap"]["name"]].items():
                    (folder / key).write_text(text)
                steps.append((path, [f"mount --bind {q(folder)} {q(path)}", f"mount -o remount,bind,ro {q(path)}"]))
            elif "emptyDir" in volume and volume["emptyDir"].get("medium") == "Memory":
                size = quantity_bytes(volume["emptyDir"]["sizeLimit"]) if volume["emptyDir"].get("sizeLimit") else None
                steps.append((path, [f"mount -t tmpfs {'-o size=' + str(size) + ' ' if size else ''}tmpfs {q(path)}"]))
            elif "emptyDir" in volume:
                folder = scratch / f"emptydir-{mount['name']}"
                folder.mkdir()
                steps.append((path, [f"mount --bind {q(folder)} {q(path)}"]))
            elif "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]["claimName"]
                assert claim in self.claims, f"pod {pod.name} stays Pending: no PersistentVolumeClaim {claim!r}"
                steps.append((path, [f"mount --bind {q(self.claims[claim])} {q(path)}"]))
            else:
                raise AssertionError(f"the harness mounts no {sorted(volume)} volume")
        if not any(path == "/dev/shm" for path, _ in steps):
            steps.append(("/dev/shm", [f"mount -t tmpfs -o size={RUNTIME_SHM} shm /dev/shm"]))
        devices = []
        for resource, count in (container.get("resources", {}).get("limits") or {}).items():
            if resource in DEVICES:
                pattern, _, shared = DEVICES[resource]
                devices += [f"/dev/{pattern.format(card)}" for card in range(int(count) - self.missing_cards)] + [f"/dev/{name}" for name in shared]
        for path, files in pod.folders.items():
            folder = scratch / f"folder-{len(steps)}"
            folder.mkdir()
            for name, text in files.items():
                (folder / name).write_text(text)
            steps.append((path, [f"mount --bind {q(folder)} {q(path)}"]))
        # a mount point the image lacks is made in an overlay of its nearest folder, never on this machine
        overlays = sorted({nearest(Path(path)) for path, _ in steps if not Path(path).exists()} | ({Path("/dev")} if devices else set()), key=lambda p: len(p.parts))
        lines = ["set -e", f"echo {q(pod.hostname)} > /proc/sys/kernel/hostname"]
        for number, folder in enumerate(overlays):
            upper, work = scratch / f"upper-{number}", scratch / f"work-{number}"
            upper.mkdir(), work.mkdir()
            lines.append(f"mount -t overlay overlay -o lowerdir={q(folder)},upperdir={q(upper)},workdir={q(work)} {q(folder)}")
        lines += [f"touch {q(device)}" for device in devices]
        for path, commands in steps:
            lines += [f"mkdir -p {q(path)}", *commands]
        lines += [f"mount --bind {q(self.hosts)} /etc/hosts", f"cd {q(container.get('workingDir', '/'))}", '"$@"', "exit $?"]
        return "\n".join(lines)

    # --- running: exits, the controllers' decisions, faults

    def run(self, *, timeout: float, faults: tuple[Callable[[Cluster], None], ...] = ()) -> str:
        """Start the workload and play the controllers until it ends; its phase."""
        self.start()
        deadline = time.monotonic() + timeout
        while self.phase is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"the workload did not end in {timeout:.0f} s: {self.decisions}\n{self.logs()}")
            for fault in faults:
                fault(self)
            for running in list(self.running.values()):
                code = running.process.poll()
                if code is not None and self.running.get(running.pod.name) is running:  # not stopped by a decision meanwhile
                    self.exited(running, code)
            time.sleep(0.05)
        return self.phase

    def exited(self, running: Running, code: int) -> None:
        running.code = code
        del self.running[running.pod.name]
        self.finished.append(running)
        self.decisions.append(f"pod {running.pod.hostname} exited {code}")
        if self.volcano:
            self._volcano_decides(running, code)
        else:
            self._job_decides(running, code)

    def _job_decides(self, running: Running, code: int) -> None:
        """The Job controller (pod failure policy, backoffLimit), then the JobSet controller (its failure policy)."""
        job = self.jobs[running.pod.owner]
        if code == 0:
            job.succeeded.add(running.pod.index)
            if len(job.succeeded) == job.spec.get("completions", 1) and all(len(j.succeeded) == j.spec.get("completions", 1) for j in self.jobs.values()):
                self.end("Completed")
            return
        container = running.pod.spec["containers"][0]["name"]
        for number, rule in enumerate((job.spec.get("podFailurePolicy") or {}).get("rules", [])):
            on = rule.get("onExitCodes")
            if not on or on.get("containerName", container) != container or (code in on["values"]) != (on["operator"] == "In"):
                continue
            if rule["action"] == "FailJob":
                message = f"Container {container} for pod default/{running.pod.name} failed with exit code {code} matching FailJob rule at index {number}"
                return self._job_failed(job, "PodFailurePolicy", message)
            if rule["action"] == "Ignore":
                self.launch(self._job_pod(job, int(running.pod.labels["jobset.sigs.k8s.io/job-index"]), running.pod.index, running.pod.subdomain))
                return None
            break  # Count
        job.failures += 1
        if job.failures > job.spec.get("backoffLimit", 6):
            return self._job_failed(job, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        self.launch(self._job_pod(job, int(running.pod.labels["jobset.sigs.k8s.io/job-index"]), running.pod.index, running.pod.subdomain))
        return None

    def _job_failed(self, job: Job, reason: str, message: str) -> None:
        job.failed = (reason, message)
        self.decisions.append(f"job {job.name} failed: {reason}")
        policy = self.jobset["spec"].get("failurePolicy")
        if policy is None:
            return self.end("Failed")
        action = "RestartJobSet"  # JobSet's default when no rule matches
        for rule in policy.get("rules", []):
            if rule.get("onJobFailureReasons") and reason not in rule["onJobFailureReasons"]:
                continue
            if rule.get("onJobFailureMessagePatterns") and not any(re.search(p, message) for p in rule["onJobFailureMessagePatterns"]):
                continue
            if rule.get("targetReplicatedJobs") and job.replicated not in rule["targetReplicatedJobs"]:
                continue
            action = rule["action"]
            break
        if action == "FailJobSet" or (action == "RestartJobSet" and self.counted >= policy.get("maxRestarts", 0)):
            self.decisions.append(f"jobset {action}" + ("" if action == "FailJobSet" else ": maxRestarts reached"))
            return self.end("Failed")
        if action not in ("RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts"):
            raise AssertionError(f"the harness replays no {action}")
        self.restarts += 1
        self.counted += action == "RestartJobSet"
        self.decisions.append(f"jobset {action} ({self.counted} of {policy.get('maxRestarts', 0)} counted)")
        self.stop_all()
        self.jobs.clear()
        self.start()
        return None

    def _volcano_decides(self, running: Running, code: int) -> None:
        """Volcano's job controller: the lifecycle policies, exit codes first, then PodFailed; maxRetry."""
        assert self.volcano is not None
        spec = self.volcano["spec"]
        if code == 0:
            done = [r for r in self.finished if r.code == 0]
            if len(done) >= sum(t.get("replicas", 1) for t in spec["tasks"]) and not self.running:
                self.end("Completed")
            return
        policies = spec.get("policies", [])
        action = next((p["action"] for p in policies if p.get("exitCode") == code), None)
        action = action or next((p["action"] for p in policies if p.get("event") in ("PodFailed", "*")), "SyncJob")
        if action == "AbortJob":
            self.decisions.append("volcano AbortJob")
            return self.end("Aborted")
        if action not in ("RestartJob", "RestartPod"):
            raise AssertionError(f"the harness replays no {action}")
        if self.counted >= spec.get("maxRetry", 3):
            self.decisions.append(f"volcano {action}: maxRetry reached")
            return self.end("Failed")
        self.counted += 1
        self.decisions.append(f"volcano {action} ({self.counted} of {spec.get('maxRetry', 3)})")
        if action == "RestartPod":
            self.launch(next(p for p in self._volcano_pods() if p.name == running.pod.name))
            return None
        self.stop_all()
        self.start()
        return None

    def end(self, phase: str) -> None:
        self.decisions.append(phase)
        self.stop_all()
        self.phase = phase

    def stop_all(self) -> None:
        """Delete the running pods: SIGTERM to each container's main process, SIGKILL after the grace period."""
        for running in self.running.values():
            main = main_process(running)
            if main:
                os.kill(main, signal.SIGTERM)
        deadline = time.monotonic() + GRACE
        for running in list(self.running.values()):
            try:
                running.code = running.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                running.process.kill()  # unshare's --kill-child takes the pod's PID namespace with it
                running.code = running.process.wait()
            self.finished.append(running)
        self.running.clear()

    def close(self) -> None:
        for running in self.running.values():
            running.process.kill()
            running.process.wait()
        self.running.clear()
        end(self.netns)  # its stdout pipe closed too

    def logs(self) -> str:
        return "\n".join(f"--- {r.pod.name} ({r.code})\n{r.log.read_text(errors='replace')[-3000:]}" for r in self.finished)

    def output(self, hostname: str) -> list[str]:
        """Every log of the pods that had ``hostname``, oldest first."""
        return [r.log.read_text(errors="replace") for r in self.finished if r.pod.hostname == hostname]


def q(text: Any) -> str:
    return shlex.quote(str(text))


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR): a variable already defined, else left as written; $$ is a $."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def nearest(path: Path) -> Path:
    """The nearest folder above ``path`` that exists (never / itself: the tests mount under /etc and /mnt)."""
    while not path.exists():
        path = path.parent
    assert path != Path("/"), "the harness overlays a folder, not the root"
    return path


def main_process(running: Running) -> int | None:
    """The container's main process: below unshare and the pod's init shell."""
    init = [pid for pid, _ in children_of(running.process.pid)]
    main = [pid for pid, _ in children_of(init[0])] if init else []
    return main[0] if main else None


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for child, _ in children_of(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


# --- the tests


@pytest.fixture
def clusters(tmp_path):
    """Make a Cluster of built objects; every process it started is gone when the test ends."""
    made: list[Cluster] = []

    def make(objects, name="cluster", **options):
        cluster = Cluster(tmp_path / name, objects, **options)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()


def built(cli, target, scenario, *, without_shm=False):
    result = cli("build", "--target", target, scenario)
    assert result.code == 0, result.err
    objects = list(yaml.safe_load_all(result.out))
    if without_shm:  # the manifest edited by hand: no memory volume at /dev/shm
        for pod in pod_templates(objects):
            pod["volumes"] = [v for v in pod["volumes"] if "emptyDir" not in v]
            for container in pod["containers"]:
                container["volumeMounts"] = [m for m in container["volumeMounts"] if m["mountPath"] != "/dev/shm"]
    return objects


def pod_templates(objects):
    for o in objects:
        if o["kind"] == "Job":
            yield from (task["template"]["spec"] for task in o["spec"]["tasks"])
        elif o["kind"] in ("JobSet", "TrainingRuntime"):
            spec = o["spec"] if o["kind"] == "JobSet" else o["spec"]["template"]["spec"]
            yield from (r["template"]["spec"]["template"]["spec"] for r in spec["replicatedJobs"])


TARGETS = ("jobset", "trainjob", "volcano")
PRECHECK = ["hacfg", "precheck", "--config", "/etc/hacfg/ha.yaml"]
CARDS = "version: 1\nscenario: multi-node\njob: {name: cards, nodes: 2, image: org/train:1.0, command: python train.py, flavor: modelarts.pool.visual.8xlarge}\nrestart: {max: 2}\n"


def items(text):
    return {m.group(1): m.group(0) for m in re.finditer(r"\[hacfg\] item=(\S+(?: (?:root|shm|cache))?) .*", text)}


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_the_agents_prechecks_pass_in_the_pod_each_target_builds_and_fail_where_it_falls_short(cli, write, clusters, target):
    """Built, read back, run: the pod's memory volume and cards are what the agent's pre-checks expect; one card
    short (the device plugin gave 7 of 8) or the volume edited out, and they fail with 138."""
    scenario = write("ha.yaml", CARDS)
    cluster = clusters(built(cli, target, scenario))
    node0 = cluster.pods()[0]
    running = cluster.launch(node0, PRECHECK)
    assert running.process.wait(60) == 0, running.log.read_text()
    found = items(running.log.read_text())
    assert "status=passed value=2.0GiB" in found["disk-size shm"]  # the emptyDir's sizeLimit, 2Gi
    assert "status=passed value=8 need=>=8" in found["gpu-check"]  # nvidia.com/gpu: 8, from the 8xlarge flavor
    if target == "volcano":
        assert "status=passed value=2/2" in found["dns"]  # the svc plugin's hosts files, resolved in the pod

    short = clusters(built(cli, target, scenario), "short", missing_cards=1)
    running = short.launch(short.pods()[0], PRECHECK)
    assert running.process.wait(60) == 138
    assert "status=failed value=7 need=>=8" in items(running.log.read_text())["gpu-check"]

    edited = clusters(built(cli, target, scenario, without_shm=True), "edited")
    running = edited.launch(edited.pods()[0], PRECHECK)
    assert running.process.wait(60) == 138
    shm = items(running.log.read_text())["disk-size shm"]
    assert "status=failed value=64.0MiB need=>1.0GiB detail=a tmpfs mounted at /dev/shm" in shm
    assert "a pod needs an emptyDir {medium: Memory} there" in shm


EXAMPLE = REPO / "examples/resumable-training/train_ddp.py"
STEPS = 40
# One scenario for every target: two CPU nodes training the shipped torch example, its checkpoints on a claim.
TRAINING = f"""version: 1
scenario: multi-node
job:
  name: ddp
  nodes: 2
  accelerator: cpu
  image: org/train-ddp:1.0
  command: python {EXAMPLE} --ckpt /mnt/hacfg/ckpt --out /mnt/hacfg/ckpt/final --steps {STEPS} --every 4 --step-time 0.05
checkpoint: {{path: /mnt/hacfg/ckpt, resume: true}}
restart: {{max: 2}}
kubernetes: {{checkpoint_claim: ddp-ckpt}}
"""
GROUP_SECRET = {"ddp-hacfg-group": {"secret": "0f" * 32}}  # kubectl create secret generic ddp-hacfg-group ...


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_without_the_memory_volume_every_pod_exits_138_and_the_controllers_restart_it_to_the_end(cli, write, clusters, tmp_path, target):
    """The manifest with its shm volume removed: the pods get the runtime's 64 MiB, the agent's pre-check exits 138,
    and JobSet (BackoffLimitExceeded, rule retryElsewhere) or Volcano (exitCode 138) restarts the whole job,
    counted, until restart.max (here 1) is spent."""
    (tmp_path / "claim").mkdir()
    scenario = write("ha.yaml", TRAINING.replace("restart: {max: 2}", "restart: {max: 1}"))
    cluster = clusters(built(cli, target, scenario, without_shm=True), claims={"ddp-ckpt": tmp_path / "claim"}, secrets=GROUP_SECRET)
    assert cluster.run(timeout=120) == "Failed", cluster.decisions
    restarts = [d for d in cluster.decisions if d.startswith(("jobset", "volcano"))]
    if target == "volcano":
        assert restarts == ["volcano RestartJob (1 of 1)", "volcano RestartJob: maxRetry reached"]
    else:
        assert restarts == ["jobset RestartJobSet (1 of 1 counted)", "jobset RestartJobSet: maxRestarts reached"]
        assert [d for d in cluster.decisions if d.startswith("job ")] == ["job ddp-node-0 failed: BackoffLimitExceeded"] * 2
    exits = [d for d in cluster.decisions if d.startswith("pod ")]
    assert len(exits) == 2 and all(d.endswith("exited 138") for d in exits), cluster.decisions
    for running in cluster.finished:
        log = running.log.read_text()
        if running.code == 138:
            assert "item=disk-size shm status=failed value=64.0MiB need=>1.0GiB" in log, log
            assert "train_ddp" not in log.replace(str(EXAMPLE), "")  # the training never started


def reference_run(tmp_path: Path) -> Path:
    """The example trained without a fault, one process per node on this machine, as its own docstring runs it."""
    from kit.processes import free_port

    out = tmp_path / "reference"
    env = {**IMAGE_ENV, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"}
    argv = [sys.executable, str(EXAMPLE), "--ckpt", str(out / "ckpt"), "--out", str(out / "final"), "--steps", str(STEPS), "--every", "4", "--step-time", "0"]
    ranks = [subprocess.Popen(argv, env={**env, "RANK": str(rank)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]
    outputs = [rank.communicate(timeout=120)[0] for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], outputs
    return out / "final"


def kill_trainer(hostname: str, after: str) -> Callable[[Cluster], None]:
    """A fault: SIGKILL the training process in the pod named ``hostname`` once its output shows ``after``."""
    killed: list[int] = []

    def fault(cluster: Cluster) -> None:
        running = next((r for r in cluster.running.values() if r.pod.hostname == hostname), None)
        if killed or running is None or after not in running.log.read_text(errors="replace"):
            return
        for pid in descendants(running.process.pid):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if len(argv) > 1 and argv[1].endswith(b"train_ddp.py"):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                cluster.decisions.append(f"SIGKILL {hostname}'s trainer")

    return fault


@pytest.mark.slow
def test_a_jobset_a_trainjob_and_a_volcano_job_from_one_scenario_train_the_example_to_the_end_through_a_trainers_sigkill(cli, write, clusters, tmp_path):
    """Two nodes each, built from one scenario, run as pods: node 1's trainer is SIGKILLed at step 10; the agents
    restart both in place from the newest complete checkpoint, and the run ends with the weights and the step of
    one that never stopped. The TrainJob's pods also carry what Trainer's torch plugin hands torchrun."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("the example trains with torch")
    expected = reference_run(tmp_path)
    scenario = write("ha.yaml", TRAINING)
    took: dict[str, float] = {}
    for target, node1 in (("jobset", "ddp-node-0-1"), ("trainjob", "ddp-node-0-1"), ("volcano", "ddp-worker-1")):
        claim = tmp_path / f"{target}-claim"
        claim.mkdir()
        cluster = clusters(built(cli, target, scenario), target, claims={"ddp-ckpt": claim}, secrets=GROUP_SECRET)
        started = time.monotonic()
        phase = cluster.run(timeout=240, faults=(kill_trainer(node1, "rank 1 step 10 "),))
        took[target] = time.monotonic() - started
        assert phase == "Completed", f"{cluster.decisions}\n{cluster.logs()}"
        assert f"SIGKILL {node1}'s trainer" in cluster.decisions
        assert sorted(d for d in cluster.decisions if d.startswith("pod ")) == [f"pod {node1[:-1]}0 exited 0", f"pod {node1} exited 0"]
        for rank in (0, 1):
            assert (claim / "final" / f"rank{rank}.pt").read_bytes() == (expected / f"rank{rank}.pt").read_bytes(), f"{target} rank {rank}"
        events = [json.loads(line) for line in (claim / ".hacfg/node-1/events.jsonl").read_text().splitlines()]
        [fault] = [e for e in events if e["event"] == "attempt_exit" and e["cause"] == "environment"]
        assert fault["reason"] == "exit 137: a worker was killed by SIGKILL"
        resumed = [e["resume_from"] for e in events if e["event"] == "attempt_start"]
        assert len(resumed) == 2 and resumed[0] is None and 8 <= int(resumed[1].removeprefix("/mnt/hacfg/ckpt/step_")) < STEPS, resumed
        assert (claim / f"step_{STEPS}" / ".complete").exists()  # the last step, saved as an uninterrupted run saves it
        if target == "trainjob":  # torchrun alone, reading PET_*, would meet the same peers
            env = next(r.env for r in cluster.finished if r.pod.hostname == node1)
            pet = [env[f"PET_{name}"] for name in ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")]
            assert pet == [env[name] for name in ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")] == ["2", "1", "ddp-node-0-0.ddp", "29500"]
    print(" ".join(f"{target} {seconds:.1f} s" for target, seconds in took.items()))  # pytest -s shows the journeys' times


# --- MindCluster: its Volcano, its device plugin's cards, its HCCL controller's rank table

# npu-smi as the Ascend reference prints it for an 8-card node ("查询所有NPU设备", npusmi_012, the block per NPU ID;
# "查询指定芯片健康状态", npusmi_028): every card OK.
NPU_SMI = """#!/bin/sh
case "$*" in
  "info -l") echo "        Card Count                     : 8"
             for id in 0 1 2 3 4 5 6 7; do printf '\\n        NPU ID                         : %s\\n        Chip Count                     : 1\\n' "$id"; done ;;
  "info -t health -i "*) printf '        Health Status                  : OK\\n        Error Code                     : NA\\n        Error Information              : NA\\n' ;;
  *) exit 2 ;;
esac
"""
# The trainer: it starts only on a completed rank table (as HCCL does), and on node 1's first attempt its NPU is lost.
NPU_TRAINER = """
import json, os, pathlib, sys
table = json.loads(pathlib.Path(os.environ["RANK_TABLE_FILE"]).read_text())
assert table["status"] == "completed", table
servers = [server["server_id"] for server in table["server_list"]]
print(f"node {os.environ['NODE_RANK']}: rank table of {len(servers)} servers, {os.environ['ASCEND_VISIBLE_DEVICES']} visible", flush=True)
lost = pathlib.Path("/mnt/hacfg/ckpt/npu-lost")
if os.environ["NODE_RANK"] == "1" and not lost.exists():
    lost.touch()
    sys.stdout.write(pathlib.Path(os.environ["NPU_LOG"]).read_text())
    sys.exit(1)
"""
MINDCLUSTER = """version: 1
scenario: multi-node
job:
  name: npu
  nodes: 2
  accelerator: npu
  flavor: modelarts.pool.visual.npu.8snt9b3.d
  image: org/train-npu:1.0
  command: python /mnt/hacfg/ckpt/train.py
  environment: {NPU_LOG: /mnt/hacfg/ckpt/lost.log}
checkpoint: {path: /mnt/hacfg/ckpt}
restart: {max: 3}
kubernetes: {checkpoint_claim: npu-ckpt}
"""


def hccl_controller(cluster: Cluster) -> None:
    """MindCluster's HCCL controller: it writes the completed rank table (8 cards a server) into the job's
    rings-config ConfigMap, which the kubelet updates in every pod that mounts it; a new pod mounts it as
    made, initializing. Here it writes once the pod's agent says it waits for it, so that every attempt shows
    the wait (a controller is not bound to be slower than the agent's start)."""
    for running in cluster.running.values():
        table = running.scratch / "configmap-ascend-910-config" / "hccl.json"
        waiting = "is initializing: waiting" in running.log.read_text(errors="replace")
        if waiting and json.loads(table.read_text())["status"] == "initializing":
            rank_table(table, nodes=len(cluster.pods()), cards=8)


@pytest.fixture
def user_folder():
    """/user, under which MindCluster mounts the rank table: the harness overlays a folder that exists, never the
    root, so the test makes it (empty) when this machine has none, and takes it away after."""
    top = Path("/user")
    made = not top.exists()
    top.mkdir(exist_ok=True)
    yield top
    if made:
        top.rmdir()


@pytest.mark.slow
@pytest.mark.usefixtures("user_folder")
def test_a_mindcluster_job_waits_for_its_rank_table_and_a_lost_npu_moves_it_through_volcanos_exit_code_policy(cli, write, clusters, tmp_path):
    """The mindcluster target's pods, with an 8-card device plugin and npu-smi: each agent waits while MindCluster's
    rank table is initializing (the controller completes it once the agent says so), the NPU pre-check passes, and the training starts on the completed table. Node 1's
    NPU is lost (the log a vllm-ascend user pasted): the agents exit 138, Volcano restarts the job (exitCode 138,
    counted), each new pod waits for its table again, and the job completes."""
    claim = tmp_path / "claim"
    claim.mkdir()
    (claim / "train.py").write_text(NPU_TRAINER)
    shutil.copy(REPO / "tests/data/failure-logs/npu-el0001-lost-heartbeat-vllm-ascend-8186.log", claim / "lost.log")
    tools = tmp_path / "image-bin"
    tools.mkdir()
    (tools / "npu-smi").write_text(NPU_SMI)
    (tools / "npu-smi").chmod(0o755)
    objects = built(cli, "mindcluster", write("ha.yaml", MINDCLUSTER))
    cluster = clusters(objects, claims={"npu-ckpt": claim}, secrets={"npu-hacfg-group": {"secret": "0f" * 32}}, path=f"{tools}:{IMAGE_ENV['PATH']}")
    assert cluster.run(timeout=180, faults=(hccl_controller,)) == "Completed", f"{cluster.decisions}\n{cluster.logs()}"
    first, restart, *ends = cluster.decisions
    assert first.endswith("exited 138") and restart == "volcano RestartJob (1 of 3)", cluster.decisions  # whichever agent said it first
    assert sorted(ends) == ["Completed", "pod npu-worker-0 exited 0", "pod npu-worker-1 exited 0"], cluster.decisions
    for log in cluster.output("npu-worker-1"):
        assert "RANK_TABLE_FILE /user/serverid/devindex/config/hccl.json is initializing: waiting" in log, log
        assert "item=npu-check devices status=passed value=8 need=>=8" in log, log
        assert "node 1: rank table of 2 servers, 0,1,2,3,4,5,6,7 visible" in log, log
    events = [json.loads(line) for line in (claim / ".hacfg/node-1/events.jsonl").read_text().splitlines()]
    [lost] = [e for e in events if e["event"] == "attempt_exit" and e.get("cause") == "environment"]
    assert "an NPU lost" in json.dumps(lost) and "Device_Absent" in json.dumps(lost), lost
