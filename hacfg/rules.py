"""What a lint rule is, and what it sees: the API for rule authors.

A rule is a function decorated with :func:`rule`; its docstring is the long help that
``hacfg explain`` prints (first line: the summary; then What it does / Why is this bad? /
Example / Fix). It receives a :class:`LintContext` and yields :class:`Problem` objects::

    @rule("HA001", "restart-without-checkpoint", "error", kinds=("scenario", "job"))
    def check(ctx):
        '''Auto restart is on but nothing is saved to restart from. ...'''
        if ctx.config.restart.max and not ctx.config.checkpoint.path:
            yield Problem(("restart", "max"), "set checkpoint.path: ...")

A plugin hands its rules to hacfg from the ``hacfg_rules`` hook.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from hacfg import platform as ma
from hacfg.source import Document, LogicalPath, lookup

if TYPE_CHECKING:
    from hacfg.config import HAConfig

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("info", "warning", "error")  # in rising order
Kind = Literal["scenario", "job"]
RULE_ID = re.compile(r"[A-Z]{2,}[0-9]{3,}")


@dataclass(frozen=True)
class Fix:
    """Replace the value at ``path`` with ``replacement`` (source text, e.g. ``"3"`` with quotes)."""

    path: LogicalPath
    replacement: str
    description: str


@dataclass(frozen=True)
class Problem:
    """What a rule yields: where (a logical path), what to do about it, and a fix if one is safe."""

    at: LogicalPath
    message: str
    fix: Fix | None = None
    on_key: bool = False  # point at the key rather than its value
    severity: Severity | None = None  # None: the rule's default


@dataclass(frozen=True)
class Rule:
    id: str
    name: str
    severity: Severity
    kinds: tuple[Kind, ...]
    check: Callable[[LintContext], Iterable[Problem]] | None
    help: str

    @property
    def summary(self) -> str:
        return self.help.strip().splitlines()[0] if self.help.strip() else self.name


def rule(id: str, name: str, severity: Severity, *, kinds: tuple[Kind, ...] = ("scenario",)):  # noqa: A002 - the rule's ID
    """Turn a check function into a :class:`Rule`; the function's docstring is its help."""
    if not RULE_ID.fullmatch(id):
        raise ValueError(f"rule ID {id!r} must be capital letters then at least three digits, like HA001 or ASC101")

    def wrap(check: Callable[[LintContext], Iterable[Problem]]) -> Rule:
        import inspect

        return Rule(id, name, severity, kinds, check, inspect.cleandoc(check.__doc__ or ""))

    return wrap


@dataclass
class LintContext:
    """One file, as a rule sees it.

    ``config`` is the validated scenario (preset merged in) for scenario files; ``body`` the
    request as written for ModelArts job bodies. ``own`` is the file as the user wrote it,
    without the preset, to tell what the user set from what was inherited.
    """

    kind: Kind
    document: Document
    own: Document
    platform: str
    config: HAConfig | None = None
    body: JobBody | None = None

    def is_set(self, path: LogicalPath) -> bool:
        """Whether this file itself writes ``path`` (not inherited from a preset)."""
        return tuple(path) in self.own.values

    def first_present(self, *paths: LogicalPath) -> LogicalPath:
        """The first of ``paths`` that stands in the file, for pointing at the best place."""
        for path in paths:
            if tuple(path) in self.document.values:
                return tuple(path)
        return paths[-1]

    def environment(self) -> tuple[dict[Any, Any], LogicalPath]:
        """The job's environment variables and where they live, for either kind of file."""
        if self.config is not None:
            return dict(self.config.job.environment), ("job", "environment")
        assert self.body is not None
        return self.body.environments, JobBody.ENVIRONMENTS

    def node_count(self) -> int | None:
        if self.config is not None:
            return self.config.job.nodes
        assert self.body is not None
        return self.body.node_count


_NPU_FLAVOR = re.compile(r"ascend|snt9|npu|d910|910b", re.IGNORECASE)
_CPU_FLAVOR = re.compile(r"(^|[._-])cpu([._-]|$)", re.IGNORECASE)


@dataclass
class JobBody:
    """Read access to a ModelArts request body that may be malformed in any way."""

    ANNOTATIONS: ClassVar[LogicalPath] = ("metadata", "annotations")
    ENVIRONMENTS: ClassVar[LogicalPath] = ("algorithm", "environments")

    data: dict[str, Any]
    annotations: dict[Any, Any] = field(init=False)
    environments: dict[Any, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.annotations = _mapping(self.get(self.ANNOTATIONS))
        self.environments = _mapping(self.get(self.ENVIRONMENTS))

    def get(self, path: LogicalPath) -> Any:
        return lookup(self.data, path)

    def flag(self, key: str) -> bool:
        """An annotation switched on (``"true"``, or the mistakes HA007/HA015 report)."""
        return str(self.annotations.get(key, "")).strip().lower() in ("true", "yes", "1", "on")

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
    def node_count(self) -> int | None:
        count = self.get(("spec", "resource", "node_count"))
        return count if isinstance(count, int) and not isinstance(count, bool) else None

    @property
    def flavor(self) -> str:
        flavor = self.get(("spec", "resource", "flavor_id"))
        return flavor if isinstance(flavor, str) else ""

    @property
    def accelerator(self) -> str | None:
        """``npu`` or ``cpu`` when the flavor says so; None when it cannot be told."""
        if _NPU_FLAVOR.search(self.flavor):
            return "npu"
        if _CPU_FLAVOR.search(self.flavor):
            return "cpu"
        return None


def _mapping(value: Any) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def annotation_path(key: str) -> LogicalPath:
    return (*JobBody.ANNOTATIONS, key)


def problems(rule_: Rule, ctx: LintContext) -> Iterator[Problem]:
    """Run one rule if it reads this kind of file."""
    if rule_.check is not None and ctx.kind in rule_.kinds:
        yield from rule_.check(ctx)
