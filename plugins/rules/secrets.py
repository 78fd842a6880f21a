"""Secrets in clear: an environment variable whose name says it holds a secret, with its value in the file."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from hacfg.plugin import (
    JobContext,
    LogicalPath,
    Manifest,
    ManifestContext,
    Problem,
    Rule,
    ScenarioContext,
    hookimpl,
    lookup,
    rule,
)
from hacfg.plugin import kubernetes as k8s


@rule("HA034", "secret-in-clear", "warning")
def secret_in_clear(ctx: ScenarioContext) -> Iterator[Problem]:
    """An environment variable that holds a secret has its value written in the file.

    ## What it does
    Fires for each environment variable whose name says it holds a secret and whose value is
    written out: in a scenario's `job.environment`, a request body's `algorithm.environments`,
    a container's `env` in a JobSet or Kubeflow Trainer manifest. A name holds a secret when it
    has `SECRET` in it (kube-linter's `env-var-secret`), a word `PASSWORD`, `PASSWD`,
    `PASSPHRASE` or `CREDENTIALS`, or ends in `_KEY`, `_TOKEN`, `_SK` or `_PWD`
    (`WANDB_API_KEY`, `HF_TOKEN`, `HUAWEICLOUD_SDK_SK`). A value from `valueFrom` is not one.

    ## Why is this bad?
    The file is committed, reviewed and copied; the value goes wherever it goes. In a pod spec it
    is readable by everyone who may read the pod, and a ConfigMap is readable by Kubernetes'
    built-in `view` role. A leaked cloud key or API token is spent before anyone notices.

    ## Example
    ```yaml
    job:
      environment: {WANDB_API_KEY: 0123456789abcdef}
    ```

    ## Fix
    Keep the value out of the file. On Kubernetes, name the Secret's key:
    `kubernetes: {secrets: {WANDB_API_KEY: {name: wandb, key: api-key}}}` in a scenario file
    (`hacfg build` writes a `secretKeyRef`), `valueFrom: {secretKeyRef: {name: wandb, key: api-key}}`
    in a manifest. Elsewhere, have the job read it at start-up from storage only it can read.
    """
    yield from _in_clear(ctx.environment, ctx.ENVIRONMENT)


@secret_in_clear.job
def secret_in_clear_in_body(ctx: JobContext) -> Iterator[Problem]:
    yield from _in_clear(ctx.environment, ctx.ENVIRONMENT)


@secret_in_clear.manifest
def secret_in_clear_in_manifest(ctx: ManifestContext) -> Iterator[Problem]:
    manifest = ctx.manifest
    for path, job in manifest.replicated_jobs():
        pod = Manifest.pod(job)
        for field in ("containers", "initContainers"):
            for index, container in enumerate(pod.get(field) or []):
                at = (*path, "template", "spec", "template", "spec", field, index, "env")
                yield from _in_env_list(lookup(container, ("env",)), at)
    if manifest.kind == "TrainJob":
        yield from _in_env_list(manifest.get(("spec", "trainer", "env")), ("spec", "trainer", "env"))


def _in_clear(environment: Mapping[Any, Any], at: LogicalPath) -> Iterator[Problem]:
    for name, value in environment.items():
        if isinstance(name, str) and k8s.looks_secret(name) and str(value or "").strip():
            yield Problem((*at, name), _message(name))


def _in_env_list(env: Any, at: LogicalPath) -> Iterator[Problem]:
    for index, variable in enumerate(env if isinstance(env, list) else []):
        name = variable.get("name") if isinstance(variable, dict) else None
        if isinstance(name, str) and k8s.looks_secret(name) and str(variable.get("value") or "").strip():
            yield Problem((*at, index, "value"), _message(name))


def _message(name: str) -> str:
    return f"{name} holds a secret and its value is written here: read it from a Secret's key instead"


@hookimpl
def hacfg_rules() -> list[Rule]:
    return [secret_in_clear]
