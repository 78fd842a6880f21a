"""ModelArts target: the body of ``POST /v2/{project_id}/training-jobs``.

Only keys that exist on the platform are emitted, every annotation value a string. An intent
with no platform key becomes a note on stderr rather than an invented key.
"""

from __future__ import annotations

import copy
from typing import Any

from hacfg.plugin import Build, HAConfig, Target, deep_merge, format_duration, hookimpl, lookup, schema_file
from hacfg.plugin import kubernetes as k8s
from hacfg.plugin import modelarts as ma

ACCELERATED = ("gpu", "npu")
# The API's ways to name what a job runs, besides a custom image and its command.
ALGORITHM_SOURCES = (("id",), ("subscription_id", "item_version_id"), ("code_dir", "boot_file"))


class ModelArts(Target):
    name = "modelarts"
    description = "ModelArts create-training-job request body (JSON)"
    schema = schema_file("modelarts-training-job.schema.json")
    parts = ("annotations",)

    def build(self, config: HAConfig) -> Build:
        built = Build({})
        annotations = self._annotations(config, built)
        environments = self._environments(config, built)
        job = config.job
        algorithm: dict[str, Any] = {}
        if job.image:
            algorithm["engine"] = {"image_url": job.image}
            built.origins[("algorithm", "engine", "image_url")] = ("job", "image")
        if job.command:
            algorithm["command"] = job.command
            built.origins[("algorithm", "command")] = ("job", "command")
        if environments:
            algorithm["environments"] = environments
        resource: dict[str, Any] = {}
        if job.flavor:
            resource["flavor_id"] = job.flavor
            built.origins[("spec", "resource", "flavor_id")] = ("job", "flavor")
        resource["node_count"] = job.nodes
        built.origins[("spec", "resource", "node_count")] = ("job", "nodes")
        if job.pool:
            resource["pool_id"] = job.pool
            built.origins[("spec", "resource", "pool_id")] = ("job", "pool")
        built.origins[("metadata", "name")] = ("job", "name")
        own = {
            "kind": "job",
            "metadata": {"name": config.name, "annotations": annotations},
            "algorithm": algorithm,
            "spec": {"resource": resource},
        }
        built.document = deep_merge(own, config.passthrough)
        for path in _leaves(config.passthrough):
            built.origins[path] = ("passthrough", *path)
            if lookup(config.passthrough, path) is None and lookup(own, path) is not None:
                # a null over what hacfg writes leaves it out: a request that never set node_count
                parent = lookup(built.document, path[:-1])
                del parent[path[-1]]
        return built

    @staticmethod
    def _annotations(config: HAConfig, built: Build) -> dict[str, str]:
        restart = config.restart
        on = bool(restart.max)  # restart.max 0 turns auto restart off, and with it what refines it
        wanted = [
            (ma.JOB_RETRY_NUM, ("restart", "max"), str(restart.max) if on else None),
            (ma.UNCONDITIONAL_RETRY, ("restart", "unconditional"), "true" if on and restart.unconditional else None),
            (ma.HANG_RETRY, ("restart", "on_hang"), "true" if on and restart.on_hang else None),
            (
                ma.POD_RETRY_NUM,
                ("restart", "pod_reschedules"),
                str(restart.pod_reschedules) if on and restart.pod_reschedules else None,
            ),
            (ma.HCCL_OP_RETRY, ("operator_retry",), "true" if config.operator_retry else None),
        ]
        annotations = {}
        for key, origin, value in wanted:
            if value is not None:
                annotations[key] = value
                built.origins[("metadata", "annotations", key)] = origin
        if not on and (restart.unconditional or restart.on_hang or restart.pod_reschedules):
            built.notes.append(
                "restart.max 0 turns auto restart off: restart.unconditional, restart.on_hang and "
                "restart.pod_reschedules are left out (they take effect only with restart.max >= 1)"
            )
        return annotations

    @staticmethod
    def _environments(config: HAConfig, built: Build) -> dict[str, str]:
        environments = dict(config.job.environment)
        for name in environments:
            built.origins[("algorithm", "environments", name)] = ("job", "environment", name)
            if k8s.looks_secret(name) and environments[name]:  # a request body has no reference to a secret
                built.refused.append((
                    ("job", "environment", name),
                    f"job.environment {name} looks like a secret, and a ModelArts job request carries its "
                    "environment in clear: have the job read it at start-up from storage only it can read, or "
                    "rename it if it holds none (hacfg explain HA034)",
                ))
        watched = config.job.accelerator in ACCELERATED
        hang = config.hang
        if watched and hang.detect:
            seconds = hang.timeout.total_seconds()
            minutes = ma.hang_minutes(hang.timeout)
            if seconds % 60:
                built.notes.append(
                    f"hang.timeout {format_duration(hang.timeout)} rounded up to {minutes}m: "
                    "the platform counts whole minutes"
                )
            if minutes != ma.DEFAULT_HANG_MINUTES:
                environments[ma.HANG_DETECT_TIME] = str(minutes)
                built.origins[("algorithm", "environments", ma.HANG_DETECT_TIME)] = ("hang", "timeout")
        elif watched:
            built.notes.append(
                "hang.detect: false has no platform key: ModelArts watches every GPU/NPU job; "
                "raise hang.timeout to make it less eager"
            )
        if not config.precheck:
            environments[ma.PRECHECK_SWITCH] = "0"
            built.origins[("algorithm", "environments", ma.PRECHECK_SWITCH)] = ("precheck",)
        elif not config.restart.max:
            built.notes.append(
                "precheck: the platform runs the environment pre-check only with auto restart (restart.max >= 1)"
            )
        return environments

    def missing(self, config: HAConfig, document: dict[str, Any]) -> list[str]:
        """The API refuses a job with nothing to run or nowhere to run it."""
        algorithm = document.get("algorithm") or {}
        resource = (document.get("spec") or {}).get("resource") or {}
        found = []
        if not any(all(algorithm.get(key) for key in keys) for keys in ALGORITHM_SOURCES) and not (
            (algorithm.get("engine") or {}).get("image_url") and algorithm.get("command")
        ):
            found.append("no algorithm source: set job.image and job.command, or passthrough.algorithm.id")
        if not (resource.get("flavor_id") or resource.get("pool_id")):
            found.append("no flavor or pool: set job.flavor or job.pool")
        return found

    def part(self, document: dict[str, Any], name: str) -> dict[str, Any]:
        """What hacfg owns: the annotations, and the platform variables it sets (a hang timeout other than
        the platform's 30 minutes, the pre-check switched off), which an annotation cannot say."""
        part: dict[str, Any] = {"metadata": {"annotations": document["metadata"]["annotations"]}}
        environments = (document.get("algorithm") or {}).get("environments") or {}
        owned = {key: value for key, value in environments.items() if key in ma.SETTABLE_PLATFORM_VARIABLES}
        if owned:
            part["algorithm"] = {"environments": owned}
        return part

    def owns(self, path: tuple[Any, ...]) -> bool:
        key = path[2] if len(path) == 3 else None
        if path[:2] == ("metadata", "annotations"):
            return isinstance(key, str) and key.startswith(ma.FAULT_TOLERANCE_PREFIX)
        return path[:2] == ("algorithm", "environments") and key in ma.SETTABLE_PLATFORM_VARIABLES

    def merge_into(self, existing: dict[str, Any], document: dict[str, Any], config: HAConfig) -> dict[str, Any]:
        """hacfg owns the fault-tolerance annotations and the two platform variables; the rest is kept."""
        existing = copy.deepcopy(existing)
        metadata = existing.get("metadata")
        if isinstance(metadata, dict) and isinstance(metadata.get("annotations"), dict) and "metadata" in document:
            metadata["annotations"] = {
                k: v for k, v in metadata["annotations"].items() if not k.startswith(ma.FAULT_TOLERANCE_PREFIX)
            }
        algorithm = existing.get("algorithm")
        if isinstance(algorithm, dict) and isinstance(algorithm.get("environments"), dict) and "algorithm" in document:
            algorithm["environments"] = {
                k: v for k, v in algorithm["environments"].items() if k not in ma.SETTABLE_PLATFORM_VARIABLES
            }
        merged: dict[str, Any] = deep_merge(existing, document)
        return merged


def _leaves(tree: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(tree, dict) and tree:
        return [leaf for key, value in tree.items() for leaf in _leaves(value, (*path, key))]
    return [path] if path else []


@hookimpl
def hacfg_targets() -> list[Target]:
    return [ModelArts()]
