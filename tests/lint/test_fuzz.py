"""Property: no input, however broken, makes `hacfg lint` or the loader do anything but exit 0, 1 or 2."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kit.cli import run_hacfg, run_in_process
from kit.paths import REPO

from hacfg.cli.main import main
from hacfg.scenario.source import InputError, parse

pytestmark = pytest.mark.slow  # thousands of generated inputs

FRAGMENTS = [
    line
    for path in [*sorted((REPO / "presets").glob("*.yaml")), *sorted((REPO / "tests" / "data" / "rules").rglob("*.yaml"))]
    for line in path.read_text().splitlines()
] + ["<<: *a", "&a", "*a", "!!python/object:os.system", "? complex", "- - -", "{", "}", "[", "]", '"', "'", "\t", "---", "...", "%YAML 1.1", "key: |", "  |-", "~", "0x1F", "1e400", ".nan"]
yaml_lines = st.lists(
    st.tuples(st.integers(0, 6), st.sampled_from(FRAGMENTS)).map(lambda pair: " " * pair[0] + pair[1].strip()), max_size=30
).map("\n".join)


def lint_exit_code(tmp_dir, name: str, content: bytes) -> int:
    path = tmp_dir / name
    path.write_bytes(content)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["lint", "-f", "json", str(path)])
    assert "Traceback" not in err.getvalue()
    return code


def check(tmp_path_factory, examples, strategy, name, encode):
    folder = tmp_path_factory.mktemp("fuzz")

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(strategy)
    def property_(value):
        assert lint_exit_code(folder, name, encode(value)) in (0, 1, 2)
        try:
            parse(encode(value).decode("utf-8", errors="replace"), name)
        except InputError as err:
            assert str(err).count("\n") == 0

    with contextlib.chdir(folder):  # settings are looked for from here, as from a user's project
        property_()


def test_arbitrary_text(tmp_path_factory, examples):
    check(tmp_path_factory, examples, st.text(max_size=400), "ha.yaml", lambda text: text.encode("utf-8", errors="surrogatepass"))


def test_arbitrary_yaml_from_real_fragments(tmp_path_factory, examples):
    check(tmp_path_factory, examples, yaml_lines, "ha.yaml", str.encode)


def test_arbitrary_json_bodies(tmp_path_factory, examples):
    json_like = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda children: st.lists(children, max_size=4) | st.dictionaries(st.sampled_from(["kind", "metadata", "annotations", "fault-tolerance/job-retry-num", "name", "algorithm", "environments", "spec", "resource", "node_count"]) | st.text(max_size=8), children, max_size=4),
        max_leaves=20,
    )
    import json

    check(tmp_path_factory, examples, json_like, "job.json", lambda value: json.dumps(value).encode())


def test_arbitrary_bytes(tmp_path_factory, examples):
    check(tmp_path_factory, examples, st.binary(max_size=400), "ha.yaml", lambda data: data)


# Numbers, nesting and encodings through every command that reads a file: lint, build, fix and
# import. Each example writes one file and runs the four in this process, as a user would.

decimal = st.integers(1, 5000).flatmap(
    lambda digits: st.sampled_from(["", "-", "+", "0", "00"]).map(lambda sign: sign + "7" * digits)
)
boundary = st.integers(4295, 4305).map(lambda digits: "9" * digits)  # Python's int/str limit is 4300
radix = st.tuples(st.sampled_from(["0x", "0o", "0X", "0b", "0x_"]), st.integers(0, 4500)).map(lambda p: p[0] + "7" * p[1])
floating = st.sampled_from(["1e400", "-1e400", "1e-400", ".inf", "-.inf", ".nan", "1_000", "0.", ".5", "1e", "9" * 400 + ".5"])
literal = st.one_of(
    decimal, boundary, radix, floating,
    st.tuples(st.sampled_from(["!!int ", "!!float ", "!!str ", "!!bool "]), decimal | radix).map("".join),
    (decimal | radix).map(lambda text: f'"{text}"'),  # a count written as a string, as annotations are
    st.tuples(decimal, st.sampled_from("smhd")).map("".join),  # a duration
)


def nested(value: str, depth: int, style: str) -> str:
    """``value`` inside ``depth`` levels of flow lists, flow maps or block maps (a YAML value)."""
    if style == "list":
        return "[" * depth + value + "]" * depth
    if style == "map":
        return "{k: " * depth + value + "}" * depth
    return "".join(f"\n{'  ' * (level + 2)}k:" for level in range(depth)) + " " + value


def json_value(literal: str) -> str:
    """The literal as a JSON number where it is one, else as a JSON string."""
    return literal if re.fullmatch(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?", literal) else json.dumps(literal)


SCENARIO = "version: 1\nscenario: single-node\nrestart:\n  max: {a}\nhang:\n  timeout: {b}\njob:\n  nodes: {a}\n  environment:\n    X: {c}\n"
BODY = (
    'kind: job\nmetadata:\n  name: demo\n  annotations:\n    fault-tolerance/job-retry-num: {a}\n'
    "    fault-tolerance/hang-retry: {b}\nspec:\n  resource:\n    node_count: {a}\nalgorithm:\n  environments:\n"
    "    MA_HANG_DETECT_TIME: {b}\n  extra: {c}\n"
)
JSON_BODY = '{{"kind": "job", "metadata": {{"name": "demo", "annotations": {{"fault-tolerance/job-retry-num": {a}}}}},' \
    ' "spec": {{"resource": {{"node_count": {a}}}}}, "algorithm": {{"environments": {{"X": {b}}}}}, "x": {c}}}'
depths = st.sampled_from([0, 1, 2, 50, 197, 198, 199, 200, 201, 250])


@st.composite
def documents(draw) -> tuple[str, str]:
    """A file name and its text: a scenario or a body, YAML or JSON, with hostile numbers at any depth."""
    a, b, value = draw(literal), draw(literal), draw(literal)
    depth = draw(depths)
    kind = draw(st.sampled_from(["scenario", "body", "json"]))
    if kind == "json":
        c = "[" * depth + json_value(value) + "]" * depth
        return "job.json", JSON_BODY.format(a=json_value(a), b=json_value(b), c=c)
    c = nested(value, depth, draw(st.sampled_from(["list", "map", "block"])))
    return "ha.yaml", (SCENARIO if kind == "scenario" else BODY).format(a=a, b=b, c=c)


def encoded(draw_text: str, how: str) -> bytes:
    """The text's bytes as a file on disk may hold them: BOMs, UTF-16, other line breaks, stray bytes."""
    if how == "utf-16":
        return draw_text.encode("utf-16")
    if how == "bom":
        return draw_text.encode("utf-8-sig")
    if how in ("\r\n", "\r", "\x85", "\u2028"):
        return draw_text.replace("\n", how).encode()
    if how == "invalid byte":
        return draw_text.encode().replace(b"demo", b"d\xe9mo").replace(b"scenario:", b"scenario:\xff", 1)
    if how == "NUL":
        return draw_text.encode().replace(b"\n", b"\n\0", 1)
    return draw_text.encode()


