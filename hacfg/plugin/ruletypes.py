"""What a lint rule is, and what it sees: the types rule authors use (through :mod:`hacfg.plugin`).

A rule is a check per kind of file. :func:`rule` turns a check of scenario files into a
:class:`Rule`, whose docstring is the long help ``hacfg explain`` prints (first line the
summary; then What it does / Why is this bad? / Example / Fix); ``@the_rule.job`` adds its
check of ModelArts request bodies, ``@the_rule.manifest`` its check of JobSet and Kubeflow
Trainer manifests. A rule reads the kinds of file it has checks for::

    @rule("HA001", "restart-without-checkpoint", "error")
    def restart_without_checkpoint(ctx: ScenarioContext) -> Iterator[Problem]:
        '''Auto restart is on but nothing is saved to restart from. ...'''
        if ctx.config.restart.max and not ctx.config.checkpoint.path:
            yield Problem(("restart", "max"), "set checkpoint.path: ...")

    @restart_without_checkpoint.job
    def restart_without_checkpoint_in_body(ctx: JobContext) -> Iterator[Problem]:
        ...

A rule that reads only request bodies is made with ``@rule(..., kind="job")``, one that reads
only manifests with ``kind="manifest"``. A plugin hands
its rules to hacfg from the ``hacfg_rules`` hook.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple, overload

from hacfg.scenario import kubernetes as k8s
from hacfg.scenario import modelarts as ma
from hacfg.scenario.names import Kind, Severity
from hacfg.scenario.source import Document, LogicalPath, dotted, lookup

if TYPE_CHECKING:
    from hacfg.scenario.model import HAConfig

RULE_ID = re.compile(r"[A-Z]{2,}[0-9]{3,}")


class Fix(NamedTuple):
    """Replace the value at ``path`` with ``replacement`` (source text, e.g. ``"3"`` with quotes)."""

    path: LogicalPath
    replacement: str
    description: str


class Problem(NamedTuple):
    """What a rule yields: where (a logical path), what to do about it, and a fix if one is safe."""

    at: LogicalPath
    message: str
    fix: Fix | None = None
    on_key: bool = False  # point at the key rather than its value
    severity: Severity | None = None  # None: the rule's default


class _ReadOnly:
    """A context's fields are set once, by its maker: a rule reads them. Plain slotted classes, not
    frozen dataclasses, whose generated methods every lint compiled at import (about 1 ms for the four)."""

    __slots__ = ()

    def _set(self, **fields: Any) -> None:
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__}.{name} is read-only: a rule reads its context")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__}.{name} is read-only: a rule reads its context")


class FileContext(_ReadOnly):
    """One file, as a rule sees it. ``own`` is the file as written, without any preset. Contexts
    compare by identity: each is one file's."""

    __slots__ = ("document", "own", "platform")
    document: Document
    own: Document
    platform: str

    def __init__(self, document: Document, own: Document, platform: str):
        self._set(document=document, own=own, platform=platform)

    def is_set(self, path: LogicalPath) -> bool:
        """Whether this file itself writes ``path`` (not inherited from a preset)."""
        return tuple(path) in self.own.values

    def own_place(self, *paths: LogicalPath) -> LogicalPath:
        """The first of ``paths`` this file writes, else its ``extends:`` or ``scenario:`` line:
        where a finding about what the file leaves out belongs."""
        for path in (*paths, ("extends",)):
            if self.is_set(path):
                return tuple(path)
        return ("scenario",)

    def first_present(self, *paths: LogicalPath) -> LogicalPath:
        """The first of ``paths`` that stands in the file, for pointing at the best place."""
        for path in paths:
            if tuple(path) in self.document.values:
                return tuple(path)
        return paths[-1]


class ScenarioContext(FileContext):
    """A scenario file: ``config`` is validated, with its preset merged in (``document``).

    ``advice``: what the scenario's preset recommends for the paths only the user can know
    (``checkpoint.path``, ``interval``, ``resume``), which it does not supply; for messages.
    """

    __slots__ = ("advice", "config")
    config: HAConfig
    advice: dict[LogicalPath, Any]

    def __init__(
        self,
        document: Document,
        own: Document,
        platform: str,
        config: HAConfig,
        advice: dict[LogicalPath, Any] | None = None,
    ):
        super().__init__(document, own, platform)
        self._set(config=config, advice={} if advice is None else advice)

    def advised(self, path: LogicalPath, fallback: str) -> str:
        """``path: value`` as the preset recommends it, or ``fallback`` when it recommends nothing."""
        value = self.advice.get(tuple(path))
        if value is None:
            return fallback
        if isinstance(value, bool):
            value = str(value).lower()
        return f"{dotted(path)}: {value} (the {self.config.scenario} preset's recommendation)"

    ENVIRONMENT: ClassVar[LogicalPath] = ("job", "environment")

    @property
    def environment(self) -> dict[Any, Any]:
        return dict(self.config.job.environment)


