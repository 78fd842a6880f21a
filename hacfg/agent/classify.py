"""How an attempt ended: environment fault, user error or hang. Classifiers are plugins (first answer wins)."""

from __future__ import annotations

from hacfg.plugin import manager as plugin_manager
from hacfg.plugin.recovery import Classification, Failure
from hacfg.restart.vocabulary import Cause


def classify(failure: Failure) -> Classification:
    """Ask the classifier plugins in turn; an attempt nothing recognises is a user error."""
    manager = plugin_manager.get()
    for plugin, answer in manager.results("hacfg_classify_failure", failure=failure):
        if isinstance(answer, Classification):
            return Classification(answer.cause, answer.reason, answer.classifier or plugin, answer.peer)
        manager.fail(plugin, "hacfg_classify_failure", f"returned {type(answer).__name__}, expected a Classification")
    return Classification(Cause.USER, f"{failure.describe()}, not recognised as an environment fault", "default")
