"""Lint settings from ``[tool.hacfg]`` in pyproject.toml, or a ``.hacfg.toml``, the nearest one upwards.

```toml
[tool.hacfg]
select = ["HA"]                 # rule IDs or prefixes; default: every rule
ignore = ["HA011"]
per-file-ignores = {"legacy/*.json" = ["HA007"]}
severity = {HA003 = "error"}
fail-on = "warning"             # error (default) | warning | info
platform = "otc"                # for request bodies and files that do not say
include = ["jobs/**/*.json"]    # more files to lint when a directory is given
```

Unknown keys and unknown rule IDs are errors: a typo must not silently turn a rule off.
"""

from __future__ import annotations

import copy
import fnmatch
import functools
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from hacfg.fsutil import cache_path, read_cache, write_cache
from hacfg.scenario.names import PLATFORMS, SEVERITIES, Platform, Severity
from hacfg.scenario.source import InputError, LogicalPath, Span, did_you_mean, dotted, lookup, read

KEYS = ("select", "ignore", "per-file-ignores", "severity", "fail-on", "platform", "include", "baseline")
_Choice = TypeVar("_Choice", bound=str)


class Settings:
    """The lint's settings, from ``[tool.hacfg]`` or ``.hacfg.toml`` and the command line. (A plain
    class: a dataclass's generated methods were compiled by every lint at import.)"""

    def __init__(
        self,
        *,
        select: tuple[str, ...] = ("ALL",),
        ignore: tuple[str, ...] = (),
        per_file_ignores: dict[str, tuple[str, ...]] | None = None,
        severity: dict[str, Severity] | None = None,
        fail_on: Severity = "error",
        platform: Platform | None = None,
        include: tuple[str, ...] = (),
        root: Path | None = None,
        source: str | None = None,  # the file the settings came from
        baseline: Path | None = None,  # findings to report no more (hacfg.lint.baseline), beside the settings file
        cli_rules: dict[str, str] | None = None,  # rule ID -> the option that named it
        file: _SettingsFile | None = None,  # the settings' text, to point at a rule ID nobody knows
        written: dict[str, LogicalPath] | None = None,  # rule ID -> the first key naming it
    ):
        self.select = select
        self.ignore = ignore
        self.per_file_ignores: dict[str, tuple[str, ...]] = per_file_ignores or {}
        self.severity: dict[str, Severity] = severity or {}
        self.fail_on: Severity = fail_on
        self.platform = platform
        self.include = include
        self.root = root or Path.cwd()
        self.source = source
        self.baseline = baseline
        self.cli_rules: dict[str, str] = cli_rules or {}
        self.file = file
        self.written: dict[str, LogicalPath] = written or {}

    def enabled_rules(self, rule_ids: Iterable[str], path: str) -> frozenset[str]:
        """The rules that run on ``path``: selected, not ignored, not ignored for this file."""
        enabled: frozenset[str] | set[str] = self._selected(frozenset(rule_ids))
        if self.per_file_ignores:
            relative = self._relative(path)
            for pattern, ids in self.per_file_ignores.items():
                if fnmatch.fnmatch(relative, pattern):
                    enabled = {r for r in enabled if not any(_matches(r, s) for s in ids)}
        return frozenset(enabled)

    @functools.lru_cache(maxsize=8)  # noqa: B019 - settings live as long as the process
    def _selected(self, rule_ids: frozenset[str]) -> frozenset[str]:
        return frozenset(
            r
            for r in rule_ids
            if any(_matches(r, s) for s in self.select) and not any(_matches(r, s) for s in self.ignore)
        )

    def included(self, path: Path) -> bool:
        if not self.include:
            return False  # without resolving the root
        relative = self._relative(str(path))
        return any(fnmatch.fnmatch(relative, pattern) for pattern in self.include)

    def _relative(self, path: str) -> str:
        try:
            return Path(os.path.abspath(path)).relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return Path(path).as_posix()

    def chosen_on_the_command_line(
        self, select: Sequence[str] = (), extend_select: Sequence[str] = (), ignore: Sequence[str] = ()
    ) -> Settings:
        """These settings with the command line's choice of rules over them, as ruff layers them: a
        ``--select`` starts the selection over (the settings' ignores too), ``--extend-select`` adds to
        it, ``--ignore`` adds to what is ignored. Each option takes IDs or prefixes, comma-separated."""
        given = {"--select": select, "--extend-select": extend_select, "--ignore": ignore}
        chosen = {option: _rule_ids(values) for option, values in given.items()}
        if not any(chosen.values()):
            return self
        base = (chosen["--select"], ()) if chosen["--select"] else (self.select, self.ignore)
        layered = copy.copy(self)
        layered.select = (*base[0], *chosen["--extend-select"])
        layered.ignore = (*base[1], *chosen["--ignore"])
        layered.cli_rules = {rule_id: option for option, ids in chosen.items() for rule_id in ids}
        return layered

    def check_rule_ids(self, known: set[str]) -> None:
        """Every ID or prefix in the settings names at least one known rule."""
        named = [
            *self.select,
            *self.ignore,
            *self.severity,
            *(i for ids in self.per_file_ignores.values() for i in ids),
        ]
        for rule_id in named:
            if rule_id != "ALL" and not any(_matches(k, rule_id) for k in known):
                hint = did_you_mean(rule_id, sorted(known))
                if rule_id in self.cli_rules:
                    raise InputError(f"{self.cli_rules[rule_id]}: unknown rule {rule_id!r}{hint}")
                message = f"[tool.hacfg]: unknown rule {rule_id!r}{hint}"
                if self.file is not None and rule_id in self.written:
                    raise self.file.error((*self.file.prefix, *self.written[rule_id]), message)
                raise InputError(message, file=self.source)


