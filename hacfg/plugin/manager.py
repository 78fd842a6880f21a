"""Loads plugins from the ``hacfg`` entry-point group and calls hooks one plugin at a time.

Calling each implementation separately is what keeps one broken plugin from taking the rest
down: its exception becomes a :class:`PluginFailure` naming it, and the other results stand.
hacfg's own plugins are the exception: without them hacfg is not working, which
:meth:`Manager.require_builtins` turns into one error line and exit code 3.

Other distributions' plugins are imported when the manager is made. hacfg's own are imported
when a hook they declare (``hacfg.plugins.HOOKS``) is first called, so ``hacfg lint`` does not
pay for the agent's pre-checks; they take the places loading everything at once gives them.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Iterator
from types import FunctionType, MethodType, ModuleType
from typing import Any, Generic, TypeVar

import pluggy

from hacfg.plugin import hookspecs
from hacfg.plugin.entrypoints import EntryPoint, entry_points

GROUP = "hacfg"
BUILTIN_DISTRIBUTION = "hacfg"
AUTOLOAD_SWITCH = "HACFG_DISABLE_PLUGIN_AUTOLOAD"


class PluginInfo:
    __slots__ = ("distribution", "module", "name", "version")

    def __init__(self, name: str, module: str, distribution: str, version: str = "") -> None:
        self.name = name
        self.module = module
        self.distribution = distribution
        self.version = version


class _Deferred:
    """One of hacfg's own plugins, not imported until one of ``hooks`` is called."""

    __slots__ = ("entry_point", "hooks", "info")

    def __init__(self, entry_point: EntryPoint, info: PluginInfo, hooks: frozenset[str]) -> None:
        self.entry_point = entry_point
        self.info = info
        self.hooks = hooks


PROVIDES: dict[str, tuple[str, Callable[[Any], object] | None]] = {
    "hacfg_rules": ("rules", lambda item: item.id),
    "hacfg_presets": ("presets", str),
    "hacfg_targets": ("targets", lambda item: item.name),
    "hacfg_prechecks": ("prechecks", lambda item: item.name),
    "hacfg_checkpoint_layouts": ("checkpoint layouts", lambda item: item.name),
    "hacfg_classify_failure": ("failure classifier", None),
    "hacfg_agent_event": ("event hook", None),
    "hacfg_before_restart": ("restart hook", None),
}


T = TypeVar("T")


class PluginFailure:
    """A plugin that could not be loaded, or raised inside a hook."""

    __slots__ = ("builtin", "error", "hook", "plugin")

    def __init__(self, plugin: str, hook: str, error: str, builtin: bool = False) -> None:
        self.plugin = plugin
        self.hook = hook
        self.error = error
        self.builtin = builtin  # one of hacfg's own

    def __str__(self) -> str:
        where = "failed to load" if self.hook == "load" else f"raised in {self.hook}"
        return f"plugin {self.plugin!r} {where}: {self.error}"


class BuiltinPluginError(Exception):
    """One of hacfg's own plugins is missing or broken: an installation problem, not the user's input."""


class Provided(Generic[T]):
    """One uniquely named thing a plugin provides (a rule, preset or target), and whose it is."""

    __slots__ = ("distribution", "item", "plugin")

    def __init__(self, item: T, plugin: str, distribution: str) -> None:
        self.item = item
        self.plugin = plugin
        self.distribution = distribution