class JobContext(FileContext):
    """A ModelArts request body, as written: ``body`` reads it however malformed it is."""

    __slots__ = ("body",)
    body: JobBody

    def __init__(self, document: Document, own: Document, platform: str, body: JobBody):
        super().__init__(document, own, platform)
        self._set(body=body)

    ENVIRONMENT: ClassVar[LogicalPath] = ma.ENVIRONMENTS_AT

    @property
    def environment(self) -> dict[Any, Any]:
        return self.body.environments


class ManifestContext(FileContext):
    """A JobSet, TrainJob or (Cluster)TrainingRuntime, as written: ``manifest`` reads it however malformed."""

    __slots__ = ("manifest",)
    manifest: Manifest

    def __init__(self, document: Document, own: Document, platform: str, manifest: Manifest):
        super().__init__(document, own, platform)
        self._set(manifest=manifest)


ScenarioCheck = Callable[[ScenarioContext], Iterable[Problem]]
JobCheck = Callable[[JobContext], Iterable[Problem]]
ManifestCheck = Callable[[ManifestContext], Iterable[Problem]]


class Rule:
    """A rule's identity and help, and its check of each kind of file it reads."""

    def __init__(
        self,
        id: str,  # noqa: A002
        name: str,
        severity: Severity,
        help: str,  # noqa: A002
        scenario_check: ScenarioCheck | None = None,
        job_check: JobCheck | None = None,
        manifest_check: ManifestCheck | None = None,
    ):
        self.id = id
        self.name = name
        self.severity = severity
        self.help = help
        self.scenario_check = scenario_check
        self.job_check = job_check
        self.manifest_check = manifest_check

    def __repr__(self) -> str:
        return f"Rule({self.id!r}, {self.name!r}, {self.severity!r})"

    @property
    def kinds(self) -> tuple[Kind, ...]:
        """The kinds of file this rule reads: those it has a check for."""
        checks: tuple[tuple[Kind, object], ...] = (
            ("scenario", self.scenario_check),
            ("job", self.job_check),
            ("manifest", self.manifest_check),
        )
        return tuple(kind for kind, check in checks if check is not None)

    @property
    def summary(self) -> str:
        return self.help.strip().splitlines()[0] if self.help.strip() else self.name

    def scenario(self, check: ScenarioCheck) -> ScenarioCheck:
        """Decorator: ``check`` is this rule's check of scenario files."""
        self.scenario_check = check
        return check

    def job(self, check: JobCheck) -> JobCheck:
        """Decorator: ``check`` is this rule's check of request bodies."""
        self.job_check = check
        return check

    def manifest(self, check: ManifestCheck) -> ManifestCheck:
        """Decorator: ``check`` is this rule's check of JobSet and Kubeflow Trainer manifests."""
        self.manifest_check = check
        return check

    def problems(self, ctx: ScenarioContext | JobContext | ManifestContext) -> Iterable[Problem]:
        """What this rule finds in one file; nothing when it does not read that kind."""
        if isinstance(ctx, ScenarioContext):
            return self.scenario_check(ctx) if self.scenario_check else ()
        if isinstance(ctx, ManifestContext):
            return self.manifest_check(ctx) if self.manifest_check else ()
        return self.job_check(ctx) if self.job_check else ()


@overload
def rule(
    id: str, name: str, severity: Severity, *, kind: Literal["scenario"] = "scenario"
) -> Callable[[ScenarioCheck], Rule]: ...
@overload
def rule(id: str, name: str, severity: Severity, *, kind: Literal["job"]) -> Callable[[JobCheck], Rule]: ...
@overload
def rule(id: str, name: str, severity: Severity, *, kind: Literal["manifest"]) -> Callable[[ManifestCheck], Rule]: ...
def rule(id: str, name: str, severity: Severity, *, kind: Kind = "scenario") -> Callable[[Any], Rule]:  # noqa: A002
    """Turn a check of ``kind`` files into a :class:`Rule`; the function's docstring is its help."""
    if not RULE_ID.fullmatch(id):
        raise ValueError(f"rule ID {id!r} must be capital letters then at least three digits, like HA001 or ASC101")

    def wrap(check: Callable[[Any], Iterable[Problem]]) -> Rule:
        made = Rule(id, name, severity, inspect.cleandoc(check.__doc__ or ""))
        if kind == "scenario":
            made.scenario_check = check
        elif kind == "manifest":
            made.manifest_check = check
        else:
            made.job_check = check
        return made

    return wrap


