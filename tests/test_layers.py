"""The module graph, type-only imports included: what import-linter's contracts cannot say."""

from __future__ import annotations

import grimp

import hacfg.plugin


def test_no_module_imports_itself_through_others():
    graph = grimp.build_graph("hacfg")
    cycles = {
        tuple(sorted((module, imported)))
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
        if graph.find_shortest_chain(importer=imported, imported=module)
    }
    assert cycles == set()


def test_the_plugin_api_exports_exactly_its_names():
    exported = set(hacfg.plugin.__all__)
    public = {name for name in vars(hacfg.plugin) if not name.startswith("_") and name != "annotations"}
    assert exported == public
    assert {"hookimpl", "rule", "ScenarioContext", "JobContext", "Target", "Precheck", "CheckpointLayout"} <= exported
