"""How an attempt ended: environment fault, user error or hang. Classifiers are plugins (first answer wins)."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from hacfg import plugin_manager
from hacfg.agent.policy import Cause


@dataclass(frozen=True)
class Failure:
    """What a classifier sees about a failed attempt."""

    exit_code: int | None  # None when killed by a signal
    signal: int | None
    tail: tuple[str, ...]  # the last lines of stdout, then of stderr
    hung: bool = False

    @property
    def code(self) -> int:
        """The shell's view: the exit code, or 128 + the signal."""
        return self.exit_code if self.exit_code is not None else 128 + (self.signal or 0)

    def describe(self) -> str:
        if self.signal is not None:
            return f"killed by {signal.Signals(self.signal).name}"
        return f"exit {self.exit_code}"


@dataclass(frozen=True)
class Classification:
    cause: Cause
    reason: str
    classifier: str = ""
    peer: bool = False  # the failure follows from another rank's (connection closed by a peer, say)


def classify(failure: Failure) -> Classification:
    """Ask the classifier plugins in turn; an attempt nothing recognises is a user error."""
    manager = plugin_manager.get()
    for plugin, answer in manager.results("hacfg_classify_failure", failure=failure):
        if isinstance(answer, Classification):
            return Classification(answer.cause, answer.reason, answer.classifier or plugin, answer.peer)
        manager.fail(plugin, "hacfg_classify_failure", f"returned {type(answer).__name__}, expected a Classification")
    return Classification("user", f"{failure.describe()}, not recognised as an environment fault", "default")
