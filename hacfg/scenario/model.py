"""The scenario file's model, format version 1: what the linter, the targets and the agent read.

Frozen dataclasses whose annotations carry pydantic's constraints as strings, so importing the
model costs no pydantic. pydantic (:mod:`hacfg.scenario.validation`) is the authority on every verdict;
:mod:`hacfg.scenario.fastcheck` replays the schema pydantic compiles from these classes, and answers
alone only for documents it can prove valid.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeVar, dataclass_transform

from hacfg.scenario import kubernetes as k8s
from hacfg.scenario import modelarts as ma
from hacfg.scenario.kubernetes import DeviceResource, RestartStrategy
from hacfg.scenario.names import Platform, Scenario

if TYPE_CHECKING:
    # The annotations below are strings: pydantic reads them when hacfg.scenario.validation builds the
    # validator, with these names in scope there.
    from pydantic import (
        AfterValidator,
        BeforeValidator,
        Field,
        StrictBool,
        StrictFloat,
        StrictInt,
        StrictStr,
        ValidationInfo,
        WithJsonSchema,
    )

_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
DURATION_PATTERN = r"^(?=\d)(\d+d)?(\d+h)?(\d+m)?(\d+s)?$"
DURATION_JSON_SCHEMA = {"type": "string", "pattern": DURATION_PATTERN, "examples": ["90s", "30m", "2h", "1d"]}


def parse_duration(value: Any) -> Any:
    """``90s``, ``30m``, ``2h``, ``1d`` or a combination such as ``1h30m``."""
    if isinstance(value, timedelta):
        return value
    if not isinstance(value, str):
        raise ValueError(f"a duration needs a unit, like '30m' or '2h' (got {value!r})")
    match = _DURATION.fullmatch(value.strip())
    if not value.strip() or not match:
        raise ValueError(f"{value!r} is not a duration; use a number and a unit: 90s, 30m, 2h, 1d")
    too_long = f"a duration longer than {timedelta.max.days} days, the longest hacfg reads"
    if len(value) > _LONGEST_DURATION:  # before int(): a number past Python's int/str limit
        raise ValueError(too_long)
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    try:
        return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    except OverflowError:
        raise ValueError(too_long) from None


_LONGEST_DURATION = 80  # characters; four parts of 19 digits each are far past timedelta's limit



def duration_flag(text: str, flag: str) -> float:
    """A duration given on the command line (``30s``, ``2h``) in seconds; a bad one is an input error
    naming its flag."""
    from hacfg.scenario.source import InputError

    try:
        return float(parse_duration(text).total_seconds())
    except ValueError as err:
        raise InputError(f"{flag}: {err}") from None

def format_duration(value: timedelta) -> str:
    """The shortest spelling that ``parse_duration`` reads back."""
    seconds = int(value.total_seconds())
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            amount, seconds = divmod(seconds, size)
            if amount or not parts:
                parts.append(f"{amount}{unit}")
    return "".join(parts)


def numbers_as_strings(value: Any) -> Any:
    """Environment values are strings on the platform; a YAML number is what the user meant."""
    if isinstance(value, dict):
        return {k: str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v for k, v in value.items()}
    return value


def within_platform_limits(value: int, info: ValidationInfo) -> int:
    """``restart.max`` within the chosen platform's range (the context names the platform)."""
    platform = (info.context or {}).get("platform")
    if value and platform in ma.RETRY_LIMITS:
        low, high = ma.RETRY_LIMITS[platform]
        if not low <= value <= high:
            raise ValueError(f"{platform} allows {low} to {high} restarts (0 turns auto restart off), got {value}")
    return value


def above_shm_precheck(value: str) -> str:
    """``kubernetes.shm_size``: more than the agent's ``disk-size shm`` pre-check needs, or every pod fails it."""
    if k8s.quantity_bytes(value) <= ma.PRECHECK_SHM_MIN:
        raise ValueError(f"the agent's pre-check needs more than 1Gi at /dev/shm (disk-size shm), got {value}")
    return value


# Every leaf is strict (a quoted "3" is not a number; literals compare by value). The sections
# take mappings, and refuse keys they do not know.
_SECTION: dict[str, Any] = {"extra": "forbid"}


