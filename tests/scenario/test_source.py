"""The loader: plain data out, a span for every key and value, and one-line errors for bad input."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hacfg.scenario.source import MAX_NODES, InputError, Span, decode, dotted, parse, parse_all


def test_values_and_keys_keep_their_positions():
    doc = parse("version: 1\nrestart:\n  max: 3\n  on_hang: true\n", "ha.yaml")
    assert doc.data == {"version": 1, "restart": {"max": 3, "on_hang": True}}
    assert doc.values[("restart", "max")] == Span("ha.yaml", 3, 8, 3, 9)
    assert doc.keys[("restart", "on_hang")] == Span("ha.yaml", 4, 3, 4, 10)
    assert doc.span(("restart", "missing")) == doc.values[("restart",)]


def test_yaml_1_2_scalars_like_ruamel():
    doc = parse("a: on\nb: yes\nc: 0x1f\nd: 1.5\ne: ~\nf: '3'\ng: 010\n", "f.yaml")
    assert doc.data == {"a": "on", "b": "yes", "c": 31, "d": 1.5, "e": None, "f": "3", "g": 10}


def test_json_keeps_json_types_and_positions_despite_tabs():
    doc = parse('{\n\t"metadata": {"annotations": {"n": 3, "x": 1e5}}\n}\n', "job.json")
    assert doc.data == {"metadata": {"annotations": {"n": 3, "x": 100000.0}}}
    assert doc.values[("metadata", "annotations", "n")] == Span("job.json", 2, 36, 2, 37)


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("a: !!python/object:os.system ls\n", (1, 4), "YAML tag !!python/object:os.system is not allowed"),
        ("a: !custom x\n", (1, 4), "YAML tag !custom is not allowed"),
        ("a: 1\nb: 2\na: 3\n", (3, 1), "duplicate key 'a' (first defined at line 1)"),
        ("a: [1, 2\n", (2, 1), "did not find expected"),
        ("a: 1\n---\nb: 2\n", (2, 1), "expected a single document"),
        ("base: &b {x: 1}\nmore:\n  <<: *b\n", (3, 3), "merge keys"),
        ("a: &a [*a]\n", (1, 4), "recursive alias"),
        ("a: !!int nope\n", (1, 4), "'nope' is not a valid !!int"),
        ("? [a, b]\n: 1\n", (1, 3), "a mapping key must be a scalar"),
    ],
)
def test_bad_yaml_is_one_positioned_line(text, where, message):
    with pytest.raises(InputError) as caught:
        parse(text, "bad.yaml")
    error = caught.value
    assert (error.span.line, error.span.column) == where
    assert message in error.message
    assert str(error).startswith(f"bad.yaml:{where[0]}:{where[1]}: ")
    assert "\n" not in str(error)


def test_bad_json_points_at_the_json_error():
    with pytest.raises(InputError) as caught:
        parse('{"a": 1,\n "b": }\n', "job.json")
    assert str(caught.value).startswith("job.json:2:7: invalid JSON")


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ('{"a": 1,\n  "a": 2}', (2, 3), "duplicate key 'a' (first defined at line 1)"),
        ('{"a": NaN}', (1, 7), "invalid JSON: NaN is not a JSON value"),
        ('{"a": [1, -Infinity]}', (1, 11), "invalid JSON: -Infinity is not a JSON value"),
        ("[" * 300 + "]" * 300, (1, 202), "nesting deeper than 200 levels"),
        ('{"path": "\\ud800"}', (1, 10), "invalid JSON: \\ud800 is half of a surrogate pair, not a character"),
        ('{"a": 1, "\\udfffkey": 2}', (1, 10), "invalid JSON: \\udfff is half of a surrogate pair, not a character"),
    ],
)
def test_json_the_stdlib_lets_through_is_still_refused_at_its_place(text, where, message):
    with pytest.raises(InputError) as caught:
        parse(text, "job.json")
    assert (caught.value.span.line, caught.value.span.column) == where
    assert caught.value.message == message


def test_json_keys_of_any_length_are_read():
    """The platform allows environment names of 8192 characters; libyaml stops implicit keys at 1024."""
    name = "V" * 8193
    doc = parse(json.dumps({"algorithm": {"environments": {name: "x"}}}, indent=1), "job.json")
    assert doc.data["algorithm"]["environments"] == {name: "x"}
    assert doc.keys[("algorithm", "environments", name)] == Span("job.json", 4, 4, 4, 8199)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(json_values, st.sampled_from([None, 0, 2, "\t"]), st.booleans(), st.sampled_from(["\n", "\r\n"]))
def test_json_positions_are_where_libyaml_marks_them(value, indent, ascii_only, newline):
    """The JSON reader puts every key and value where libyaml, which read JSON before it, put them.

    (libyaml refused some valid JSON: a DEL character, an escaped character outside the BMP; those are compared
    with nothing.)"""
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only).replace("\n", newline)
    ours = parse(text, "job.json")
    assert ours.data == value
    try:
        theirs = parse(text.replace("\t", " "), "job.yaml")  # YAML indents with spaces; a tab is one column either way
    except InputError:
        return

    def named(spans):
        return {path: span._replace(file="job.json") for path, span in spans.items()}

    assert ours.values == named(theirs.values)
    assert ours.keys == named(theirs.keys)


def test_a_yaml_stream_is_read_document_by_document():
    first, second = parse_all("a: 1\n---\nb: [2]\n", "two.yaml")
    assert (first.data, second.data) == ({"a": 1}, {"b": [2]})
    assert second.values[("b", 0)] == Span("two.yaml", 3, 5, 3, 6)
    assert [doc.data for doc in parse_all("", "empty.yaml")] == [None]


@pytest.mark.slow
def test_alias_bomb_is_refused_without_expanding():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    with pytest.raises(InputError, match=f"more than {MAX_NODES} nodes"):
        parse("\n".join(lines) + "\n", "bomb.yaml")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"a: 1\nb: \xff\n", "bad.yaml:2:4: invalid UTF-8 byte 0xff"),
        (b"\xff\xfea\x00:\x00", "bad.yaml:1:1: file is UTF-16"),
        (b"a: 1\x00\n", "bad.yaml:1:5: NUL character"),
    ],
)
def test_undecodable_bytes_are_located(raw, message):
    with pytest.raises(InputError) as caught:
        decode(raw, "bad.yaml")
    assert str(caught.value).startswith(message)


def test_dotted_paths_quote_keys_that_need_it():
    assert dotted(("metadata", "annotations", "fault-tolerance/job-retry-num")) == 'metadata.annotations."fault-tolerance/job-retry-num"'
    assert dotted(("spec", "volumes", 0, "nfs")) == "spec.volumes[0].nfs"
