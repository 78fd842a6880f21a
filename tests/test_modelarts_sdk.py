"""hacfg against Huawei Cloud's own ModelArts SDK (``huaweicloudsdkmodelarts``), the ground truth of the
request and response bodies: the committed schema is generated from it, bodies it makes lint and
round-trip, bodies hacfg makes deserialise into its ``Job``, and its real client carries them."""

from __future__ import annotations

import importlib.util
import json

import pytest

from conftest import REPO

pytest.importorskip("huaweicloudsdkmodelarts", reason="the ModelArts SDK is a test extra: pip install -e '.[test]'")

SCHEMA = REPO / "schemas" / "modelarts-training-job.schema.json"


def generator():
    spec = importlib.util.spec_from_file_location("modelarts_schema", REPO / "scripts" / "modelarts_schema.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_schema_is_what_the_sdk_generates():
    made = generator()
    assert SCHEMA.read_text(encoding="utf-8") == made.render(made.generate()), (
        "schemas/modelarts-training-job.schema.json is stale: run python scripts/modelarts_schema.py"
    )


def test_the_schema_states_what_the_sdk_docstrings_state():
    schema = json.loads(SCHEMA.read_text())
    defs = schema["$defs"]
    assert defs["SchedulePolicy"]["properties"]["priority"]["minimum"] == 0
    assert defs["SchedulePolicy"]["properties"]["priority"]["maximum"] == 3
    assert "JobHanged" in defs["Notification"]["properties"]["events"]["items"]["enum"]
    assert defs["Nfs"]["properties"]["read_only"]["type"] == ["boolean", "null"]
    assert defs["Spec"]["additionalProperties"] is False
    assert ["metadata", "id"] in schema["x-read-only"] and ["status"] in schema["x-read-only"]
