"""What a new user hit in one hour, with the platform's own snippets and files written by hand:
each test is their input as they wrote it."""

from __future__ import annotations

import json

import pytest

# The platform docs' snippet, saved as ft.json.
SNIPPET = '{"metadata": {"annotations": {"fault-tolerance/job-retry-num": "3", "fault-tolerance/pod-retry-num": 3}}}\n'


def rules_at(cli, *args) -> list[tuple[str, int, int]]:
    report = json.loads(cli("lint", "-f", "json", *args).out)
    return [(f["rule"], f["line"], f["column"]) for f in report["findings"]]


def test_the_platform_docs_snippet_is_linted_named_walked_and_under_pre_commit(cli, project):
    (project / "ft.json").write_text(SNIPPET)
    expected = [("HA007", 1, 102)]  # the numeric 3, which is what HA007 is for; nothing about a whole job
    assert rules_at(cli, "ft.json") == expected
    assert rules_at(cli) == expected
    assert rules_at(cli, "--force-exclude", "ft.json") == expected
    assert "skipped" not in cli("lint", "ft.json").err


def test_hacfg_fix_quotes_the_snippets_number(cli, project):
    (project / "ft.json").write_text(SNIPPET)
    cli("fix", "ft.json")
    assert (project / "ft.json").read_text() == SNIPPET.replace('"fault-tolerance/pod-retry-num": 3', '"fault-tolerance/pod-retry-num": "3"')


def test_a_passthrough_switch_is_judged_with_the_annotations_the_build_writes(cli, write):
    path = write("ha.yaml", """\
        version: 1
        scenario: single-node
        checkpoint: {path: obs://b/ckpt, interval: 1h, resume: true}
        restart: {max: 3}
        passthrough:
          metadata:
            annotations: {fault-tolerance/pod-retry-num: "2"}
        """)
    found = {rule for rule, _, _ in rules_at(cli, path)}
    assert "HA005" not in found  # the built body has job-retry-num "3"
    assert "HA020" in found  # the passthrough does override restart.pod_reschedules


def test_importing_the_readmes_hang_retry_true_body_draws_no_false_ha005(cli, tmp_path):
    body = tmp_path / "job.json"
    body.write_text(json.dumps({
        "kind": "job",
        "metadata": {"name": "x", "annotations": {"fault-tolerance/job-retry-num": "3", "fault-tolerance/hang-retry": "True"}},
        "algorithm": {"id": "a"},
        "spec": {"resource": {"pool_id": "p"}, "volumes": [{}]},
    }))
    imported = tmp_path / "ha.yaml"
    assert cli("import", body, "-o", imported).code == 0
    assert [rule for rule, _, _ in rules_at(cli, body)] == ["HA015"]
    # checkpoints are not in a body; HA020: the "True" kept in passthrough overrides on_hang's false
    assert {rule for rule, _, _ in rules_at(cli, imported)} - {"HA001", "HA017"} == {"HA015", "HA020"}
    assert 'on_hang: false                    # metadata.annotations."fault-tolerance/hang-retry" is "True": kept in passthrough' in imported.read_text()


@pytest.mark.parametrize(
    ("annotation", "line"),
    [
        ('"fault-tolerance/pod-retry-num": 3', "  pod_reschedules: 0                # metadata.annotations.\"fault-tolerance/pod-retry-num\" is 3: kept in passthrough"),
        ('"fault-tolerance/job-retry-num": "200"', "  max: 0                            # metadata.annotations.\"fault-tolerance/job-retry-num\" is \"200\": kept in passthrough"),
    ],
)
def test_import_comments_say_what_the_request_held(cli, tmp_path, annotation, line):
    body = tmp_path / "job.json"
    body.write_text('{"kind": "job", "metadata": {"name": "x", "annotations": {' + annotation + "}}}")
    assert line in cli("import", body).out.splitlines()


def test_hacfgs_own_volcano_output_lints_without_a_parse_error(cli, write, tmp_path):
    scenario = write("ha.yaml", "version: 1\nscenario: multi-node\njob: {image: org/train:1, command: sh run.sh}\n")
    job = tmp_path / "job.yaml"
    assert cli("build", "--target", "volcano", scenario, "-o", job).code == 0
    result = cli("lint", job)
    assert (result.code, result.out) == (0, "")
    assert f"{job}: not a scenario file or a ModelArts request body; skipped" in result.err


def test_a_file_of_several_bodies_is_linted_document_by_document(cli, project):
    (project / "jobs.yaml").write_text(
        "kind: job\nmetadata: {name: a, annotations: {fault-tolerance/job-retry-num: 3}}\n"
        "---\n"
        'kind: job\nmetadata: {name: b, annotations: {fault-tolerance/hang-retry: "True"}}\n'
    )
    named = rules_at(cli, "jobs.yaml")
    assert ("HA007", 2, 66) in named and ("HA015", 5, 63) in named
    assert rules_at(cli) == named
    cli("fix", "jobs.yaml")
    assert (project / "jobs.yaml").read_text().count('"') == 4  # both values quoted and spelled right


def test_restart_max_0_over_the_multi_node_preset_is_off_in_lint_and_build(cli, write, tmp_path):
    path = write("ha.yaml", "version: 1\nscenario: multi-node\nrestart: {max: 0}\n")
    assert "HA005" not in {rule for rule, _, _ in rules_at(cli, path)}
    result = cli("build", "--only", "annotations", path)
    assert json.loads(result.out) == {"metadata": {"annotations": {}}}  # no job-unconditional-retry, no hang-retry
    assert "restart.max 0 turns auto restart off" in result.err
    stated = write("own.yaml", "version: 1\nscenario: multi-node\nrestart: {max: 0, on_hang: true}\n")
    assert ("HA005", 3, 1) in [(rule, line, 1) for rule, line, _ in rules_at(cli, stated)]