def _rule_ids(values: Sequence[str]) -> tuple[str, ...]:
    """``["HA001,HA007", "ha1"]`` -> ``("HA001", "HA007", "HA1")``."""
    ids = (part.strip().upper() for value in values for part in value.split(","))
    return tuple(rule_id for rule_id in ids if rule_id)


def _matches(rule_id: str, selector: str) -> bool:
    return selector == "ALL" or rule_id.startswith(selector)


def find_settings(start: Path | None = None) -> Settings:
    """Settings from the nearest ``.hacfg.toml`` or ``pyproject.toml`` with ``[tool.hacfg]``."""
    folder = (start or Path.cwd()).resolve()
    passed_by = _PassedBy()
    for candidate in (folder, *folder.parents):
        dotfile = candidate / ".hacfg.toml"
        if dotfile.is_file():
            return _settings(_SettingsFile.read(dotfile, pyproject=False), candidate)
        pyproject = candidate / "pyproject.toml"
        stamp = _PassedBy.stamp(pyproject)
        if stamp is not None and not passed_by.knows(pyproject, stamp):
            found = _SettingsFile.read(pyproject, pyproject=True)
            if found.prefix:
                return _settings(found, candidate)
            passed_by.remember(pyproject, stamp)
    return Settings()


class _PassedBy:
    """The pyproject.toml files that parse and hold no ``[tool.hacfg]``, remembered between runs:
    most projects' have none, and reading one costs a cold lint about 2.5 ms (tomllib's import,
    then the parse). A file is known by its device, inode, size, modification and change times,
    as git's index knows it, and is read again once any of them differs. One changed in the last
    two seconds is not remembered: a second change within its file system's timestamp
    granularity could leave them all the same."""

    FILE = "pyproject-passed-by.marshal"
    KEPT = 64  # files, the most recently passed by
    SETTLED_NS = 2_000_000_000  # FAT's timestamps are two seconds apart; most file systems' far less

    def __init__(self) -> None:
        self._known: dict[str, list[int]] | None = None  # read when first asked

    @staticmethod
    def stamp(path: Path) -> list[int] | None:
        """What identifies this version of the file; None when no regular file is there."""
        try:
            found = os.stat(path)
        except OSError:
            return None
        if not stat.S_ISREG(found.st_mode):
            return None
        return [found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns]

    def knows(self, path: Path, stamp: list[int]) -> bool:
        return self._files().get(str(path)) == stamp

    def remember(self, path: Path, stamp: list[int]) -> None:
        """Remember the file as it was before it was read (``stamp``): a change since is a new version."""
        if time.time_ns() - stamp[-1] < self.SETTLED_NS:  # its change time
            return
        files = self._files()
        files.pop(str(path), None)
        files[str(path)] = stamp
        write_cache(cache_path(self.FILE), dict(list(files.items())[-self.KEPT :]))

    def _files(self) -> dict[str, list[int]]:
        if self._known is None:
            stored = read_cache(cache_path(self.FILE))
            self._known = stored if isinstance(stored, dict) else {}
        return self._known


def read_settings(path: Path) -> Settings:
    """The settings in one file (``--config``): ``[tool.hacfg]`` of a pyproject.toml, else the file's
    top level (or its ``[tool.hacfg]``), as in a ``.hacfg.toml``. Paths in it are from its folder."""
    if not path.is_file():
        raise InputError("no such settings file", file=str(path))
    folder = Path(os.path.abspath(path)).parent
    return _settings(_SettingsFile.read(path, pyproject=path.name == "pyproject.toml"), folder)


