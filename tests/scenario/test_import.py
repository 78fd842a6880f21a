"""`hacfg import`: request bodies become scenario files, and build(import(body)) gives them back."""

from __future__ import annotations

import json
import re

import pytest
from kit.cli import findings
from kit.paths import REPO

from hacfg.lint.discover import kind_of
from hacfg.plugin.provided import presets
from hacfg.plugins.modelarts import ModelArts
from hacfg.scenario.config import validate, with_presets
from hacfg.scenario.importer import import_body
from hacfg.scenario.modelarts import annotation_string
from hacfg.scenario.source import InputError, load, parse


def _is_body(path) -> bool:
    try:
        document = load(path)
    except InputError:
        return False
    return kind_of(document) == "job" and document.data.get("kind", "job") == "job"  # not a Kubernetes manifest


# Every request body under tests/ (the hostile inputs are not bodies, and some do not parse).
FIXTURE_BODIES = sorted(
    path
    for path in (REPO / "tests").rglob("*")
    if path.suffix in (".yaml", ".yml", ".json") and "hostile" not in path.parts and _is_body(path)
)


def test_the_fixture_bodies_are_found():
    assert len(FIXTURE_BODIES) >= 15  # a glob that silently matched nothing would skip the round trip


def rebuilt(body_path, tmp_path):
    """build(import(body)) without the output schema check, so invalid bodies round-trip too."""
    text, _ = import_body(load(body_path))
    imported = tmp_path / "ha.yaml"
    imported.write_text(text)
    return ModelArts().build(validate(with_presets(parse(text, str(imported)), presets())).config).document


@pytest.mark.parametrize("preset", ["single-node", "multi-node", "llm-long-term"])
def test_presets_round_trip_whole_bodies(cli, tmp_path, preset):
    scenario = tmp_path / "scenario.yaml"
    job = "{image: org/train:1.0, command: bash run.sh, pool: pool-1}"
    scenario.write_text(f"version: 1\nscenario: {preset}\njob: {job}\n")
    body = tmp_path / "job.json"
    body.write_text(cli("build", scenario).out)
    imported = tmp_path / "ha.yaml"
    assert cli("import", body, "-o", imported).code == 0
    assert cli("build", imported).out == body.read_text()


@pytest.mark.parametrize("body", FIXTURE_BODIES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_bodies_keep_their_annotations_and_environment(tmp_path, body):
    """As the platform reads them: a number or boolean annotation as its string, a list of pairs as one mapping."""
    original = load(body).data
    document = rebuilt(body, tmp_path)
    annotations = {key: value if isinstance(value, str) else annotation_string(value)
                   for key, value in original["metadata"].get("annotations", {}).items()}
    environments = original.get("algorithm", {}).get("environments", {})
    if isinstance(environments, list):
        environments = {key: value for pair in environments for key, value in pair.items()}
    assert document["metadata"]["annotations"] == annotations
    assert document["algorithm"].get("environments", {}) == environments


def test_everything_else_survives_in_passthrough(cli, tmp_path):
    body = {
        "kind": "job",
        "metadata": {"name": "legacy-job", "description": "kept", "annotations": {
            "fault-tolerance/job-retry-num": "4", "fault-tolerance/hang-retry": "false", "jupyter-lab/enable": "true"}},
        "algorithm": {"code_dir": "obs://b/code/", "boot_file": "obs://b/code/train.py", "parameters": [{"name": "lr", "value": "0.1"}],
                      "environments": {"MA_HANG_DETECT_TIME": "30", "MA_DETECT_TRAIN_INJECT_CODE": "0", "A": "1"}},
        "spec": {"resource": {"flavor_id": "modelarts.pool.visual.xlarge", "node_count": 2, "pool_id": "pool-1"},
                 "log_export_path": {"obs_url": "/bucket/logs/"}, "volumes": [{"obs": {"obs_path": "obs://b/ckpt", "local_path": "/ckpt"}}]},
    }
    source = tmp_path / "job.json"
    source.write_text(json.dumps(body))
    imported = tmp_path / "ha.yaml"
    assert cli("import", source, "-o", imported).code == 0
    text = imported.read_text()
    assert re.search(r'\n  max: 4 +# from metadata\.annotations\."fault-tolerance/job-retry-num"\n', text)
    assert re.search(r"\nprecheck: false +# from algorithm\.environments\.MA_DETECT_TRAIN_INJECT_CODE\n", text)
    assert "# Request fields hacfg does not model, kept verbatim" in text
    assert json.loads(cli("build", imported).out) == body


def test_a_numeric_annotation_is_imported_as_the_string_the_platform_reads_and_builds(cli, tmp_path):
    """Table 4's long-term row writes "fault-tolerance/pod-retry-num": 3 unquoted: import models it, says it was
    a number, and build makes the string of it."""
    source = tmp_path / "job.json"
    source.write_text(json.dumps({
        "kind": "job", "metadata": {"name": "llm", "annotations": {
            "fault-tolerance/job-retry-num": "5", "fault-tolerance/job-unconditional-retry": "true",
            "fault-tolerance/hang-retry": "true", "fault-tolerance/pod-retry-num": 3, "jupyter-lab/enable": False}},
        "algorithm": {"engine": {"image_url": "org/train:1.0"}, "command": "bash run.sh"},
        "spec": {"resource": {"flavor_id": "modelarts.vm.gpu.t4u8", "node_count": 4}}}))
    imported = tmp_path / "ha.yaml"
    result = cli("import", source, "-o", imported)
    assert result.code == 0, result.err
    assert 'metadata.annotations."fault-tolerance/pod-retry-num": 3 is not a string; imported as "3"' in result.err
    assert re.search(r'\n  pod_reschedules: 3 +# from metadata\.annotations\."fault-tolerance/pod-retry-num" \(written as 3\)\n',
                     imported.read_text())
    built = cli("build", imported)
    assert built.code == 0, built.err
    annotations = json.loads(built.out)["metadata"]["annotations"]
    assert (annotations["fault-tolerance/pod-retry-num"], annotations["jupyter-lab/enable"]) == ("3", "false")


def test_a_value_that_is_no_scalar_stays_as_written_and_is_still_reported(cli, tmp_path):
    source = tmp_path / "job.json"
    source.write_text('{"kind": "job", "metadata": {"name": "n", "annotations": {"fault-tolerance/job-retry-num": [3]}}}')
    imported = tmp_path / "ha.yaml"
    result = cli("import", source, "-o", imported)
    assert 'metadata.annotations."fault-tolerance/job-retry-num": [3] is not a string; kept as written in passthrough' in result.err
    assert "HA007" in findings(cli, imported, keys="rule")


def test_not_a_request_body(cli, tmp_path):
    source = tmp_path / "ha.yaml"
    source.write_text("version: 1\nscenario: single-node\n")
    result = cli("import", source)
    assert (result.code, "not a ModelArts request body" in result.err) == (2, True)


@pytest.mark.parametrize("body", FIXTURE_BODIES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_import_hides_no_finding_of_the_body(cli, tmp_path, body):
    imported = tmp_path / "ha.yaml"
    assert cli("import", body, "-o", imported).code == 0
    # an unused suppression is about the file's comments, not the job; import writes an unquoted annotation (HA007)
    # and a list of environment pairs (HA103) as the platform reads them, and says so in a note
    comments = {"HA099", "HA007", "HA103"}
    assert findings(cli, body, keys="rule") - comments <= findings(cli, imported, keys="rule") - comments
