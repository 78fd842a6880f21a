"""Schemas the tests validate against."""

from __future__ import annotations

import functools

from kit.paths import REPO


@functools.cache
def volcano_job_schema() -> dict:
    """The Job's schema in Volcano's CRD: read when a test asks, not while every worker collects."""
    import yaml

    crd = yaml.load((REPO / "tests/data/volcano-batch.volcano.sh_jobs.yaml").read_text(), Loader=yaml.CSafeLoader)
    return next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")["schema"]["openAPIV3Schema"]
