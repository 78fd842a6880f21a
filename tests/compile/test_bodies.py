"""Request bodies shaped like the API reference's examples (tests/data/bodies): found, linted, fixed, imported, built."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from kit.paths import REPO

from hacfg.scenario.source import load

BODIES = sorted(p for p in (REPO / "tests/data/bodies").iterdir() if p.suffix in (".json", ".yaml"))


def test_the_bodies_are_there():
    """Each body the folder's README lists, and none it does not."""
    listed = re.findall(r"^\| `([^`]+)` \|", (REPO / "tests/data/bodies/README.md").read_text(), re.MULTILINE)
    assert sorted(listed) == [body.name for body in BODIES]


def test_a_folder_of_them_is_found_and_read_as_bodies(cli, project):
    (project / "deploy").mkdir()
    for body in BODIES:
        shutil.copy(body, project / "deploy" / body.name)
    shutil.copy(REPO / "tests/data/bodies/README.md", project / "deploy/README.md")
    (project / "deploy/package.json").write_text('{"name": "deploy-scripts", "version": "1.0.0"}\n')
    report = json.loads(cli("lint", "-f", "json", "deploy").out)
    assert report["summary"]["files"] == len(BODIES)
    assert not [f for f in report["findings"] if f["rule"] in ("HA000", "HA100", "HA101", "HA102")]


@pytest.mark.parametrize("body", BODIES, ids=lambda p: p.name)
def test_import_then_build_gives_the_body_back(cli, tmp_path, body):
    scenario = tmp_path / "ha.yaml"
    imported = cli("import", body, "-o", scenario)
    assert imported.code == 0, imported.err
    built = cli("build", scenario)
    assert built.code == 0, built.err
    assert without_empty_maps(json.loads(built.out)) == without_empty_maps(load(body).data)


def without_empty_maps(tree):
    """The API reads an empty optional map ("environments": {}) as an absent one."""
    if isinstance(tree, dict):
        return {k: without_empty_maps(v) for k, v in tree.items() if v != {}}
    return [without_empty_maps(v) for v in tree] if isinstance(tree, list) else tree


@pytest.mark.parametrize("body", BODIES, ids=lambda p: p.name)
def test_build_into_them_keeps_every_field_it_does_not_own(cli, tmp_path, body):
    target = tmp_path / body.name
    shutil.copy(body, target)
    scenario = tmp_path / "ha.yaml"
    scenario.write_text("version: 1\nscenario: single-node\n")
    result = cli("build", scenario, "--into", target, "-o", tmp_path / "out.json")
    assert result.code == 0, result.err
    merged, original = json.loads((tmp_path / "out.json").read_text()), load(body).data
    assert merged["metadata"]["annotations"] == {"fault-tolerance/job-retry-num": "2"}  # hacfg owns these
    assert {k: v for k, v in merged.items() if k != "metadata"} == {k: v for k, v in original.items() if k != "metadata"}
    assert merged["metadata"]["name"] == original["metadata"]["name"]


def test_fix_keeps_the_reference_layout_byte_for_byte(cli, tmp_path):
    text = (REPO / "tests/data/bodies/algorithm-id.json").read_text()
    broken = text.replace('"description" : "ResNet-50 from a published algorithm"\n',
                          '"description" : "ResNet-50 from a published algorithm",\n    "annotations" : { "fault-tolerance/job-retry-num" : 3 }\n')
    body = tmp_path / "job.json"
    body.write_text(broken)
    assert cli("fix", body).code == 0
    assert body.read_text() == broken.replace('"fault-tolerance/job-retry-num" : 3', '"fault-tolerance/job-retry-num" : "3"')
