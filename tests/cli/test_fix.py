"""`hacfg fix` changes the fixed values and nothing else, byte for byte, whatever the file's encoding."""

from __future__ import annotations

import codecs
import contextlib
import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hacfg.cli.main import main

# A body with two fixable values: HA007 quotes the number, HA015 lower-cases "True".
JSON_LINES = [
    "{{",
    '{i}"kind": "job",',
    '{i}"metadata": {{',
    '{i}{i}"name": "demo",',
    '{i}{i}"description": {text},',
    '{i}{i}"annotations": {{"fault-tolerance/job-retry-num": @N@,',
    '{i}{i}{i}"fault-tolerance/hang-retry": @H@}}',
    "{i}}},",
    '{i}"algorithm": {{"outputs": [{{"name": {text}, "remote": {{"obs": {{"obs_url": "obs://b/ckpt/"}}}}}}]}},',
    '{i}"spec": {{"resource": {{"node_count": 1}}}}',
    "}}",
]
YAML_LINES = [
    "# {comment}",
    "kind: job",
    "metadata:",
    "  name: demo  # {comment}",
    "  description: {text}",
    "  annotations:",
    "    fault-tolerance/job-retry-num: @N@",
    "    fault-tolerance/hang-retry: @H@   # {comment}",
    "spec: {{resource: {{node_count: 1}}}}",
]
BEFORE = {"@N@": "3", "@H@": '"True"'}
AFTER = {"@N@": '"3"', "@H@": '"true"'}

# Astral characters, combining marks, right-to-left text, and (in JSON, where a raw one is legal) the
# line separators libyaml breaks lines at.
json_text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=12)
yaml_text = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=12)
layouts = st.fixed_dictionaries({"bom": st.booleans(), "newline": st.sampled_from(["\n", "\r\n", "\r"]), "comment": yaml_text | st.just("tab\there")})


def substitute(template: str, values: dict[str, str]) -> str:
    for token, value in values.items():
        template = template.replace(token, value)
    return template


def fix_in_place(path) -> None:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = main(["fix", str(path)])
    assert code == 0, err.getvalue()


def check(tmp_path_factory, examples, strategy, name):
    folder = tmp_path_factory.mktemp("fix")

    @settings(max_examples=max(50, examples // 10), deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(strategy)
    def property_(template_and_bom):
        template, bom = template_and_bom
        prefix = codecs.BOM_UTF8 if bom else b""
        path = folder / name
        path.write_bytes(prefix + substitute(template, BEFORE).encode())
        fix_in_place(path)
        assert path.read_bytes() == prefix + substitute(template, AFTER).encode()

    property_()


def json_body(layout: dict, text: str, indent: str, one_line: bool) -> tuple[str, bool]:
    lines = [line.format(i="" if one_line else indent, text=json.dumps(text, ensure_ascii=False)) for line in JSON_LINES]
    return ("" if one_line else layout["newline"]).join(lines) + ("" if one_line else layout["newline"]), layout["bom"]


def yaml_body(layout: dict, text: str) -> tuple[str, bool]:
    lines = [line.format(comment=layout["comment"], text=json.dumps(text, ensure_ascii=False)) for line in YAML_LINES]
    return layout["newline"].join(lines) + layout["newline"], layout["bom"]


@pytest.mark.slow
def test_json_bodies_keep_every_other_byte(tmp_path_factory, examples):
    strategy = st.builds(json_body, layouts, json_text, st.sampled_from(["  ", "    ", "\t", "\t\t"]), st.booleans())
    check(tmp_path_factory, examples, strategy, "job.json")


@pytest.mark.slow
def test_yaml_bodies_keep_every_other_byte(tmp_path_factory, examples):
    check(tmp_path_factory, examples, st.builds(yaml_body, layouts, yaml_text), "job.yaml")


def test_a_one_line_body_with_a_bom_and_crlf_neighbours(tmp_path):
    """The reported case: every edit used to land one character early."""
    body = tmp_path / "job.json"
    text = '{"kind": "job", "metadata": {"name": "d", "annotations": {"fault-tolerance/job-retry-num": @N@, "fault-tolerance/hang-retry": @H@}}}'
    body.write_bytes(codecs.BOM_UTF8 + substitute(text, BEFORE).encode())
    fix_in_place(body)
    assert body.read_bytes() == codecs.BOM_UTF8 + substitute(text, AFTER).encode()
    crlf = tmp_path / "crlf.yaml"
    crlf.write_bytes(substitute("\r\n".join(YAML_LINES).format(comment="ü", text='"x"') + "\r\n", BEFORE).encode())
    fix_in_place(crlf)
    assert b"\n" not in crlf.read_bytes().replace(b"\r\n", b"")


def test_an_unquoted_switch_is_fixed_to_the_platforms_spelling_in_one_go(tmp_path):
    """Quoting 0 as "0" left HA015 a second fix to make: fixing twice changed the file twice."""
    body = tmp_path / "ft.json"
    body.write_text('{"metadata": {"annotations": {"fault-tolerance/hccl_op_retry": 0, "fault-tolerance/hang-retry": 1}}}')
    fix_in_place(body)
    once = body.read_text()
    assert once == '{"metadata": {"annotations": {"fault-tolerance/hccl_op_retry": "false", "fault-tolerance/hang-retry": "true"}}}'
    fix_in_place(body)
    assert body.read_text() == once
