"""Hand-written JobSets and Kubeflow Trainer runtimes: the restart traps of their failure policies."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from hacfg.plugin import Manifest, ManifestContext, Problem, Rule, hookimpl, lookup, rule
from hacfg.plugin import kubernetes as k8s

# Volume sources that live and die with the pod, or only hold what Kubernetes hands it; a hostPath stays
# on a node a restart may leave.
NOT_DURABLE = frozenset({"configMap", "secret", "downwardAPI", "projected", "emptyDir", "ephemeral", "hostPath"})
# What in a command line says the training resumes: our agent, or a script's own resume option.
RESUMES = ("hacfg agent", "resume", "--load")


def _restarting(ctx: ManifestContext) -> bool:
    """Whether the JobSet restarts at all: within ``maxRestarts``, or by a rule that ignores it."""
    rules = ctx.manifest.failure_policy.get("rules")
    uncounted = any(isinstance(r, dict) and r.get("action") in k8s.UNCOUNTED_ACTIONS for r in rules or [])
    return ctx.manifest.max_restarts > 0 or uncounted


@rule("HA030", "jobset-fails-on-retry-elsewhere", "error", kind="manifest")
def jobset_fails_on_retry_elsewhere(ctx: ManifestContext) -> Iterator[Problem]:
    """A failure policy rule fails the JobSet on exit 138, which asks for a restart elsewhere.

    ## What it does
    Follows a pod's exit with code 138 through the Job's `podFailurePolicy` (the first rule
    whose `onExitCodes` matches it) to the reason and message the Job fails with, then through
    the JobSet's `failurePolicy.rules` (the first whose reasons, message patterns and replicated
    Jobs match), and fires when that rule's action is `FailJobSet` while `maxRestarts` allows
    restarts.

    ## Why is this bad?
    `hacfg agent` exits 138 when its in-place budget is spent or a pre-check failed: the node is
    bad, the code is not. Kubeflow reads 138 the same way. A `FailJobSet` rule that catches it,
    often a catch-all on `PodFailurePolicy` below a `FailJob` on every non-zero code, ends the run
    on the failures a restart on other nodes would survive.

    ## Example
    ```yaml
    podFailurePolicy:
      rules:
      - {action: FailJob, onExitCodes: {operator: NotIn, values: [0]}}
    # and in the JobSet
    failurePolicy:
      maxRestarts: 5
      rules:
      - {name: userError, action: FailJobSet, onJobFailureReasons: [PodFailurePolicy]}
    ```

    ## Fix
    Leave 138 out of the `FailJob` codes (`operator: NotIn, values: [137, 138, 143]`), so the
    pod's failure exceeds `backoffLimit` and restarts the JobSet, or put a `RestartJobSet` rule
    that matches it before the `FailJobSet` one. `hacfg build --target jobset` writes both.
    """
    from hacfg.plugin import RETRY_ELSEWHERE  # here: only a manifest that restarts pays for the restart rules

    if ctx.manifest.max_restarts <= 0:  # no restart that 138 could count against
        return
    rules = ctx.manifest.failure_policy.get("rules")
    for path, job in ctx.manifest.replicated_jobs():
        failure = _job_failure_on(job, RETRY_ELSEWHERE)
        name = ctx.manifest.get((*path, "name"))
        matched = _first_rule(rules, failure, name) if failure else None
        if failure is None or matched is None or matched[1].get("action") != k8s.FAIL_JOBSET:
            continue
        yield Problem(
            (*(ctx.manifest.jobset_at or ()), "failurePolicy", "rules", matched[0], "action"),
            f"a pod of {name!r} exiting {RETRY_ELSEWHERE} (retry elsewhere) fails its Job with {failure[0]} and "
            f"this rule fails the JobSet: keep {RETRY_ELSEWHERE} out of the FailJob codes, or restart on it first",
        )


def _job_failure_on(job: dict[Any, Any], code: int) -> tuple[str, str] | None:
    """The reason and message a Job fails with when a pod exits ``code``; None when it does not fail for it."""
    policy = job.get("podFailurePolicy")
    rules = policy.get("rules") if isinstance(policy, dict) else None
    for index, pod_rule in enumerate(rules if isinstance(rules, list) else []):
        on = pod_rule.get("onExitCodes") if isinstance(pod_rule, dict) else None
        if not isinstance(on, dict) or not isinstance(on.get("values"), list):
            continue
        inside = code in on["values"]
        if inside != (on.get("operator") == "In"):
            continue
        action = pod_rule.get("action")
        if action == "FailJob":
            container = on.get("containerName") or "main"
            pod = f"Container {container} for pod default/pod"  # the Job controller's message, for the patterns
            return k8s.POD_FAILURE_POLICY, f"{pod} failed with exit code {code} matching FailJob rule at index {index}"
        if action == "Count":
            break
        return None  # Ignore: the pod is replaced; FailIndex: only that index
    return k8s.BACKOFF_LIMIT_EXCEEDED, "Job has reached the specified backoff limit"


def _first_rule(rules: Any, failure: tuple[str, str], replicated_job: Any) -> tuple[int, dict[Any, Any]] | None:
    """The JobSet failure policy rule that acts on ``failure`` (reason, message), as JobSet picks it."""
    reason, message = failure
    for index, candidate in enumerate(rules if isinstance(rules, list) else []):
        if not isinstance(candidate, dict):
            continue
        reasons = candidate.get("onJobFailureReasons") or []
        patterns = candidate.get("onJobFailureMessagePatterns") or []
        targets = candidate.get("targetReplicatedJobs") or []
        if reasons and reason not in reasons:
            continue
        if patterns and not any(_search(pattern, message) for pattern in patterns):
            continue
        if targets and replicated_job not in targets:
            continue
        return index, candidate
    return None


def _search(pattern: Any, message: str) -> bool:
    try:
        return isinstance(pattern, str) and re.search(pattern, message) is not None
    except re.error:  # JobSet logs an invalid pattern and skips it
        return False


@rule("HA031", "in-place-without-prerequisites", "error", kind="manifest")
def in_place_restart_without_prerequisites(ctx: ManifestContext) -> Iterator[Problem]:
    """`InPlaceRestart` without what it needs in every replicated Job.

    ## What it does
    When `failurePolicy.restartStrategy` is `InPlaceRestart`, checks each replicated Job for
    `backoffLimit: 2147483647`, `podReplacementPolicy: Failed`, JobSet's in-place restart agent
    and a `serviceAccountName`. The agent is found as JobSet's examples run it: named in a
    container's command or image (`/in-place-restart-agent`); as an init sidecar
    (`restartPolicy: Always`) whose probe waits on `/barrier-is-down`; or as the image's
    entrypoint, in a container with no command of its own that hands the agent its
    `WORKER_COMMAND`. Where none of these shows it, the pod template's annotation
    `hacfg.io/in-place-restart-agent: CONTAINER` says which container's image runs it.

    ## Why is this bad?
    In-place restart keeps the pods and restarts their containers, orchestrated by JobSet's agent
    in each pod, which patches its own pod (the default service account may not). With a low
    `backoffLimit` the first restarted container fails the Job and the JobSet is recreated after
    all; without `podReplacementPolicy: Failed` a replacement pod starts beside a dying one. The
    manifest is accepted and restarts slowly, or not at all.

    ## Example
    ```yaml
    failurePolicy: {maxRestarts: 3, restartStrategy: InPlaceRestart}
    replicatedJobs:
    - name: node
      template:
        spec:
          backoffLimit: 0
    ```

    ## Fix
    Set the Job's `backoffLimit: 2147483647` and `podReplacementPolicy: Failed`, run the worker
    under JobSet's in-place restart agent, and give the pods a service account that may patch
    them (JobSet's `jobset-in-place-restart` example). `kubernetes: {restart_strategy:
    InPlaceRestart, service_account: ...}` in a scenario file makes `hacfg build` write all of it.
    """
    policy = ctx.manifest.failure_policy
    if policy.get("restartStrategy") != "InPlaceRestart":
        return
    at = (*(ctx.manifest.jobset_at or ()), "failurePolicy", "restartStrategy")
    for path, job in ctx.manifest.replicated_jobs():
        pod = Manifest.pod(job)
        lacks = []
        if job.get("backoffLimit") != k8s.IN_PLACE_BACKOFF_LIMIT:
            lacks.append(f"backoffLimit: {k8s.IN_PLACE_BACKOFF_LIMIT}")
        if job.get("podReplacementPolicy") != k8s.IN_PLACE_REPLACEMENT:
            lacks.append(f"podReplacementPolicy: {k8s.IN_PLACE_REPLACEMENT}")
        if not _runs_in_place_agent(job):
            lacks.append("JobSet's in-place restart agent")
        if not pod.get("serviceAccountName"):
            lacks.append("a serviceAccountName that may patch its pod")
        if lacks:
            name = ctx.manifest.get((*path, "name"))
            yield Problem(at, f"InPlaceRestart needs in replicated job {name!r}: {', '.join(lacks)}")


def _runs_in_place_agent(job: dict[Any, Any]) -> bool:
    """Whether a Job's pods run JobSet's in-place restart agent, in any of the ways its examples do."""
    pod = Manifest.pod(job)
    annotations = lookup(job, ("template", "metadata", "annotations"))
    declared = annotations.get(k8s.IN_PLACE_AGENT_ANNOTATION) if isinstance(annotations, dict) else None
    agent = k8s.IN_PLACE_AGENT.lstrip("/")

    def runs_it(container: dict[Any, Any]) -> bool:
        named = agent in Manifest.command_line(container) or agent in str(container.get("image", ""))
        return named or _waits_on_barrier(container) or container.get("name") == declared

    # an init container without restartPolicy: Always runs to its end before the worker starts: no agent
    sidecars = [
        c for c in Manifest.containers({"containers": pod.get("initContainers")}) if c.get("restartPolicy") == "Always"
    ]
    if any(runs_it(sidecar) for sidecar in sidecars):
        return True
    for container in Manifest.containers(pod):
        env = {e.get("name") for e in container.get("env") or [] if isinstance(e, dict)}
        entrypoint = not container.get("command") and k8s.IN_PLACE_WORKER_COMMAND in env  # main-container mode
        if runs_it(container) or entrypoint:
            return True
    return False


def _waits_on_barrier(container: dict[Any, Any]) -> bool:
    probes = (container.get(kind) for kind in ("startupProbe", "readinessProbe", "livenessProbe"))
    return any(lookup(probe, ("httpGet", "path")) == k8s.IN_PLACE_BARRIER for probe in probes)


@rule("HA032", "restart-without-checkpoint-volume", "warning", kind="manifest")
def restart_without_checkpoint_volume(ctx: ManifestContext) -> Iterator[Problem]:
    """A JobSet that restarts has a container that mounts no durable volume to resume from.

    ## What it does
    When the JobSet restarts (`maxRestarts` above 0, or a rule whose action ignores it), fires
    for each container of a replicated Job's pods that mounts no volume outliving the pod: a
    `persistentVolumeClaim`, `nfs`, `csi` or another network volume, or a claim of the JobSet's
    `volumeClaimPolicies`. ConfigMaps, Secrets, `emptyDir`, ephemeral volumes and `hostPath` do
    not count.

    ## Why is this bad?
    A restart recreates the pods (or their containers, in place) on whatever nodes are free;
    what the training saved inside the pod is gone. Every restart then starts from step 0 and
    the restart budget buys nothing but time.

    ## Example
    ```yaml
    containers:
    - name: node
      volumeMounts: [{name: config, mountPath: /etc/hacfg}]
    volumes:
    - {name: config, configMap: {name: train-hacfg}}
    ```

    ## Fix
    Mount the checkpoint storage in every container:
    `volumes: [{name: checkpoint, persistentVolumeClaim: {claimName: ckpt}}]` and a
    `volumeMounts` entry at the checkpoint path (`kubernetes: {checkpoint_claim: ckpt}` in a
    scenario file makes `hacfg build` write both).
    """
    if not _restarting(ctx):
        return
    claims = _claim_templates(ctx.manifest)
    for path, job in ctx.manifest.replicated_jobs():
        pod = Manifest.pod(job)
        durable = claims | {
            v.get("name") for v in pod.get("volumes") or [] if isinstance(v, dict) and not (v.keys() & NOT_DURABLE)
        }
        for index, container in enumerate(Manifest.containers(pod)):
            mounts = {m.get("name") for m in container.get("volumeMounts") or [] if isinstance(m, dict)}
            if not mounts & durable:
                at = (*path, "template", "spec", "template", "spec", "containers", index, "name")
                yield Problem(
                    at,
                    f"container {container.get('name')!r} mounts no durable volume: each restart starts from "
                    "nothing; mount the checkpoint storage (a PersistentVolumeClaim) in every pod",
                )


def _claim_templates(manifest: Manifest) -> set[Any]:
    """The volumes JobSet's ``volumeClaimPolicies`` add to the pods, by name."""
    policies = manifest.get((*(manifest.jobset_at or ()), "volumeClaimPolicies")) if manifest.jobset_at else None
    names = set()
    for policy in policies if isinstance(policies, list) else []:
        templates = policy.get("templates") if isinstance(policy, dict) else None
        for template in templates if isinstance(templates, list) else []:
            names.add(template.get("metadata", {}).get("name") if isinstance(template, dict) else None)
    return names - {None}


@rule("HA033", "restarts-without-agent-or-resume", "warning", kind="manifest")
def restarts_without_agent_or_resume(ctx: ManifestContext) -> Iterator[Problem]:
    """`maxRestarts` above 0 while no container runs `hacfg agent` or passes a resume path.

    ## What it does
    When the JobSet restarts (`failurePolicy.maxRestarts` above 0, or a rule whose action ignores
    it), fires for each replicated Job none of whose containers runs under `hacfg agent` or
    mentions a resume option (`resume`, `--load`) in its command, arguments or environment.

    ## Why is this bad?
    JobSet restarts the pods; it does not tell the training where it stopped. Without an agent
    that finds the newest complete checkpoint (`HACFG_RESUME_FROM`), or a script told to resume,
    every restart trains from step 0 again, and each failure costs the whole run so far.

    ## Example
    ```yaml
    failurePolicy: {maxRestarts: 5}
    ...
    containers:
    - {name: node, command: [python, train.py]}
    ```

    ## Fix
    Run the command under the agent, `command: [hacfg, agent, --config, /etc/hacfg/ha.yaml,
    --, python, train.py]` (`hacfg build --target jobset` writes it), or pass the script its
    resume option, `python train.py --resume-from /ckpt/latest`.
    """
    if not _restarting(ctx):
        return
    for path, job in ctx.manifest.replicated_jobs():
        lines = [Manifest.command_line(c) for c in Manifest.containers(Manifest.pod(job), init=True)]
        if not any(word in line for line in lines for word in RESUMES):
            name = ctx.manifest.get((*path, "name"))
            yield Problem(
                (*path, "name"),
                f"replicated job {name!r} restarts from step 0: run its command under `hacfg agent`, "
                "or pass the script its resume path",
            )


@hookimpl
def hacfg_rules() -> list[Rule]:
    return [
        jobset_fails_on_retry_elsewhere,
        in_place_restart_without_prerequisites,
        restart_without_checkpoint_volume,
        restarts_without_agent_or_resume,
    ]
