"""Which job this agent runs in, as the platform names it, so one job's restart counters never
become another's: the platform keeps one counter per job, not per storage path.

The first of these environment variables that is set names the job:

- ``HACFG_JOB_ID``: set it yourself anywhere. The Volcano target sets it from the pod's
  ``scheduling.k8s.io/group-name`` annotation, the job's PodGroup (``<job name>-<job uid>`` on
  current Volcano), which stays the same when Volcano restarts the job's pods or the whole job.
- ``MA_VJ_NAME``: ModelArts sets it in every container of a training job (``ma-job-<training
  job ID>``), the same on every node, and it stays when the platform restarts or re-issues the
  job, which keeps its ID.

With none set, the job has no name: a state left on the same path is taken over unless the job
that wrote it ended.
"""

from __future__ import annotations

from collections.abc import Mapping

JOB_VARIABLES = ("HACFG_JOB_ID", "MA_VJ_NAME")


def job_identity(env: Mapping[str, str]) -> str | None:
    """The job's name from the first of :data:`JOB_VARIABLES` that is set and not blank."""
    return next((env[name].strip() for name in JOB_VARIABLES if env.get(name, "").strip()), None)