class Manager:
    def __init__(self, pm: pluggy.PluginManager):
        self.pm = pm
        self.infos: dict[str, PluginInfo] = {}
        self.failures: list[PluginFailure] = []
        self._memo: dict[str, Any] = {}
        # Every plugin's name, deferred ones too, in the order loading them all at once registers them.
        self._order: list[str] = []
        self._deferred: dict[str, _Deferred] = {}

    def add(self, plugin: Any, info: PluginInfo) -> None:
        """Register a plugin after every one registered or deferred so far."""
        if info.name in self._deferred:
            self.failures.append(PluginFailure(info.name, "load", f"the name {info.name!r} is hacfg's own"))
        elif self._register(plugin, info):
            self._order.append(info.name)
            self._memo.clear()  # what the plugins provide has changed

    def _register(self, plugin: Any, info: PluginInfo) -> bool:
        try:
            self.pm.register(plugin, name=info.name)
        except Exception as err:  # a bad hookimpl signature, say
            builtin = info.distribution == BUILTIN_DISTRIBUTION
            self.failures.append(PluginFailure(info.name, "load", _describe(err), builtin=builtin))
            return False
        self.infos[info.name] = info
        return True

    def add_entry_point(self, entry_point: EntryPoint, distribution: str) -> None:
        """Import and register an entry point's plugin, or defer it if it is one of hacfg's own that says
        which hooks it implements."""
        name = entry_point.name
        if self.pm.get_plugin(name) is not None or name in self._deferred:
            name = f"{distribution}:{name}"
        info = PluginInfo(name, entry_point.value, distribution, entry_point.version)
        builtin = distribution == BUILTIN_DISTRIBUTION
        hooks = _declared_hooks(entry_point.value) if builtin else None
        if hooks is not None:
            self._deferred[name] = _Deferred(entry_point, info, hooks)
            self._order.append(name)
            return
        try:
            plugin = entry_point.load()
        except Exception as err:
            self.failures.append(PluginFailure(name, "load", _describe(err), builtin=builtin))
            return
        self.add(plugin, info)

    def _import_builtins(self, hook: str | None) -> None:
        """Import the deferred plugins that implement ``hook`` (None: all of them) and put them where loading
        every plugin at once would: pluggy calls implementations in registration order, so the plugins
        registered after that place, from the first that shares a hook with them on, register again after."""
        due = [name for name, deferred in self._deferred.items() if hook is None or hook in deferred.hooks]
        loaded: dict[str, tuple[Any, PluginInfo]] = {}
        hooks: set[str] = set()
        for name in due:
            deferred = self._deferred.pop(name)
            try:
                loaded[name] = (deferred.entry_point.load(), deferred.info)
            except Exception as err:
                self.failures.append(PluginFailure(name, "load", _describe(err), builtin=True))
                self._order.remove(name)
            else:
                hooks |= deferred.hooks
        if not loaded:
            return
        after = self._order[min(self._order.index(name) for name in loaded) :]
        later = [name for name in after if name in self.infos]
        sharing = next((i for i, name in enumerate(later) if hooks & self._hooks(name)), len(later))
        moved = {name: (self.pm.unregister(name=name), self.infos[name]) for name in later[sharing:]}
        for name in after:
            again = loaded.get(name) or moved.get(name)
            if again is not None and not self._register(*again):
                self._order.remove(name)

    def _hooks(self, name: str) -> set[str]:
        return {caller.name for caller in self.pm.get_hookcallers(self.pm.get_plugin(name)) or ()}

    def add_module(self, module_name: str) -> None:
        """Register an importable module directly (``--plugin NAME``), for quick trials."""
        info = PluginInfo(module_name, module_name, "(--plugin)")
        try:
            module = importlib.import_module(module_name)
        except Exception as err:
            self.failures.append(PluginFailure(module_name, "load", _describe(err)))
            return
        self.add(module, info)

    def results(self, hook: str, **kwargs: Any) -> Iterator[tuple[str, Any]]:
        """``(plugin name, result)`` for each implementation that returned something, in call order."""
        self._import_builtins(hook)
        for impl in reversed(getattr(self.pm.hook, hook).get_hookimpls()):
            try:
                result = impl.function(*(kwargs[arg] for arg in impl.argnames))
            except Exception as err:
                self.fail(impl.plugin_name, hook, err)
                continue
            if result is not None:
                yield impl.plugin_name, result

    def items(self, hook: str, kind: type[T], **kwargs: Any) -> Iterator[tuple[str, T]]:
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
                    self.fail(
                        plugin,
                        hook,
                        f"returned {type(item).__name__}, expected a {kind.__module__}.{kind.__qualname__}",
                    )

    def fail(self, plugin: str, hook: str, err: BaseException | str) -> None:
        self.failures.append(PluginFailure(plugin, hook, err if isinstance(err, str) else _describe(err)))

    def drain(self) -> list[PluginFailure]:
        """The failures not reported yet; each is reported once."""
        drained, self.failures = self.failures, []
        return drained

    def distribution(self, plugin: str) -> str:
        info = self.infos.get(plugin)
        return info.distribution if info else plugin

    def unique(
        self,
        hook: str,
        entries: Iterable[tuple[str, str, T]],
        *,
        what: str,
        admit: Callable[[str, str], str | None] = lambda name, distribution: None,
    ) -> dict[str, Provided[T]]:
        """``(plugin, name, item)`` entries by name, each name once; a rival is a failure of its plugin.

        hacfg's own plugins come first, then the others by plugin name, so which of two rivals keeps
        a name never depends on install order. ``admit`` may refuse a name with a reason.
        """
        found: dict[str, Provided[T]] = {}
        for plugin, name, item in sorted(entries, key=lambda entry: (not self._builtin(entry[0]), entry[0])):
            distribution = self.distribution(plugin)
            refusal = admit(name, distribution)
            if refusal is not None:
                self.fail(plugin, hook, f"{what} {name}: {refusal}")
            elif name in found:
                self.fail(plugin, hook, f"{what} {name} is already provided by {found[name].distribution}")
            else:
                found[name] = Provided(item, plugin, distribution)
        return found

    def memo(self, key: str, compute: Callable[[], T]) -> T:
        """``compute()`` once per manager: registries live exactly as long as the plugins they list."""
        if key not in self._memo:
            self._memo[key] = compute()
        result: T = self._memo[key]
        return result

    def _builtin(self, plugin: str) -> bool:
        return self.distribution(plugin) == BUILTIN_DISTRIBUTION

    def require_builtins(self, hook: str) -> None:
        """Import hacfg's own plugins for ``hook``; raise :class:`BuiltinPluginError` when any of them did not load."""
        self._import_builtins(hook)
        broken = [failure for failure in self.failures if failure.builtin]
        if not broken and (self._deferred or any(self._builtin(name) for name in self.infos)):
            return
        self.failures = [failure for failure in self.failures if not failure.builtin]
        if not broken:
            raise BuiltinPluginError(
                "hacfg's own plugins are not registered (no entry points for the hacfg distribution): "
                "install hacfg (pip install -e .) instead of putting a checkout on PYTHONPATH"
            )
        more = f" (and {len(broken) - 1} more)" if len(broken) > 1 else ""
        raise BuiltinPluginError(f"built-in {broken[0]}{more}; reinstall hacfg (pip install -e .)")

    def listing(self) -> str:
        """``hacfg plugins``: each plugin's name, distribution, version and module, then what it provides."""
        self._import_builtins(None)
        lines = []
        for name, info in sorted(self.infos.items()):
            version = f" {info.version}".rstrip()
            lines.append(f"{name:<20} {info.distribution}{version:<10} {info.module}\n")
            lines += [f"{'':<20}   {line}\n" for line in self.provides(name)]
        return "".join(lines)

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