class _Section:
    """What a frozen dataclass generates for a section, written once for all of them: keyword
    arguments with the fields' defaults, no assignment after construction, and equality, hash and
    repr over the fields. Generated, these were compiled for each section at every import (about
    2 ms of a cold lint); ``@_section`` still records the fields as any dataclass's, which pydantic,
    :func:`dataclasses.replace` and :func:`dataclasses.fields` read."""

    __slots__ = ()

    def __init__(self, **values: Any) -> None:
        missing = []
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if f.name in values:
                value = values.pop(f.name)
            elif f.default is not dataclasses.MISSING:
                value = f.default
            elif f.default_factory is not dataclasses.MISSING:
                value = f.default_factory()
            else:
                missing.append(repr(f.name))
                continue
            object.__setattr__(self, f.name, value)
        if values:
            raise TypeError(f"{type(self).__qualname__}() got an unexpected keyword argument {next(iter(values))!r}")
        if missing:
            raise TypeError(f"{type(self).__qualname__}() missing keyword arguments: {', '.join(missing)}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self))  # type: ignore[arg-type]
        return f"{type(self).__qualname__}({shown})"


_S = TypeVar("_S", bound=_Section)


@dataclass_transform(kw_only_default=True, frozen_default=True)
def _section(cls: type[_S]) -> type[_S]:
    """A section's class as a dataclass whose methods :class:`_Section` gives: recording its
    fields is all there is left to do."""
    return dataclass(kw_only=True, init=False, eq=False, repr=False)(cls)


@_section
class Job(_Section):
    """What runs, and where."""

    __pydantic_config__: ClassVar[dict[str, Any]] = _SECTION

    name: Annotated[
        StrictStr | None,
        Field(pattern=ma.JOB_NAME_PATTERN, description="metadata.name; defaults to the scenario name."),
    ] = None
    nodes: Annotated[StrictInt, Field(ge=1, description="spec.resource.node_count")] = 1
    accelerator: Literal["gpu", "npu", "cpu"] = "gpu"
    network: Literal["infiniband", "roce", "ethernet"] = "ethernet"
    image: Annotated[
        StrictStr | None, Field(description="algorithm.engine.image_url (SWR org/image:tag)")] = None
    command: Annotated[
        StrictStr | None, Field(description="algorithm.command")] = None
    flavor: Annotated[
        StrictStr | None, Field(description="spec.resource.flavor_id")] = None
    cards: Annotated[
        StrictInt | None,
        Field(
            ge=0,
            description="Accelerator cards per node: what a pod requests of the device plugin, and what the "
            "agent's pre-check expects to see. Defaults to what job.flavor names (modelarts.pool.visual.8xlarge: 8).",
        ),
    ] = None
    pool: Annotated[
        StrictStr | None, Field(description="spec.resource.pool_id (dedicated pool)")] = None
    environment: Annotated[
        dict[StrictStr, StrictStr],
        BeforeValidator(numbers_as_strings),
        Field(strict=True, description="algorithm.environments"),
    ] = field(default_factory=dict)
    duration: Annotated[
        Annotated[timedelta, BeforeValidator(parse_duration), WithJsonSchema(DURATION_JSON_SCHEMA)] | None,
        Field(description="The compute time the run needs, failures aside (hacfg plan)."),
    ] = None

    @property
    def cards_per_node(self) -> int | None:
        """``cards``, else what the flavor id says; None for a CPU job or when nothing says."""
        if self.accelerator == "cpu":
            return None
        if self.cards is not None:
            return self.cards
        return ma.read_flavor(self.flavor).cards if self.flavor else None


@_section
class Checkpoint(_Section):
    """Where the training script saves, so a restart resumes instead of starting over."""

    __pydantic_config__: ClassVar[dict[str, Any]] = _SECTION

    path: Annotated[
        StrictStr | None, Field(description="obs://..., or a shared mount that survives a reschedule")
    ] = None
    interval: Annotated[
        Annotated[timedelta, BeforeValidator(parse_duration), WithJsonSchema(DURATION_JSON_SCHEMA)] | None,
        Field(description="How often the training script saves."),
    ] = None
    resume: Annotated[
        StrictBool, Field(description="The script reloads the newest checkpoint at start-up.")
    ] = False
    save_time: Annotated[
        Annotated[timedelta, BeforeValidator(parse_duration), WithJsonSchema(DURATION_JSON_SCHEMA)] | None,
        Field(description="How long one save holds up training (hacfg plan)."),
    ] = None


@_section
class Restart(_Section):
    """The platform's restart budgets."""

    __pydantic_config__: ClassVar[dict[str, Any]] = _SECTION

    max: Annotated[
        StrictInt,
        Field(
            ge=0,
            le=ma.RETRY_LIMITS["huaweicloud"][1],
            description="fault-tolerance/job-retry-num; 0 turns auto restart off.",
        ),
        AfterValidator(within_platform_limits),
    ] = 0
    unconditional: Annotated[StrictBool, Field(description="fault-tolerance/job-unconditional-retry")] = False
    on_hang: Annotated[StrictBool, Field(description="fault-tolerance/hang-retry")] = False
    pod_reschedules: Annotated[StrictInt, Field(ge=0, description="fault-tolerance/pod-retry-num")] = 0


@_section
class Hang(_Section):
    """Suspension detection: no output, heartbeat or accelerator activity for ``timeout``."""

    __pydantic_config__: ClassVar[dict[str, Any]] = _SECTION

    detect: Annotated[StrictBool, Field(description="Suspension detection (GPU/NPU jobs only).")] = True
    timeout: Annotated[
        timedelta,
        BeforeValidator(parse_duration),
        # The description inside: WithJsonSchema replaces what a Field would add.
        WithJsonSchema({**DURATION_JSON_SCHEMA, "description": "MA_HANG_DETECT_TIME, in whole minutes."}),
    ] = timedelta(minutes=ma.DEFAULT_HANG_MINUTES)
    phases: Annotated[
        dict[
            Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")],
            Annotated[timedelta, BeforeValidator(parse_duration), WithJsonSchema(DURATION_JSON_SCHEMA)],
        ],
        Field(
            description="The agent's hang timeout in each phase of hacfg.heartbeat (checkpoint, eval, init, data, "
            "or your own): a save or an evaluation may be quiet this long. timeout stays the training's."
        ),
    ] = field(default_factory=dict)
    learn: Annotated[
        StrictBool,
        Field(
            description="The agent learns each phase's timeout, 5x the p99 of its durations (training: of the time "
            "between step reports), kept across restarts; a timeout in phases wins over a learned one."
        ),
    ] = False
    learn_floor: Annotated[
        timedelta,
        BeforeValidator(parse_duration),
        WithJsonSchema({**DURATION_JSON_SCHEMA, "description": "No learned timeout is shorter."}),
    ] = timedelta(seconds=60)
    learn_beyond_timeout: Annotated[
        StrictBool,
        Field(description="A learned timeout may be longer than timeout (than the initial one for start-up)."),
    ] = False


@_section
class Reliability(_Section):
    """How often the hardware fails and what a failure costs, for ``hacfg plan`` and the lint rules
    that use its numbers. Unset, a published figure applies (docs/plan.md names the sources)."""

    __pydantic_config__: ClassVar[dict[str, Any]] = _SECTION

    node_mtbf: Annotated[
        Annotated[timedelta, BeforeValidator(parse_duration), WithJsonSchema(DURATION_JSON_SCHEMA)] | None,
        Field(description="Mean time between failures of one node."),
    ] = None
    hang_share: Annotated[
        StrictFloat | None, Field(ge=0, le=1, description="The share of failures that are hangs, 0 to 1.")
    ] = None
    restart_time: Annotated[
        Annotated[timedelta, BeforeValidator(parse_duration), WithJsonSchema(DURATION_JSON_SCHEMA)] | None,
        Field(description="From a failure to training again (hang detection aside)."),
    ] = None


@_section
class SecretKey(_Section):
    """A key of a Kubernetes Secret that an environment variable is read from (``secretKeyRef``)."""

    __pydantic_config__: ClassVar[dict[str, Any]] = _SECTION

    name: Annotated[StrictStr, Field(pattern=k8s.SECRET_NAME_PATTERN, description="The Secret's name.")]
    key: Annotated[StrictStr, Field(pattern=k8s.SECRET_KEY_PATTERN, description="The key in the Secret.")]


@_section
class Kubernetes(_Section):
    """What only the Kubernetes targets read: the checkpoint storage, how JobSet restarts, a runtime to reuse."""

    __pydantic_config__: ClassVar[dict[str, Any]] = _SECTION

    restart_strategy: Annotated[
        RestartStrategy,
        Field(description="JobSet failurePolicy.restartStrategy (InPlaceRestart: see docs/kubernetes.md)."),
    ] = "Recreate"
    service_account: Annotated[
        StrictStr | None,
        Field(description="The pods' serviceAccountName (InPlaceRestart: one that may patch its own pod)."),
    ] = None
    runtime: Annotated[
        StrictStr | None,
        Field(description="An existing ClusterTrainingRuntime for the trainjob target; unset, hacfg writes one."),
    ] = None
    checkpoint_claim: Annotated[
        StrictStr | None,
        Field(description="A PersistentVolumeClaim holding checkpoint.path, mounted there in every pod."),
    ] = None
    device_resource: Annotated[
        DeviceResource | None,
        Field(
            description="The device plugin's resource for job.cards; defaults to nvidia.com/gpu for a GPU job, "
            "and to huawei.com/Ascend910 (Ascend310P or Ascend310 when job.flavor names one) for an NPU job."
        ),
    ] = None
    shm_size: Annotated[
        StrictStr,
        Field(pattern=k8s.QUANTITY_PATTERN, description="The memory emptyDir mounted at /dev/shm in every pod."),
        AfterValidator(above_shm_precheck),
    ] = k8s.DEFAULT_SHM_SIZE
    secrets: Annotated[
        dict[Annotated[StrictStr, Field(pattern=ma.ENV_NAME_PATTERN)], SecretKey],
        Field(
            strict=True,
            description="Environment variables the pods read from a Secret's key, never written in clear: "
            "{WANDB_API_KEY: {name: wandb, key: api-key}}.",
        ),
    ] = field(default_factory=dict)
    network_policy: Annotated[
        StrictBool,
        Field(description="A NetworkPolicy that admits the agents' and the workers' ports only from the job's pods."),
    ] = False


@_section
class HAConfig(_Section):
    """A training job's fault-tolerance intent."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {**_SECTION, "title": "hacfg scenario file, version 1"}

    version: Literal[1]
    scenario: Scenario
    platform: Platform = "huaweicloud"
    extends: Annotated[
        StrictStr | None,
        Field(description="A preset name or a relative path; defaults to the scenario's preset."),
    ] = None
    job: Job = field(default_factory=Job)
    checkpoint: Checkpoint = field(default_factory=Checkpoint)
    restart: Restart = field(default_factory=Restart)
    hang: Hang = field(default_factory=Hang)
    reliability: Reliability = field(default_factory=Reliability)
    kubernetes: Kubernetes = field(default_factory=Kubernetes)
    operator_retry: Annotated[
        StrictBool, Field(description="fault-tolerance/hccl_op_retry (Ascend supernode pools only).")
    ] = False
    precheck: Annotated[StrictBool, Field(description="Environment pre-check before the command starts.")] = True
    passthrough: Annotated[
        dict[StrictStr, Any],
        Field(
            strict=True,
            description="ModelArts request fields hacfg does not model (hacfg import puts them here); "
            "merged verbatim into the modelarts output.",
        ),
    ] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.job.name or self.scenario



def scenario_document(config: HAConfig) -> dict[str, Any]:
    """The config, fully merged, as a scenario file needing no preset: what a pod is given."""

    def spell(value: Any) -> Any:
        if isinstance(value, timedelta):
            return format_duration(value)
        if isinstance(value, dict):
            return {k: spell(v) for k, v in value.items()}
        if dataclasses.is_dataclass(value):
            return fields(value)
        return value

    def fields(section: Any) -> dict[str, Any]:
        values = ((f.name, getattr(section, f.name)) for f in dataclasses.fields(section))
        return {name: fields(v) if dataclasses.is_dataclass(v) else spell(v) for name, v in values if v is not None}

    document = fields(config)
    document.pop("extends", None)
    return document