ENCODINGS = ["utf-8", "utf-8", "utf-8", "utf-16", "bom", "\r\n", "\r", "\x85", "\u2028", "invalid byte", "NUL"]


def never_internal(folder, commands: tuple[str, ...], examples: int) -> None:
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(documents(), st.sampled_from(ENCODINGS))
    def property_(document, how):
        name, text = document
        path = folder / name
        path.write_bytes(encoded(text, how))
        for command in commands:
            code, err = run_in_process(command, str(path))
            assert code in (0, 1, 2) and "Traceback" not in err and "internal error" not in err, (command, err[-500:])

    with contextlib.chdir(folder):
        property_()


@pytest.mark.slow
def test_lint_and_build_of_hostile_numbers_never_reach_an_internal_error(tmp_path_factory, examples):
    never_internal(tmp_path_factory.mktemp("numbers"), ("lint", "build"), examples)


@pytest.mark.slow
def test_fix_and_import_of_hostile_numbers_never_reach_an_internal_error(tmp_path_factory, examples):
    """A quarter as many: these two go through typer, which builds its commands anew on every call."""
    never_internal(tmp_path_factory.mktemp("numbers"), ("fix", "import"), examples // 4)


@pytest.mark.slow
def test_hostile_numbers_in_a_real_process(tmp_path):
    """A sample as the console script runs it: the same answers from a fresh interpreter."""
    samples = [
        ("ha.yaml", SCENARIO.format(a="9" * 4301, b="7" * 90 + "d", c=nested("!!float " + "7" * 400, 200, "block"))),
        ("job.json", JSON_BODY.format(a="7" * 5000, b='"7"', c="[" * 199 + "1" + "]" * 199)),
        ("ha.yaml", BODY.format(a="0x" + "7" * 4000, b='"' + "9" * 20 + '"', c="0o" + "7" * 5000)),
    ]
    for index, (name, text) in enumerate(samples):
        path = tmp_path / str(index) / name
        path.parent.mkdir()
        path.write_text(text)
        for command in ("lint", "build", "fix", "import"):
            result = run_hacfg(command, path)
            assert result.code in (0, 1, 2) and "Traceback" not in result.err, (command, path, result.err[-500:])
            assert "internal error" not in result.err