def _declared_hooks(module: str) -> frozenset[str] | None:
    """The hooks hacfg's own plugin ``module`` declares; None imports it at once, like any other plugin."""
    try:
        builtins = importlib.import_module("hacfg.plugins")
    except ImportError:  # not installed: importing each plugin reports it
        return None
    hooks: frozenset[str] | None = builtins.hooks_of(module)
    return hooks


def _entry_points() -> Iterator[tuple[EntryPoint, str]]:
    """The group's entry points, each with its distribution's name."""
    builtin_only = os.environ.get(AUTOLOAD_SWITCH, "") not in ("", "0")
    for entry_point in entry_points(GROUP):
        distribution = entry_point.distribution or "?"
        if builtin_only and distribution != BUILTIN_DISTRIBUTION:
            continue
        yield entry_point, distribution


_requested: list[str] = []
_current: Manager | None = None


def request(module_name: str) -> None:
    """Load ``module_name`` as a plugin too (``--plugin``), now if plugins are loaded already."""
    _requested.append(module_name)
    if _current is not None:
        _current.add_module(module_name)


def reset() -> None:
    """Forget the loaded plugins, the requested ones and every registry built from them.

    The next :func:`get` loads the entry points afresh: tests register plugins in-process this way.
    """
    global _current
    _current = None
    _requested.clear()


def drain() -> list[PluginFailure]:
    """The failures not reported yet, if plugins were loaded in this process at all."""
    return _current.drain() if _current is not None else []


def get() -> Manager:
    """The process's plugin manager, with every entry-point plugin loaded (once)."""
    global _current
    if _current is None:
        _current = _load()
    return _current


class _PluginManager(pluggy.PluginManager):
    """pluggy's manager, which skips at a glance what a plugin module holds besides callables: its
    imports, constants and classes implement no hook, and pluggy's careful look at each of a
    module's names costs a cold lint about 1 ms."""

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> pluggy.HookimplOpts | None:
        if isinstance(plugin, ModuleType) and not isinstance(vars(plugin).get(name), _HOOKABLE):
            return None
        return super().parse_hookimpl_opts(plugin, name)


_HOOKABLE = (FunctionType, MethodType, staticmethod, classmethod)  # what pluggy takes for a hook implementation


def _load() -> Manager:
    pm = _PluginManager(GROUP)
    pm.add_hookspecs(hookspecs)
    manager = Manager(pm)
    for entry_point, distribution in _entry_points():
        manager.add_entry_point(entry_point, distribution)
    for module_name in _requested:
        manager.add_module(module_name)
    return manager