def test_a_volcano_job_without_an_image_is_refused(cli, write):
    path = write("ha.yaml", "version: 1\nscenario: multi-node\njob: {command: sh run.sh}\n")
    result = cli("build", "--target", "volcano", path)
    assert (result.code, result.out) == (2, "")
    assert result.err == f"{path}:3:6: the volcano job is incomplete: no image: set job.image (an image with hacfg installed)\n"


def test_errors_point_at_the_users_file(cli, write):
    path = write("ha.yaml", "version: 1\nscenario: multi-node\n")
    result = cli("build", path)
    assert result.code == 2
    assert result.err.startswith(f"{path}:2:11: the modelarts job is incomplete: ")
    assert "site-packages" not in result.err and "presets" not in result.err


def test_a_mistyped_preset_name_gets_a_did_you_mean(cli):
    result = cli("build", "multinode")
    assert result.code == 2
    assert result.err == "multinode: no such file, nor a preset; did you mean 'multi-node'? (presets: llm-long-term, multi-node, single-node)\n"


def test_a_missing_boot_file_is_reported_at_the_code_dir_line(cli, write):
    path = write("ha.yaml", """\
        version: 1
        scenario: single-node
        job: {flavor: f, image: org/x:1, command: sh run.sh}
        passthrough:
          algorithm: {code_dir: /obs/code/}
        """)
    result = cli("build", path)
    assert (result.code, result.err) == (2, f"{path}:5:25: modelarts output algorithm: 'boot_file' is a dependency of 'code_dir'\n")


def test_one_error_is_one_error(cli, project):
    (project / "ft.json").write_text(SNIPPET)
    assert cli("lint", "ft.json").out.endswith("Found 1 finding in 1 file (1 error, 0 warnings, 0 info), 1 fixable with `hacfg fix`.\n")


def test_a_missing_job_name_reads_as_english(cli, tmp_path):
    body = tmp_path / "job.json"
    body.write_text('{"kind": "job", "metadata": {"annotations": {}}, "algorithm": {"id": "a"}}')
    out = cli("lint", body).out
    assert "metadata.name is missing: a job name must be 1-64 characters of A-Z a-z 0-9 _ -" in out
    assert "job name missing must be" not in out


@pytest.mark.parametrize("scenario", ["single-node", "multi-node", "llm-long-term"])
def test_uncommenting_inits_restart_block_changes_nothing(cli, tmp_path, scenario):
    """The commented block said "from the preset" but matched none of them, and drew HA009 once uncommented."""
    commented = tmp_path / "ha.yaml"
    cli("init", "--scenario", scenario, "-o", commented)
    lines = commented.read_text().splitlines()
    start = lines.index(next(line for line in lines if line.startswith("# restart:")))
    uncommented = tmp_path / "own.yaml"
    uncommented.write_text("\n".join([*lines[:start], *(line[2:] for line in lines[start : start + 5]), *lines[start + 5 :]]) + "\n")
    assert "restart:" in uncommented.read_text().splitlines()[start]
    assert cli("build", uncommented).out == cli("build", commented).out
    assert rules_at(cli, uncommented) == rules_at(cli, commented) == []


def test_only_annotations_keeps_a_hang_timeout_the_platform_does_not_default_to(cli, write):
    path = write("ha.yaml", "version: 1\nscenario: multi-node\nhang: {timeout: 20m}\nprecheck: false\n")
    part = json.loads(cli("build", "--only", "annotations", path).out)
    assert part["algorithm"] == {"environments": {"MA_HANG_DETECT_TIME": "20", "MA_DETECT_TRAIN_INJECT_CODE": "0"}}
    assert set(part) == {"metadata", "algorithm"}


def test_into_names_every_field_of_the_body_it_changes(cli, write, tmp_path):
    body = tmp_path / "job.json"
    body.write_text(json.dumps({
        "kind": "job",
        "metadata": {"name": "prod-run", "annotations": {"fault-tolerance/job-retry-num": "1", "team": "nlp"}},
        "algorithm": {"id": "algo-1", "environments": {"MA_HANG_DETECT_TIME": "45", "DATA": "/d"}},
        "spec": {"resource": {"flavor_id": "modelarts.pool.visual.xlarge", "node_count": 4}},
    }))
    path = write("ha.yaml", "version: 1\nscenario: multi-node\njob: {name: trial, flavor: modelarts.pool.visual.8xlarge, nodes: 2}\n")
    result = cli("build", path, "--into", body, "-o", tmp_path / "out.json")
    assert result.code == 0, result.err
    changes = [line for line in result.err.splitlines() if "--into changes" in line]
    assert changes == [
        'hacfg: note: --into changes metadata.name: "prod-run" -> "trial" (from job.name)',
        'hacfg: note: --into changes spec.resource.flavor_id: "modelarts.pool.visual.xlarge" -> "modelarts.pool.visual.8xlarge" (from job.flavor)',
        "hacfg: note: --into changes spec.resource.node_count: 4 -> 2 (from job.nodes)",
    ]  # the owned annotation and hang variable change by design; team and DATA are kept
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["metadata"]["annotations"]["team"] == "nlp" and out["algorithm"]["environments"]["DATA"] == "/d"
