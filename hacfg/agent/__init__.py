"""`hacfg agent`: supervise a training command inside its container, as the platform would.

Pre-checks -> attempt (a child in its own process group) -> classify how it ended -> decide
(restart in place, give up, or exit 138 to ask for a reschedule) -> resume from the newest
complete checkpoint. Budgets persist in a state directory and every step is an event line.
"""
