"""A plugin whose rule, pre-check and classifier raise."""
from hacfg.plugin import Precheck, hookimpl, rule


@rule("RAI001", "always-raises", "warning")
def always_raises(ctx):
    """Raises on every file.

    Used to show that one broken rule does not stop the others.
    It never yields a finding.
    """
    raise KeyError("spec")


@always_raises.job
def always_raises_in_body(ctx):
    raise KeyError("spec")


class Exploding(Precheck):
    name = "exploding"

    def run(self, ctx):
        raise RuntimeError("probe crashed")


@hookimpl
def hacfg_rules():
    return [always_raises]


@hookimpl
def hacfg_prechecks():
    return [Exploding()]


@hookimpl(tryfirst=True)
def hacfg_classify_failure(failure):
    raise ValueError("classifier bug")
