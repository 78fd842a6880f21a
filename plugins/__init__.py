"""hacfg's built-in plugins, registered through the ``hacfg`` entry-point group like any other.

``HOOKS`` says which hooks each one implements (a package's entry: every module in it), so a
command imports only the plugins whose hooks it calls. tests/plugin/test_plugins.py checks it against
the hook implementations each module has.

Each imports only from ``hacfg.plugin``, as a third-party plugin does; that face imports a name
when it is first asked for, so lint and build import no agent code.
"""

HOOKS: dict[str, frozenset[str]] = {
    "hacfg.plugins.presets": frozenset({"hacfg_presets"}),
    "hacfg.plugins.modelarts": frozenset({"hacfg_targets"}),
    "hacfg.plugins.volcano": frozenset({"hacfg_targets"}),
    "hacfg.plugins.jobset": frozenset({"hacfg_targets"}),
    "hacfg.plugins.trainjob": frozenset({"hacfg_targets"}),
    "hacfg.plugins.mindcluster": frozenset({"hacfg_targets"}),
    "hacfg.plugins.rules": frozenset({"hacfg_rules"}),
    "hacfg.plugins.prechecks": frozenset({"hacfg_prechecks"}),
    "hacfg.plugins.npu": frozenset({"hacfg_prechecks"}),
    "hacfg.plugins.layouts": frozenset({"hacfg_checkpoint_layouts"}),
}


def hooks_of(module: str) -> frozenset[str] | None:
    """The hooks the built-in plugin ``module`` implements, or None when it declares none."""
    while module:
        if module in HOOKS:
            return HOOKS[module]
        module = module.rpartition(".")[0]
    return None
