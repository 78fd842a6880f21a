"""The words the agent writes and reads: how attempts end, what is decided, the kinds of event.

Each is a ``StrEnum``, so a member is the very string the events log has always held, and a
log written before these types existed reads the same.

A node's agent passes through these states; each transition is recorded as one event:

============  ===================================  ===============================================
state         entered when                         event written
============  ===================================  ===============================================
starting      the agent starts, state loaded       ``agent_start`` (``state_recovered`` first if
                                                   the state file was unreadable, ``state_left``
                                                   if it was closed or another job's)
checking      pre-checks are on                    ``precheck`` per item
planned       a round is planned: attempt number,  (none; the plan is in ``attempt_start``;
              counters, the checkpoint to resume   ``checkpoint_doubt`` first for each doubt about
                                                   the checkpoint chosen)
running       the workers start                    ``attempt_start`` (with how they started, a
                                                   :class:`Start`), then ``first_activity`` at
                                                   the first output or heartbeat and
                                                   ``first_step`` at the first step its
                                                   heartbeat reports;
                                                   ``checkpoint_overdue`` once no new complete
                                                   checkpoint came for 2 x checkpoint.interval;
                                                   ``straggler`` (node 0) once per rank that
                                                   computes persistently slower than the group
ended         the workers exit, hang or are told   ``hang`` when hung, ``signal`` when the agent
              to stop                              is signalled, then ``attempt_exit`` with an
                                                   :class:`Ending`; under a per-card launch,
                                                   ``card_exit`` for each other card of the node
                                                   whose process failed by itself
judged        the round's verdict, one per job     ``decision`` with an :class:`Action`
exited        the verdict is final                 ``agent_exit``
============  ===================================  ===============================================

From *judged*, ``proc_restart`` goes back to *planned*; every other action ends in *exited*:
``success`` (0), ``stop`` (128 + signal), ``pod_reschedule``/``job_reschedule`` (138, retry
elsewhere) and ``give_up`` (the command's own code). ``success`` and ``give_up`` also close the
job's state: a later agent on the same path starts from zero.

In any state, ``group_rejected`` records a value from the group's store that failed its check
(the agent then leaves with 138). Right after ``agent_start``, ``leftovers_ended`` names the
processes an earlier agent on the same state folder left running, ended before anything starts,
and ``metrics_unavailable`` a ``--metrics-port`` that could not be served. ``state_unwritable``
says, once per file, that the state folder could not be written; the agent goes on from memory.
``checkpoint_written`` records each step of the memory tier the agent wrote to disk in the
background (``save_memory(..., to_disk=True)``), or why it could not.
"""

from __future__ import annotations

from enum import StrEnum


class Cause(StrEnum):
    """Why an attempt failed, as the restart rules tell failures apart."""

    ENVIRONMENT = "environment"  # counted against restart.max
    USER = "user"  # restarted only when unconditional, at most 3 in a row; counted
    HANG = "hang"  # restarted on hang, at most 3 in a row; not counted
    DISK_FULL = "disk_full"  # no restart on the same storage can write there: given up, saying what to free


class Ending(StrEnum):
    """How one node's workers ended in a round (``attempt_exit``'s ``cause``)."""

    SUCCESS = "success"
    STOPPED = "stopped"  # the agent was told to stop
    PEER = "peer"  # ended because another node's workers failed first
    ENVIRONMENT = Cause.ENVIRONMENT.value
    USER = Cause.USER.value
    HANG = Cause.HANG.value
    DISK_FULL = Cause.DISK_FULL.value
    STRAGGLER = "straggler"  # stopped at a checkpoint to move the job off a straggler's node


class Action(StrEnum):
    """What a round's verdict does next, in the platform's recovery words (``decision``'s ``action``)."""

    SUCCESS = "success"
    STOP = "stop"
    PROC_RESTART = "proc_restart"  # in place, on this node
    POD_RESCHEDULE = "pod_reschedule"  # exit 138: the platform restarts the pod elsewhere
    JOB_RESCHEDULE = "job_reschedule"  # exit 138: the platform restarts the whole job
    GIVE_UP = "give_up"

    @property
    def runs_again(self) -> bool:
        """The job runs again, here or elsewhere."""
        return self in (Action.PROC_RESTART, Action.POD_RESCHEDULE, Action.JOB_RESCHEDULE)

    @property
    def ends_job(self) -> bool:
        """The job is over: its state is closed, and a later agent on the same path starts from zero.
        A reschedule is not: the platform starts the same job again, with its counters."""
        return self in (Action.SUCCESS, Action.GIVE_UP)


class StragglerAction(StrEnum):
    """What is done about a straggler, as :func:`hacfg.plan.model.straggler_price` chose it
    (``straggler``'s ``action``)."""

    KEEP = "keep"  # the slowdown costs less than a restart
    WARN = "warn"  # not clearly worth a restart, or it cannot be priced: a person decides
    RESTART_ELSEWHERE = "restart_elsewhere"  # at the next checkpoint: exit 138, naming the node


class Start(StrEnum):
    """How an attempt's process started (``attempt_start``'s ``start``, its ``start_reason`` says why)."""

    WARM = "warm"  # forked from a warm interpreter that had imported the script's packages
    COLD = "cold"  # a new process, as without warm restarts


class Event(StrEnum):
    """The kinds of record in the events log (each record's ``event``)."""

    AGENT_START = "agent_start"
    STATE_RECOVERED = "state_recovered"
    STATE_LEFT = "state_left"  # a state found was closed, or another job's: not taken over
    PRECHECK = "precheck"
    ATTEMPT_START = "attempt_start"
    FIRST_ACTIVITY = "first_activity"
    FIRST_STEP = "first_step"  # the command's heartbeat reported its first step: set up, loaded, trained
    CHECKPOINT_DOUBT = "checkpoint_doubt"  # the resume checkpoint was chosen despite a doubt (a dangling pointer, say)
    CHECKPOINT_OVERDUE = "checkpoint_overdue"  # no new complete checkpoint for 2 x checkpoint.interval of training
    CHECKPOINT_WRITTEN = "checkpoint_written"  # the agent wrote a step of its memory tier to disk, or could not
    SIGNAL = "signal"
    HANG = "hang"
    ATTEMPT_EXIT = "attempt_exit"
    DECISION = "decision"
    PLUGIN_FAILURE = "plugin_failure"
    AGENT_EXIT = "agent_exit"
    GROUP_REJECTED = "group_rejected"  # a value from the group's store failed its check: never acted on
    LEFTOVERS_ENDED = "leftovers_ended"  # processes an earlier agent on the state folder left, ended at the start
    METRICS_UNAVAILABLE = "metrics_unavailable"  # --metrics-port could not be served: the training goes on
    STATE_UNWRITABLE = "state_unwritable"  # a file of the state folder could not be written (a full disk, say)
    STRAGGLER = "straggler"  # a rank computes persistently slower than the group: named, with the action priced
    CARD_EXIT = "card_exit"  # per-card launch: another card of the node failed (its agent's report, judged)
