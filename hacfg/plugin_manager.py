"""Loads plugins from the ``hacfg`` entry-point group and calls hooks one plugin at a time.

Calling each implementation separately is what keeps one broken plugin from taking the rest
down: its exception becomes a :class:`PluginFailure` naming it, and the other results stand.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pluggy

from hacfg import hookspecs

GROUP = "hacfg"
BUILTIN_DISTRIBUTION = "hacfg"
AUTOLOAD_SWITCH = "HACFG_DISABLE_PLUGIN_AUTOLOAD"


@dataclass(frozen=True)
class PluginInfo:
    name: str
    module: str
    distribution: str
    version: str


PROVIDES = {
    "hacfg_rules": ("rules", lambda item: item.id),
    "hacfg_presets": ("presets", str),
    "hacfg_targets": ("targets", lambda item: item.name),
    "hacfg_prechecks": ("prechecks", lambda item: item.name),
    "hacfg_checkpoint_layouts": ("checkpoint layouts", lambda item: item.name),
    "hacfg_classify_failure": ("failure classifier", None),
}


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not be loaded, or raised inside a hook."""

    plugin: str
    hook: str
    error: str

    def __str__(self) -> str:
        where = "failed to load" if self.hook == "load" else f"raised in {self.hook}"
        return f"plugin {self.plugin!r} {where}: {self.error}"


@dataclass
class Manager:
    pm: pluggy.PluginManager
    infos: dict[str, PluginInfo] = field(default_factory=dict)
    failures: list[PluginFailure] = field(default_factory=list)

    def add(self, plugin: Any, info: PluginInfo) -> None:
        try:
            self.pm.register(plugin, name=info.name)
        except Exception as err:  # a bad hookimpl signature, say
            self.failures.append(PluginFailure(info.name, "load", _describe(err)))
            return
        self.infos[info.name] = info

    def add_module(self, module_name: str) -> None:
        """Register an importable module directly (``--plugin NAME``), for quick trials."""
        info = PluginInfo(module_name, module_name, "(--plugin)", "")
        try:
            module = importlib.import_module(module_name)
        except Exception as err:
            self.failures.append(PluginFailure(module_name, "load", _describe(err)))
            return
        self.add(module, info)

    def results(self, hook: str, **kwargs: Any) -> Iterator[tuple[str, Any]]:
        """``(plugin name, result)`` for each implementation that returned something, in call order."""
        for impl in reversed(getattr(self.pm.hook, hook).get_hookimpls()):
            try:
                result = impl.function(*(kwargs[arg] for arg in impl.argnames))
            except Exception as err:
                self.fail(impl.plugin_name, hook, err)
                continue
            if result is not None:
                yield impl.plugin_name, result

    def items(self, hook: str, kind: type, **kwargs: Any) -> Iterator[tuple[str, Any]]:
        """``(plugin, item)`` for every item the hook's implementations return, each checked to be a ``kind``."""
        for plugin, provided in self.results(hook, **kwargs):
            try:
                entries = list(provided)
            except TypeError:
                entries = [provided]
            for item in entries:
                if isinstance(item, kind):
                    yield plugin, item
                else:
                    self.fail(plugin, hook, f"returned {type(item).__name__}, expected a {kind.__module__}.{kind.__qualname__}")

    def fail(self, plugin: str, hook: str, err: BaseException | str) -> None:
        self.failures.append(PluginFailure(plugin, hook, err if isinstance(err, str) else _describe(err)))

    def provides(self, name: str) -> list[str]:
        """What one plugin adds, in words: ``rules: HA001, HA002``, ``failure classifier``."""
        plugin = self.pm.get_plugin(name)
        described = []
        for hook, (label, name_of) in PROVIDES.items():
            implementation = getattr(plugin, hook, None)
            if implementation is None:
                continue
            if name_of is None:
                described.append(label)
                continue
            try:
                items = list(implementation())
                described.append(f"{label}: {', '.join(sorted(str(name_of(item)) for item in items))}")
            except Exception as err:
                self.fail(name, hook, err)
        return described


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".splitlines()[0]


def _entry_points() -> Iterator[importlib.metadata.EntryPoint]:
    builtin_only = os.environ.get(AUTOLOAD_SWITCH, "") not in ("", "0")
    for entry_point in importlib.metadata.entry_points(group=GROUP):
        if builtin_only and (entry_point.dist is None or entry_point.dist.name != BUILTIN_DISTRIBUTION):
            continue
        yield entry_point


_requested: list[str] = []


def request(module_name: str) -> None:
    """Load ``module_name`` as a plugin too (``--plugin``); must come before the first ``get()``."""
    _requested.append(module_name)


def report_failures(echo) -> None:  # noqa: ANN001 - any callable taking one line
    """Say once, one line each, which plugins failed, if any were loaded in this process."""
    if get.cache_info().currsize:
        manager = get()
        for failure in manager.failures:
            echo(f"hacfg: {failure}")
        manager.failures.clear()


@functools.cache
def get() -> Manager:
    """The process's plugin manager, with every entry-point plugin loaded (once)."""
    pm = pluggy.PluginManager(GROUP)
    pm.add_hookspecs(hookspecs)
    manager = Manager(pm)
    for entry_point in _entry_points():
        dist = entry_point.dist
        dist_name, version = (dist.name, dist.version) if dist else ("?", "")
        name = entry_point.name if pm.get_plugin(entry_point.name) is None else f"{dist_name}:{entry_point.name}"
        info = PluginInfo(name, entry_point.value, dist_name, version)
        try:
            plugin = entry_point.load()
        except Exception as err:
            manager.failures.append(PluginFailure(name, "load", _describe(err)))
            continue
        manager.add(plugin, info)
    for module_name in _requested:
        manager.add_module(module_name)
    return manager
