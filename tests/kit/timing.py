"""How long a thing may take, derived from the timeouts the test gave it: never a bare number of
seconds in an assertion."""

from __future__ import annotations

# A Python process (an agent, a worker, the CLI) starting on a busy two-core machine, at most.
START = 5.0


def at_most(*timeouts: float, starts: int = 1) -> float:
    """The longest a run may take whose waits add up to ``sum(timeouts)``: each wait twice over (a
    loaded machine looks late) and ``starts`` process starts."""
    return 2 * sum(timeouts) + starts * START