class JobBody:
    """Read access to a ModelArts request body that may be malformed in any way."""

    ANNOTATIONS: ClassVar[LogicalPath] = ma.ANNOTATIONS_AT

    def __init__(self, data: dict[str, Any]):
        self.data = data
        self.annotations = _mapping(self.get(self.ANNOTATIONS))
        self.environments = _mapping(self.get(JobContext.ENVIRONMENT))

    def get(self, path: LogicalPath) -> Any:
        return lookup(self.data, path)

    def flag(self, key: str) -> bool:
        """An annotation switched on (``"true"``, or the mistakes HA007/HA015 report)."""
        return ma.spelled_true(self.annotations.get(key, ""))

    def number(self, key: str) -> int | None:
        """An integer annotation, however it was written; None when absent or not a number."""
        value = self.annotations.get(key)
        if isinstance(value, bool) or value is None:
            return None
        try:
            return int(str(value).strip())
        except ValueError:
            return None

    @property
    def retries(self) -> int:
        return self.number(ma.JOB_RETRY_NUM) or 0

    @property
    def snippet(self) -> bool:
        """Part of a body, as the platform docs show annotations (or ``--only annotations`` writes them, with
        the platform variables): no kind, spec or algorithm of a whole job."""
        algorithm = self.data.get("algorithm")
        partial_algorithm = algorithm is None or (isinstance(algorithm, dict) and algorithm.keys() <= {"environments"})
        return partial_algorithm and not ({"kind", "spec"} & self.data.keys())

    @property
    def node_count(self) -> int | None:
        count = self.get(("spec", "resource", "node_count"))
        return count if isinstance(count, int) and not isinstance(count, bool) else None

    @property
    def flavor(self) -> str:
        flavor = self.get(("spec", "resource", "flavor_id"))
        return flavor if isinstance(flavor, str) else ""

    @property
    def accelerator(self) -> str | None:
        """``gpu``, ``npu`` or ``cpu`` when the flavor says so; None when it cannot be told."""
        return ma.accelerator_of(self.flavor)


def _mapping(value: Any) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


class Manifest:
    """Read access to a JobSet or Kubeflow Trainer manifest that may be malformed in any way."""

    def __init__(self, data: dict[str, Any]):
        self.data = data

    @property
    def kind(self) -> str:
        return k8s.training_kind(self.data) or ""

    @property
    def jobset_at(self) -> LogicalPath | None:
        """Where the JobSet spec is: the JobSet's own, a runtime's template; a TrainJob has none."""
        return {"JobSet": ("spec",), "TrainJob": None}.get(self.kind, ("spec", "template", "spec"))

    def get(self, path: LogicalPath) -> Any:
        return lookup(self.data, path)

    @property
    def failure_policy(self) -> dict[Any, Any]:
        return _mapping(self.get((*self.jobset_at, "failurePolicy"))) if self.jobset_at else {}

    @property
    def max_restarts(self) -> int:
        """``failurePolicy.maxRestarts``; 0 when unset or not a number (JobSet's default)."""
        value = self.failure_policy.get("maxRestarts")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def replicated_jobs(self) -> Iterator[tuple[LogicalPath, dict[Any, Any]]]:
        """Each replicated Job's path and its Job spec (``template.spec``)."""
        if self.jobset_at is None:
            return
        for index, replicated in enumerate(_list(self.get((*self.jobset_at, "replicatedJobs")))):
            path = (*self.jobset_at, "replicatedJobs", index)
            yield path, _mapping(lookup(replicated, ("template", "spec")))

    @staticmethod
    def pod(job: dict[Any, Any]) -> dict[Any, Any]:
        """A Job spec's pod spec."""
        return _mapping(lookup(job, ("template", "spec")))

    @staticmethod
    def containers(pod: dict[Any, Any], *, init: bool = False) -> list[dict[Any, Any]]:
        """A pod's containers (with ``init``, its init containers too), the malformed ones left out."""
        found = _list(pod.get("containers")) + (_list(pod.get("initContainers")) if init else [])
        return [c for c in found if isinstance(c, dict)]

    @staticmethod
    def command_line(container: dict[Any, Any]) -> str:
        """What a container runs, as one line: its command, its args, and its environment's values (where a
        launcher is handed the worker's command, or a script its resume path)."""
        words = [str(word) for word in _list(container.get("command")) + _list(container.get("args"))]
        words += [str(e.get("value", "")) for e in _list(container.get("env")) if isinstance(e, dict)]
        return " ".join(words)


def annotation_path(key: str) -> LogicalPath:
    return (*JobBody.ANNOTATIONS, key)
