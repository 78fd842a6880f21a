"""Plugins: found through entry points, listed, and isolated when they break."""

from __future__ import annotations

import importlib.metadata
import json
import sys
import types

import pluggy
import pytest
from kit.agents import read_events
from kit.cli import run_hacfg
from kit.packaging import distribution, imported_modules
from kit.paths import REPO

from hacfg.agent.classify import classify
from hacfg.lint import engine as lint
from hacfg.lint.settings import Settings
from hacfg.plugin import Classification, Failure, JobContext, Problem, ScenarioContext, hookimpl, hookspecs, rule
from hacfg.plugin import manager as plugin_manager
from hacfg.plugins import HOOKS, hooks_of

PLUGINS = REPO / "tests" / "data" / "plugins"
BODY = '{"kind": "job", "metadata": {"name": "x", "annotations": {"fault-tolerance/job-retry-num": 3}}, "spec": {"volumes": [{}]}}\n'


@pytest.fixture
def site(tmp_path, monkeypatch):
    """Broken plugins installed on sys.path for this test; the plugin manager loads afresh."""
    entry_points = {"broken": "broken_import", "raising": "raising", "garbage": "garbage", "rival": "claims"}
    distribution(tmp_path / "site", "broken-plugins", entry_points, version="1.2.3")
    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.chdir(tmp_path)
    plugin_manager.reset()
    yield tmp_path
    plugin_manager.reset()


def test_broken_plugins_are_named_once_and_everything_else_works(site, cli):
    (site / "job.json").write_text(BODY)
    result = cli("lint", "-f", "json", "job.json")
    findings = json.loads(result.out)["findings"]
    assert result.code == 1
    assert ("HA007", "job.json") in {(f["rule"], f["path"]) for f in findings}  # built-in rules still ran
    plugin_errors = sorted(f["message"] for f in findings if f["rule"] == "HA000")
    assert plugin_errors == sorted([
        "plugin 'broken' failed to load: ImportError: libascendcl.so: cannot open shared object file",
        "rule RAI001 of plugin 'raising' raised KeyError: 'spec'",
        "plugin 'garbage' raised in hacfg_rules: returned int, expected a hacfg.plugin.ruletypes.Rule",
        "plugin 'rival' raised in hacfg_rules: rule HA050: the HA prefix is hacfg's own; pick a prefix for your plugin",
        "plugin 'rival' raised in hacfg_rules: rule RAI001 is already provided by broken-plugins",
    ])
    assert "Traceback" not in result.err


def test_wrong_types_from_presets_and_targets_get_a_clear_message(site, cli):
    result = cli("build", "--only", "annotations", "single-node")
    assert result.code == 0
    assert json.loads(result.out) == {"metadata": {"annotations": {"fault-tolerance/job-retry-num": "2"}}}
    assert "hacfg: plugin 'garbage' raised in hacfg_presets: returned str, expected a dict of name -> path" in result.err
    assert "hacfg: plugin 'garbage' raised in hacfg_targets: returned str, expected a hacfg.plugin.targets.Target" in result.err
    assert result.err.count("plugin 'broken' failed to load") == 1


def test_autoload_can_be_turned_off(site, cli, monkeypatch):
    (site / "job.json").write_text(BODY)
    monkeypatch.setenv("HACFG_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = cli("lint", "-f", "json", "job.json")
    assert [f["rule"] for f in json.loads(result.out)["findings"]] == ["HA007"]
    assert result.err == ""


def test_plugins_lists_distribution_version_and_what_each_provides(site, cli):
    result = cli("plugins")
    assert "raising              broken-plugins 1.2.3" in result.out
    assert "rules: RAI001" in result.out
    assert "rules-checkpoint     hacfg" in result.out and "rules: HA001, HA002, HA011, HA017" in result.out


def test_plugin_option_loads_a_module_for_a_quick_trial(cli, monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))
    plugin_manager.reset()
    result = cli("--plugin", "raising", "rules")
    assert "RAI001" in result.out and "(--plugin)" in result.out
    plugin_manager.reset()
    assert cli("rules").out.count("RAI001") == 0


