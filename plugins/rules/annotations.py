"""Annotation values: the platform reads a Map<String,String> with exact spellings."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hacfg.plugin import (
    Fix,
    JobContext,
    Problem,
    Rule,
    ScenarioContext,
    annotation_path,
    did_you_mean,
    hookimpl,
    passthrough_overrides,
    rule,
)
from hacfg.plugin import modelarts as ma


@rule("HA007", "annotation-not-string", "error", kind="job")
def annotation_not_string(ctx: JobContext) -> Iterator[Problem]:
    """An annotation value is not a string.

    ## What it does
    Fires for every annotation whose value is a number, a boolean, null or a structure, such as
    `3` or `true` unquoted in JSON.

    ## Why is this bad?
    `metadata.annotations` is a `Map<String,String>`: the API rejects the request, or an SDK
    drops the value on the way.

    ## Example
    ```json
    {"fault-tolerance/job-retry-num": 3, "fault-tolerance/hang-retry": true}
    ```

    ## Fix
    Quote it: `"3"`, `"true"`. `hacfg fix` does this for numbers and booleans (a switch's `0`
    or `1` becomes `"false"` or `"true"`, the only spellings the platform reads).
    """
    for key, value in ctx.body.annotations.items():
        if isinstance(value, str):
            continue
        path = annotation_path(key)
        fix = None
        if isinstance(value, bool | int | float):
            written = ma.annotation_string(value)
            # a switch gets the one spelling the platform reads, so HA015 has nothing left to fix
            quoted = _json(_switch_spelling(written) or written if key in ma.BOOLEAN_ANNOTATIONS else written)
            fix = Fix(path, quoted, f"quote the value: {quoted}")
        yield Problem(path, f"annotation {key} must be a string, not {_json(value)}: quote it", fix=fix)


@rule("HA008", "unknown-fault-tolerance-key", "error", kind="job")
def unknown_fault_tolerance_key(ctx: JobContext) -> Iterator[Problem]:
    """An unknown `fault-tolerance/*` annotation key.

    ## What it does
    Fires for a `fault-tolerance/` key that the platform does not define, and suggests the
    nearest real one.

    ## Why is this bad?
    The platform ignores unknown annotations silently: a typo like `job-retry-nums` means
    auto restart is off while the file says it is on.

    ## Example
    ```json
    {"fault-tolerance/hang-retires": "true"}
    ```

    ## Fix
    Use one of `fault-tolerance/job-retry-num`, `job-unconditional-retry`, `hang-retry`,
    `pod-retry-num`, `hccl_op_retry`.
    """
    for key in ctx.body.annotations:
        if isinstance(key, str) and key.startswith(ma.FAULT_TOLERANCE_PREFIX) and key not in ma.FAULT_TOLERANCE_KEYS:
            hint = did_you_mean(key, list(ma.FAULT_TOLERANCE_KEYS))
            yield Problem(annotation_path(key), f"unknown annotation {key}{hint}", on_key=True)


@rule("HA015", "boolean-annotation-spelling", "error", kind="job")
def boolean_annotation_spelling(ctx: JobContext) -> Iterator[Problem]:
    """A boolean annotation is not exactly `"true"` or `"false"`.

    ## What it does
    Fires when a switch annotation (`job-unconditional-retry`, `hang-retry`, `hccl_op_retry`,
    `tensorboard/enable`, ...) holds a string such as `"True"`, `"yes"` or `"1"`.

    ## Why is this bad?
    The platform compares the exact string `"true"`; anything else reads as off.

    ## Example
    ```json
    {"fault-tolerance/hang-retry": "True"}
    ```

    ## Fix
    `"true"` or `"false"`, lower case. `hacfg fix` normalises the common spellings.
    """
    for key in ma.BOOLEAN_ANNOTATIONS:
        value = ctx.body.annotations.get(key)
        if not isinstance(value, str) or value in ("true", "false"):
            continue
        meant = _switch_spelling(value)
        fix = Fix(annotation_path(key), _json(meant), f'write "{meant}"') if meant else None
        hint = f'write "{meant}"' if meant else 'use "true" or "false"'
        message = f'{key} is {_json(value)}; the platform reads only "true" or "false": {hint}'
        yield Problem(annotation_path(key), message, fix=fix)


def _json(value: Any) -> str:
    """``value`` as JSON writes it: quoted as the file would hold it. The module is imported only for
    a finding, so a lint without one does without it."""
    import json

    return json.dumps(value)


def _switch_spelling(written: str) -> str | None:
    """``"true"`` or ``"false"`` for the ways people write a switch (``"Yes"``, ``"0"``), else None."""
    word = written.strip().lower()
    return "true" if word in ma.TRUE_SPELLINGS else "false" if word in ma.FALSE_SPELLINGS else None


@rule("HA020", "passthrough-owns-key", "error")
def passthrough_owns_key(ctx: ScenarioContext) -> Iterator[Problem]:
    """`passthrough` sets a key that hacfg writes from the scenario.

    ## What it does
    Fires for each `fault-tolerance/*` annotation hacfg emits (`job-retry-num`,
    `job-unconditional-retry`, `hang-retry`, `pod-retry-num`, `hccl_op_retry`) and each
    platform variable it owns (`MA_HANG_DETECT_TIME`, `MA_DETECT_TRAIN_INJECT_CODE`) under
    `passthrough` whose value is not exactly what the scenario's own key means (`hacfg import`
    keeps `"false"` and the default hang time there, which agree).

    ## Why is this bad?
    `passthrough` is merged last: its value silently replaces what `restart:`, `hang:` and
    `precheck:` say, so the file reads one way and the job runs another.

    ## Example
    ```yaml
    restart: {max: 8, on_hang: true}
    passthrough:
      metadata:
        annotations: {fault-tolerance/hang-retry: "false"}
    ```

    ## Fix
    Say it with the scenario's own key (`restart.on_hang: false`) and remove it from `passthrough`.
    """
    for override in passthrough_overrides(ctx.config):
        message = (
            f"passthrough sets {override.key} to {_json(override.value)} over {override.owner} "
            f"({_json(override.means)}): say it with {override.owner} and remove it here"
        )
        yield Problem(override.at, message, on_key=True)


@hookimpl
def hacfg_rules() -> list[Rule]:
    return [annotation_not_string, unknown_fault_tolerance_key, boolean_annotation_spelling, passthrough_owns_key]