class _SettingsFile:
    """The ``[tool.hacfg]`` table of one file (or a ``.hacfg.toml``'s top level), and where each of
    its values is written, for errors at ``file:line:col``."""

    __slots__ = ("path", "prefix", "table", "text")

    def __init__(self, path: str, text: str, table: dict[str, Any], prefix: LogicalPath) -> None:
        self.path = path
        self.text = text
        self.table = table
        self.prefix = prefix  # where the table is in the file: ("tool", "hacfg"), () for a top level, or

    # () with an empty table for a pyproject.toml that has no [tool.hacfg]

    @classmethod
    def read(cls, path: Path, *, pyproject: bool) -> _SettingsFile:
        import tomllib

        text = read(path)
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            message = str(err)
            at = re.search(r" \(at (?:line (\d+), column (\d+)|end of document)\)$", message)
            if at is None:
                raise InputError(f"invalid TOML: {message}", file=str(path)) from None
            if at[1]:
                line, column = int(at[1]), int(at[2])
            else:
                line, column = text.count("\n") + 1, len(text) - text.rfind("\n")
            span = Span(str(path), line, column, line, column + 1)
            raise InputError(f"invalid TOML: {message[: at.start()]}", span) from None
        found = cls(str(path), text, data, ())
        if "tool" in data and not isinstance(data["tool"], dict):
            raise found.error(("tool",), "tool: expected a table, such as [tool.hacfg]")
        tool = data.get("tool", {})
        if "hacfg" in tool:
            if not isinstance(tool["hacfg"], dict):
                raise found.error(("tool", "hacfg"), "tool.hacfg: expected a table, [tool.hacfg]")
            return cls(found.path, text, tool["hacfg"], ("tool", "hacfg"))
        return found if not pyproject else cls(found.path, text, {}, ())

    def error(self, key: LogicalPath, message: str) -> InputError:
        """``message`` at the line that writes ``key`` (a path in the file), else at the file."""
        span = _written_at(self.text, self.path, key)
        return InputError(message, span) if span else InputError(message, file=self.path)


def _written_at(text: str, file: str, key: LogicalPath) -> Span | None:
    """Where the statement that defines ``key`` starts. tomllib keeps no positions, so: the first
    line naming the key's last part such that the lines before it are a document without ``key``
    and the statement starting there defines it."""
    import tomllib

    lines = text.split("\n")  # TOML's only line break; tomllib counts lines the same way

    def defines(end: int) -> bool | None:  # None: the first ``end`` lines are no whole document
        try:
            return lookup(tomllib.loads("\n".join(lines[:end])), key) is not None
        except tomllib.TOMLDecodeError:
            return None

    name = re.escape(str(key[-1]))
    written = re.compile(rf"(?<![\w-]){name}(?![\w-])|\"{name}\"|'{name}'")
    for number, line in enumerate(lines):
        named = written.search(line)
        if named is None or defines(number) is not False:
            continue
        ends = (defines(end) for end in range(number + 1, len(lines) + 1))
        if next((found for found in ends if found is not None), False):
            return Span(file, number + 1, named.start() + 1, number + 1, named.end() + 1)
    return None


def _settings(found: _SettingsFile, root: Path) -> Settings:
    table, where = found.table, found.path

    def fail(key: tuple[str, ...], message: str) -> InputError:
        return found.error((*found.prefix, *key), f"[tool.hacfg] {dotted(key)}: {message}")

    for key in table:
        if key not in KEYS:
            message = f"[tool.hacfg] unknown key {key!r}{did_you_mean(key, list(KEYS))}"
            raise found.error((*found.prefix, key), message)

    written: dict[str, LogicalPath] = {}  # rule ID -> the first key that names it

    def ids(*key: str) -> tuple[str, ...]:
        value = lookup(table, key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise fail(key, "expected a list of rule IDs")
        named = tuple(v.strip().upper() if v.strip().upper() != "ALL" else "ALL" for v in value)
        for rule_id in named:
            written.setdefault(rule_id, key)
        return named

    def choice(choices: tuple[_Choice, ...], *key: str) -> _Choice:
        value = lookup(table, key)
        for known in choices:
            if value == known:
                return known
        raise fail(key, f"expected one of {', '.join(choices)}, got {value!r}")

    def table_of(key: str, convert: Callable[..., Any]) -> dict[str, Any]:
        value = table.get(key, {})
        if not isinstance(value, dict):
            raise fail((key,), "expected a table")
        return {k: convert(key, k) for k in value}

    settings = Settings(root=root, source=where)
    if "select" in table:
        settings.select = ids("select")
    if "ignore" in table:
        settings.ignore = ids("ignore")
    settings.per_file_ignores = table_of("per-file-ignores", ids)
    severities = table_of("severity", lambda *key: choice(SEVERITIES, *key))
    settings.severity = {k.upper(): v for k, v in severities.items()}
    for k in severities:
        written.setdefault(k.upper(), ("severity", k))
    if "fail-on" in table:
        settings.fail_on = choice(SEVERITIES, "fail-on")
    if "platform" in table:
        settings.platform = choice(PLATFORMS, "platform")
    if "include" in table:
        include = table["include"]
        if not isinstance(include, list) or not all(isinstance(v, str) for v in include):
            raise fail(("include",), "expected a list of globs")
        settings.include = tuple(include)
    if "baseline" in table:
        baseline = table["baseline"]
        if not isinstance(baseline, str) or not baseline or "\0" in baseline:
            raise fail(("baseline",), "expected the path of a baseline file")
        settings.baseline = root / baseline
    settings.file, settings.written = found, written
    return settings