def test_plugins_load_only_from_entry_points_or_an_explicit_flag(tmp_path, cli, monkeypatch):
    (tmp_path / "hacfg_sneaky.py").write_text("from pathlib import Path\nPath(__file__).with_name('loaded').touch()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    plugin_manager.reset()
    cli("rules")
    assert not (tmp_path / "loaded").exists()
    cli("--plugin", "hacfg_sneaky", "rules")
    assert (tmp_path / "loaded").exists()
    plugin_manager.reset()


@rule("TST001", "no-single-node", "info")
def no_single_node(ctx: ScenarioContext):
    """Flags single-node scenarios.

    A rule registered in-process by a test.
    It reads both kinds of file.
    """
    if ctx.config.scenario == "single-node":
        yield Problem(("scenario",), "single node")


@no_single_node.job
def no_single_node_in_body(ctx: JobContext):
    if ctx.body.node_count == 1:
        yield Problem(("spec", "resource", "node_count"), "single node")


class SitePlugin:
    """A plugin can be any object with hook implementations."""

    @hookimpl
    def hacfg_rules(self):
        return [no_single_node]


def test_a_plugin_registered_in_process_runs_its_check_per_kind_of_file(hacfg_plugin, write):
    hacfg_plugin(SitePlugin(), name="site")
    scenario = write("ha.yaml", "version: 1\nscenario: single-node\n")
    body = write("job.json", '{"kind": "job", "metadata": {"name": "x"}, "spec": {"resource": {"node_count": 1}}}\n')
    report = lint.lint_paths([scenario, body], Settings(select=("TST",)))
    assert [(f.path, f.line, f.logical_path) for f in report.findings] == [
        (str(scenario), 2, "scenario"),
        (str(body), 1, "spec.resource.node_count"),
    ]
    assert lint.registry()["TST001"].rule.kinds == ("scenario", "job")
    assert lint.registry()["TST001"].plugin == "site"


def test_the_registered_plugin_is_gone_after_the_test():
    plugin_manager.reset()
    assert "TST001" not in lint.registry()


@pytest.mark.slow
def test_agent_reports_broken_prechecks_and_classifiers_as_events(tmp_path):
    env = {
        "PYTHONPATH": str(PLUGINS),
        "HACFG_PRECHECK_ROOT_MIN": "1K",
        "HACFG_PRECHECK_SHM_MIN": "1K",
        "VC_WORKER_HOSTS": "localhost",
    }
    config = tmp_path / "ha.yaml"
    config.write_text("version: 1\nscenario: single-node\njob: {accelerator: cpu}\nrestart: {max: 1}\n")
    result = run_hacfg("--plugin", "raising", "agent", "--config", config, "--state-dir", tmp_path / "state", "--", sys.executable, "-c", "pass", env=env)
    assert result.code == 138  # a pre-check that raises counts as failed
    assert "[hacfg] item=exploding status=failed detail=RuntimeError: probe crashed" in result.err
    # with pre-checks off, the classifier that raises is reported and the built-in one decides
    result = run_hacfg(
        "--plugin", "raising", "agent", "--config", config, "--no-precheck", "--state-dir", tmp_path / "s2", "--",
        sys.executable, "-c", "import os; os.kill(os.getpid(), 9)", env=env,
    )
    assert result.code == 138
    events = read_events(tmp_path / "s2")
    failures = [e for e in events if e["event"] == "plugin_failure"]
    assert failures[0]["plugin"] == "raising" and failures[0]["error"] == "ValueError: classifier bug"
    assert [e["cause"] for e in events if e["event"] == "attempt_exit"] == ["environment", "environment"]


@pytest.mark.slow
def test_recovery_hooks_see_every_event_and_run_before_each_restart(tmp_path):
    log = tmp_path / "recovery.jsonl"
    result = run_hacfg(
        "--plugin", "recovery", "agent", "--max-restarts", "1", "--no-precheck", "--state-dir", tmp_path / "state", "--",
        sys.executable, "-c", "import os; os.kill(os.getpid(), 9)", env={"PYTHONPATH": str(PLUGINS), "RECOVERY_LOG": str(log)},
    )
    assert result.code == 138, result.err
    told = [json.loads(line) for line in log.read_text().splitlines()]
    events = read_events(tmp_path / "state")
    assert [{k: v for k, v in t.items() if k != "hook"} for t in told if t["hook"] == "event"] == events  # each one, once written
    restarts = [(t["action"], t["attempt"], t["cause"], t["node"]) for t in told if t["hook"] == "restart"]
    assert restarts == [("proc_restart", 1, "environment", 0), ("job_reschedule", 2, "environment", 0)]
    order = [t["hook"] if t["hook"] == "restart" else t["event"] for t in told]
    assert order[order.index("restart") - 1:order.index("restart") + 2] == ["decision", "restart", "attempt_start"]


@pytest.mark.slow
def test_a_failing_recovery_hook_is_an_event_and_the_restart_goes_ahead(tmp_path):
    result = run_hacfg(
        "--plugin", "raising_hooks", "agent", "--max-restarts", "1", "--no-precheck", "--state-dir", tmp_path / "state", "--",
        sys.executable, "-c", "import os; os.kill(os.getpid(), 9)", env={"PYTHONPATH": str(PLUGINS)},
    )
    assert result.code == 138 and "Traceback" not in result.err
    events = read_events(tmp_path / "state")
    assert [e["event"] for e in events].count("attempt_start") == 2
    failures = [(e["hook"], e["error"]) for e in events if e["event"] == "plugin_failure"]
    assert failures == [
        ("hacfg_agent_event", "ConnectionError: webhook unreachable"),  # attempt 1
        ("hacfg_before_restart", "PermissionError: /dev/shm"),
        ("hacfg_agent_event", "ConnectionError: webhook unreachable"),  # attempt 2
        ("hacfg_before_restart", "PermissionError: /dev/shm"),
    ]
    assert "[hacfg] plugin 'raising_hooks' raised in hacfg_before_restart: PermissionError: /dev/shm" in result.err


@pytest.mark.slow
def test_a_builtin_plugin_that_fails_to_load_exits_3_with_one_line(tmp_path):
    """A broken installation, as a checkout on PYTHONPATH next to another hacfg's metadata gives."""
    distribution(tmp_path, "hacfg", {"presets": "hacfg.plugins.presets", "rules-gone": "hacfg.plugins.no_such_rules"}, version="0.0.1")
    for command in (("rules",), ("lint", "."), ("build", "single-node")):
        result = run_hacfg(*command, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
        assert result.code == 3, result.err
        assert result.err == (
            "hacfg: error: built-in plugin 'rules-gone' failed to load: "
            "ModuleNotFoundError: No module named 'hacfg.plugins.no_such_rules'; reinstall hacfg (pip install -e .)\n"
        )


@pytest.mark.slow
def test_a_broken_builtin_plugin_fails_the_commands_that_call_its_hook(tmp_path):
    """Its hook declared, the plugin is imported only when that hook is called: build calls no rules."""
    entry_points = {"presets": "hacfg.plugins.presets", "modelarts": "hacfg.plugins.modelarts", "rules-gone": "hacfg.plugins.rules.gone"}
    distribution(tmp_path, "hacfg", entry_points, version="0.0.1")
    for command in (("rules",), ("lint", ".")):
        result = run_hacfg(*command, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
        assert (result.code, result.err) == (
            3,
            "hacfg: error: built-in plugin 'rules-gone' failed to load: "
            "ModuleNotFoundError: No module named 'hacfg.plugins.rules.gone'; reinstall hacfg (pip install -e .)\n",
        )
    result = run_hacfg("build", "--only", "annotations", "single-node", cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert (result.code, result.err) == (0, "")


def test_no_builtin_plugins_at_all_exits_3(tmp_path):
    distribution(tmp_path, "hacfg", {}, version="0.0.1")
    result = run_hacfg("rules", cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert result.code == 3
    assert result.err.startswith("hacfg: error: hacfg's own plugins are not registered") and result.err.count("\n") == 1


def builtin_entry_points():
    return [ep for ep in importlib.metadata.entry_points(group="hacfg") if ep.dist and ep.dist.name == "hacfg"]


def test_each_builtin_plugin_declares_exactly_the_hooks_it_implements():
    """A command imports only the built-in plugins whose hooks it calls, so each declaration must be right."""
    for entry_point in builtin_entry_points():
        pm = pluggy.PluginManager("hacfg")
        pm.add_hookspecs(hookspecs)
        module = entry_point.load()
        pm.register(module)
        implemented = {caller.name for caller in pm.get_hookcallers(module) or []}
        assert hooks_of(entry_point.value) == implemented, entry_point.name
    declared = {module for module in HOOKS if any(hooks_of(ep.value) is HOOKS[module] for ep in builtin_entry_points())}
    assert declared == set(HOOKS)  # nothing declared for a plugin that is gone


def builtin_plugins_implementing(*hooks: str) -> set[str]:
    return {ep.value for ep in builtin_entry_points() if hooks_of(ep.value) & set(hooks)}


@pytest.mark.slow
def test_a_command_imports_only_the_builtin_plugins_whose_hooks_it_calls(builtin_plugins_only):
    plugins = {ep.value for ep in builtin_entry_points()}
    lint_imports = imported_modules("lint", "examples/resumable-training/ha.yaml")
    assert lint_imports & plugins == builtin_plugins_implementing("hacfg_rules", "hacfg_presets")
    assert {"hacfg.plugins.rules.checkpoint", "hacfg.plugins.presets"} <= lint_imports
    assert not {name for name in lint_imports if name.startswith("hacfg.agent")}  # nor the agent's types
    # passthrough is judged within the body it joins: linting it builds that body
    passthrough_imports = imported_modules("lint", "examples/llama-pretrain/ha.yaml")
    assert passthrough_imports & plugins == builtin_plugins_implementing("hacfg_rules", "hacfg_presets", "hacfg_targets")
    build_imports = imported_modules("build", "examples/llama-pretrain/ha.yaml")
    assert build_imports & plugins == builtin_plugins_implementing("hacfg_presets", "hacfg_targets")
    assert {"hacfg.plugins.modelarts", "hacfg.plugins.volcano"} <= build_imports
    assert not {name for name in build_imports if name.startswith("hacfg.agent")}


THIRD_PARTY = '''\
"""A plugin as its author writes it from docs/plugins.md: a rule and a pre-check."""

from hacfg.plugin import Precheck, PrecheckContext, PrecheckResult, Problem, ScenarioContext, hookimpl, rule


@rule("HEL001", "says-hello", "info")
def says_hello(ctx: ScenarioContext):
    """Says hello to every scenario file.

    A rule of a third-party distribution, on every scenario file.
    """
    yield Problem(("scenario",), "hello from a third-party plugin")


class Scratch(Precheck):
    name = "scratch"

    def run(self, ctx: PrecheckContext) -> list[PrecheckResult]:
        return [PrecheckResult(self.name, "passed")]


@hookimpl
def hacfg_rules():
    return [says_hello]


@hookimpl
def hacfg_prechecks():
    return [Scratch()]
'''


@pytest.mark.slow
def test_a_cold_lint_with_a_third_party_plugin_imports_no_agent_module(tmp_path):
    """The documented import, ``from hacfg.plugin import ...``, costs a lint the types a plugin names, none of the agent."""
    site = tmp_path / "site"
    distribution(site, "hacfg-plugin-hello", {"hello": "hacfg_plugin_hello"})
    (site / "hacfg_plugin_hello.py").write_text(THIRD_PARTY)
    env = {"PYTHONPATH": str(site)}
    linted = run_hacfg("lint", "examples/llama-pretrain/ha.yaml", cwd=REPO, env=env)
    assert ":4:11: HEL001 info hello from a third-party plugin" in linted.out, linted.out + linted.err
    imported = imported_modules("lint", "examples/llama-pretrain/ha.yaml", env=env)
    assert {"hacfg_plugin_hello", "hacfg.plugin.precheck"} <= imported  # loaded, with the pre-check types it subclasses
    assert "hacfg.plugin.recovery" not in imported  # what a pre-check plugin does not name, it does not pay for
    assert not {name for name in imported if name.startswith("hacfg.agent")}


EVERYWHERE = """\
from hacfg.plugin import hookimpl


@hookimpl
def hacfg_rules():
    return []


@hookimpl
def hacfg_presets():
    return {}


@hookimpl
def hacfg_targets():
    return []


@hookimpl
def hacfg_prechecks():
    return []


@hookimpl(trylast=True)
def hacfg_classify_failure(failure):
    return None


@hookimpl
def hacfg_checkpoint_layouts():
    return []


@hookimpl
def hacfg_agent_event(event):
    pass
"""


def test_builtin_plugins_imported_late_are_called_in_the_order_loading_all_at_once_gives(tmp_path, monkeypatch):
    """Other distributions' plugins before and after hacfg's, a --plugin module only on a hook no built-in
    implements, and one registered in-process, the hooks called in an order of their own."""
    for where, name in ((tmp_path / "before", "site_before"), (tmp_path / "after", "site_after")):
        distribution(where, name.replace("_", "-"), {name: name})
    for name in ("site_before", "site_after", "in_process"):
        (tmp_path / f"{name}.py").write_text(EVERYWHERE)
    (tmp_path / "trial.py").write_text("from hacfg.plugin import hookimpl\n" + EVERYWHERE[EVERYWHERE.index("@hookimpl\ndef hacfg_agent_event") :])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(tmp_path / "before"))
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path / "after")])
    plugin_manager.reset()
    try:
        plugin_manager.request("trial")
        manager = plugin_manager.get()
        manager.add(importlib.import_module("in_process"), plugin_manager.PluginInfo("in_process", "in_process", "(test)"))
        hooks = ["hacfg_rules", "hacfg_checkpoint_layouts", "hacfg_presets", "hacfg_classify_failure", "hacfg_targets", "hacfg_prechecks", "hacfg_agent_event"]
        for hook in hooks:
            list(manager.results(hook, failure=Failure(1, None, ()), event={}))
        assert manager.failures == []

        pm = pluggy.PluginManager("hacfg")  # every plugin imported and registered at once
        pm.add_hookspecs(hookspecs)
        for entry_point in importlib.metadata.entry_points(group="hacfg"):
            pm.register(entry_point.load(), name=entry_point.name)
        for name in ("trial", "in_process"):
            pm.register(importlib.import_module(name), name=name)
        for hook in hooks:
            expected = [impl.plugin_name for impl in getattr(pm.hook, hook).get_hookimpls()]
            assert [impl.plugin_name for impl in getattr(manager.pm.hook, hook).get_hookimpls()] == expected, hook
        rules = [impl.plugin_name for impl in pm.hook.hacfg_rules.get_hookimpls()]
        assert rules.index("site_before") < rules.index("rules-job") < rules.index("site_after") < rules.index("in_process")
        assert [impl.plugin_name for impl in pm.hook.hacfg_agent_event.get_hookimpls()] == ["site_before", "site_after", "trial", "in_process"]
    finally:
        plugin_manager.reset()


def test_the_first_classification_wins_asking_the_plugin_registered_last_first():
    """hacfg_classify_failure is called one implementation at a time: None passes, the first answer ends it."""
    asked = []

    def classifier(name, answer):
        @hookimpl
        def hacfg_classify_failure(failure):
            asked.append(name)
            return answer

        return types.SimpleNamespace(hacfg_classify_failure=hacfg_classify_failure)

    plugin_manager.reset()
    try:
        manager = plugin_manager.get()
        for name, answer in (("earlier", Classification("environment", "never asked")), ("answering", Classification("hang", "stuck")), ("passing", None)):
            manager.add(classifier(name, answer), plugin_manager.PluginInfo(name, name, "(test)"))
        verdict = classify(Failure(1, None, ()))
        assert (verdict.cause, verdict.reason, verdict.classifier) == ("hang", "stuck", "answering")
        assert asked == ["passing", "answering"]
    finally:
        plugin_manager.reset()
