"""A plugin whose rule, pre-check and classifier raise."""
from hacfg import hookimpl
from hacfg.agent.prechecks import Precheck
from hacfg.rules import rule


@rule("RAI001", "always-raises", "warning", kinds=("scenario", "job"))
def always_raises(ctx):
    """Raises on every file.

    Used to show that one broken rule does not stop the others.
    It never yields a finding.
    """
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
