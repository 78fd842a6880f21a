"""Property: no input, however broken, makes `hacfg lint` or the loader do anything but exit 0, 1 or 2."""

from __future__ import annotations

import contextlib
import io

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO
from hacfg.cli.main import main
from hacfg.scenario.source import InputError, parse

FRAGMENTS = [
    line
    for path in [*sorted((REPO / "presets").glob("*.yaml")), *sorted((REPO / "tests" / "rules").rglob("*.yaml"))]
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
