"""The loader: plain data out, a span for every key and value, and one-line errors for bad input."""

from __future__ import annotations

import pytest

from hacfg.scenario.source import MAX_NODES, InputError, Span, decode, dotted, parse


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
