"""How an attempt ended: environment fault, user error or hang.

Classifier plugins are asked first, one at a time (the first answer wins), so a site can name its
own errors; then the platform's own rules, which need no plugin: :func:`hacfg.agent.failure_log.weigh`.
"""

from __future__ import annotations

from hacfg.agent.failure_log import weigh
from hacfg.plugin import manager as plugin_manager
from hacfg.plugin.recovery import Classification, Failure

RULES = "hacfg"  # the classifier named in a verdict of the platform's rules


def classify(failure: Failure) -> Classification:
    """A plugin's answer, or the platform's rules applied to the evidence."""
    manager = plugin_manager.get()
    for plugin, answer in manager.results("hacfg_classify_failure", failure=failure):
        if isinstance(answer, Classification):
            return answer._replace(classifier=answer.classifier or plugin)
        manager.fail(plugin, "hacfg_classify_failure", f"returned {type(answer).__name__}, expected a Classification")
    return weigh(failure)._replace(classifier=RULES)
