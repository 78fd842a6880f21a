"""The words the agent writes and reads: causes, actions and the kinds of event.

Each is a ``StrEnum``, so a member is the very string the events log has always held.
"""

from __future__ import annotations

from enum import StrEnum


class Cause(StrEnum):
    """Why an attempt ended badly, as the restart rules tell causes apart."""

    ENVIRONMENT = "environment"
    USER = "user"
    HANG = "hang"


class Action(StrEnum):
    """What the restart rules decide after an attempt, in the platform's recovery words."""

    PROC_RESTART = "proc_restart"
    POD_RESCHEDULE = "pod_reschedule"
    JOB_RESCHEDULE = "job_reschedule"
    GIVE_UP = "give_up"
