"""Every command agrees with every other, on generated scenario files and request bodies.

The strategies are built from the scenario schema (schemas/hacfg.schema.json) and the platform's
annotation catalogue (hacfg.scenario.modelarts), near-misses included: values one step outside a
range, switches spelled "True" or written unquoted, numbers where strings belong, misspelled keys.
Each property runs the real CLI in this process on real files, 300 examples each; ``--many-examples``
(or HYPOTHESIS_PROFILE=slow) runs thousands.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kit.paths import REPO

from hacfg.cli.main import main
from hacfg.scenario import modelarts as ma

SCHEMA = json.loads((REPO / "schemas" / "hacfg.schema.json").read_text())
DEFS = SCHEMA["$defs"]
pytestmark = pytest.mark.slow  # hundreds of real lint, build, import and fix runs per property


@dataclass
class Result:
    code: int
    out: str
    err: str


def hacfg(*args: str | Path, cwd: Path | None = None) -> Result:
    """``hacfg ARGS`` in this process, as the console script runs it."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), contextlib.chdir(cwd or Path.cwd()):
        code = main([str(a) for a in args])
    assert "Traceback" not in err.getvalue(), err.getvalue()
    assert code in (0, 1, 2), err.getvalue()
    return Result(code, out.getvalue(), err.getvalue())


def findings_of(*args: str | Path, cwd: Path | None = None) -> list[dict]:
    """The findings of ``hacfg lint -f json ARGS`` in ``cwd``, without the ``cli`` fixture hypothesis cannot share."""
    result = hacfg("lint", "-f", "json", *args, cwd=cwd)
    return json.loads(result.out)["findings"]


def errors(found: list[dict]) -> list[dict]:
    return [f for f in found if f["severity"] == "error"]


def described(found: list[dict]) -> set[tuple]:
    return {(f["rule"], f["line"], f["column"], f["message"]) for f in found}


# --- scenario files, from the schema ------------------------------------------------------------


def near_misses(word: str) -> list[str]:
    return [word.upper(), word.replace("-", "_"), word[:-1]]


def from_schema(spec: dict) -> st.SearchStrategy:
    """Values a property of the schema allows, and a few it does not."""
    if "$ref" in spec:
        return section(DEFS[spec["$ref"].rsplit("/", 1)[1]])
    if "anyOf" in spec:
        return st.one_of([from_schema(option) for option in spec["anyOf"]])
    if "enum" in spec:
        return st.sampled_from(spec["enum"]) | st.sampled_from([m for w in spec["enum"] for m in near_misses(w)])
    if "const" in spec:
        return st.just(spec["const"])
    kind = spec.get("type")
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans() | st.sampled_from(["yes", "True"])
    if kind == "integer":
        low, high = spec.get("minimum", 0), spec.get("maximum", 16)
        return st.integers(low, min(high, low + 16)) | st.sampled_from([low - 1, high, high + 1])
    if kind == "number":
        low, high = spec.get("minimum", 0), spec.get("maximum", 1)
        return st.sampled_from([low, (low + high) / 2, high, high + 0.5, low - 0.5])
    if kind == "string" and "pattern" in spec and "d)?" in spec["pattern"]:  # a duration
        return st.sampled_from(["90s", "1m", "5m", "20m", "30m", "31m", "1h", "2h30m", "1d", "30", "5 min"])
    if kind == "string" and "pattern" in spec:  # the job name
        return st.sampled_from(["train", "a" * 64, "a" * 65, "my job", "llm_7b-run"])
    if kind == "string":
        return st.sampled_from(["org/train:1.0", "bash run.sh", "modelarts.pool.visual.8xlarge", "pool-1", ""])
    if kind == "object":
        names = st.sampled_from(["NCCL_DEBUG", "DATA", ma.HANG_DETECT_TIME, ma.PRECHECK_SWITCH, "1BAD", "A-B"])
        values = st.sampled_from(["INFO", "1", "0", "20", "$HOME/x"])
        return st.dictionaries(names, values, max_size=3)
    raise AssertionError(f"no strategy for {spec}")


def section(spec: dict) -> st.SearchStrategy:
    """A mapping with any subset of the properties, each from the schema."""
    properties = {key: value for key, value in spec["properties"].items() if key != "passthrough"}
    return st.fixed_dictionaries({}, optional={key: from_schema(value) for key, value in properties.items()})


ANNOTATION_VALUES = st.sampled_from(["true", "false", "True", "yes", "1", "0", "2", "3", "5", "200", "ten", ""]) | (
    st.sampled_from([3, True, 0])
)
annotations = st.dictionaries(
    st.sampled_from([*ma.FAULT_TOLERANCE_KEYS, "fault-tolerance/job-retry-nums", "tensorboard/enable"]),
    ANNOTATION_VALUES,
    max_size=4,
)
environments = st.dictionaries(
    st.sampled_from([ma.HANG_DETECT_TIME, ma.PRECHECK_SWITCH, "NCCL_DEBUG", "DATA"]),
    st.sampled_from(["0", "1", "20", "30", "x", "$HOME"]),
    max_size=3,
)
RUNNABLE = {"algorithm": {"id": "algo-1"}, "spec": {"resource": {"pool_id": "pool-1"}}}


@st.composite
def passthroughs(draw) -> dict:
    tree: dict = {}
    if draw(st.booleans()):
        tree = json.loads(json.dumps(RUNNABLE))
    found = draw(annotations)
    if found:
        tree.setdefault("metadata", {})["annotations"] = found
    found = draw(environments)
    if found:
        tree.setdefault("algorithm", {})["environments"] = found
    return tree


@st.composite
def scenarios(draw) -> dict:
    tree = {"version": 1, "scenario": draw(st.sampled_from(SCHEMA["properties"]["scenario"]["enum"]))}
    tree.update(draw(section(SCHEMA)))
    tree["version"] = 1
    if draw(st.booleans()):  # what a careful user writes, so that many files lint clean
        tree["checkpoint"] = {"path": "obs://bucket/ckpt", "interval": draw(st.sampled_from(["10m", "30m", "1h"])), "resume": True}
        tree.pop("extends", None)
    if draw(st.booleans()):
        tree["passthrough"] = draw(passthroughs())
    return tree


# --- request bodies, from the annotation catalogue ----------------------------------------------


@st.composite
def bodies(draw) -> dict:
    """A ModelArts create-training-job body, whole or a snippet of metadata."""
    body: dict = {"metadata": {"annotations": draw(annotations)}}
    if not draw(st.booleans()):  # the docs' snippet: metadata with a fault-tolerance annotation
        body["metadata"]["annotations"][draw(st.sampled_from(ma.FAULT_TOLERANCE_KEYS))] = draw(ANNOTATION_VALUES)
    else:  # a whole body
        body = {"kind": "job", **body}
        body["metadata"]["name"] = draw(st.sampled_from(["train", "my job", "a" * 65]))
        algorithm: dict = draw(st.sampled_from([{"id": "algo-1"}, {"engine": {"image_url": "org/x:1"}, "command": "sh r"}]))
        found = draw(environments)
        if found:
            algorithm["environments"] = found
        body["algorithm"] = algorithm
        body["spec"] = {"resource": {"flavor_id": "modelarts.pool.visual.xlarge", "node_count": draw(st.integers(1, 4))}}
    return body


def yaml_text(value: object) -> str:
    import yaml

    return yaml.safe_dump(value, sort_keys=False, width=4096)


FORMATS = st.sampled_from(["json", "yaml"])


def written(folder: Path, name: str, value: object, fmt: str) -> Path:
    path = folder / f"{name}.{fmt}"
    path.write_text(json.dumps(value, indent=2) if fmt == "json" else yaml_text(value))
    return path


def has_fault_tolerance(value: object) -> bool:
    annotations = value.get("metadata", {}).get("annotations", {}) if isinstance(value, dict) else {}
    return any(str(key).startswith(ma.FAULT_TOLERANCE_PREFIX) for key in annotations)


PROPERTY = settings(deadline=None, suppress_health_check=list(HealthCheck), database=None, report_multiple_bugs=False)


@pytest.fixture
def folder(tmp_path_factory):
    """A project folder of its own (settings from an outer pyproject never apply)."""
    path = tmp_path_factory.mktemp("invariant")
    (path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    return path


def fresh(folder: Path) -> Path:
    """An empty folder under ``folder`` for one example."""
    work = folder / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    return work


# --- 4: however a file reaches hacfg lint, it gets the same findings ----------------------------


def test_named_walked_and_pre_commit_files_get_the_same_findings(folder):
    @PROPERTY
    @given(st.one_of(bodies(), scenarios()), FORMATS, st.integers(1, 3))
    def property_(value, fmt, documents):
        work = fresh(folder)
        if fmt == "yaml" and documents > 1:  # one document of several
            path = work / "jobs.yaml"
            path.write_text("---\n".join([yaml_text({"kind": "job", "metadata": {"name": "other"}})] * (documents - 1)) + "---\n" + yaml_text(value))
        else:
            path = written(work, "job", value, fmt)
        named = findings_of(path.name, cwd=work)
        assert described(findings_of(".", cwd=work)) == described(named)
        assert described(findings_of("--force-exclude", path.name, cwd=work)) == described(named)
        if has_fault_tolerance(value):
            assert json.loads(hacfg("lint", "-f", "json", path.name, cwd=work).out)["summary"]["files"] == 1

    property_()


# --- 5: hacfg fix leaves nothing to fix, and a second fix changes nothing -----------------------


def test_fix_leaves_nothing_fixable_and_is_idempotent(folder):
    @PROPERTY
    @given(st.one_of(bodies(), scenarios()), FORMATS)
    def property_(value, fmt):
        work = fresh(folder)
        path = written(work, "job", value, fmt)
        hacfg("fix", path.name, cwd=work)
        once = path.read_bytes()
        assert not [f for f in findings_of(path.name, cwd=work) if f["fixable"]]
        hacfg("fix", path.name, cwd=work)
        assert path.read_bytes() == once

    property_()


# --- 1: hacfg never emits what it rejects -------------------------------------------------------


def built_lints_clean(work: Path, target: str, *args: str) -> Result:
    result = hacfg("build", "--target", target, "ha.yaml", *args, cwd=work)
    if result.code == 0:
        out = work / ("built.json" if target == "modelarts" else "built.yaml")
        out.write_text(result.out)
        assert errors(findings_of(out.name, cwd=work)) == [], result.out
    return result


def test_a_scenario_that_lints_clean_builds_and_its_build_lints_clean(folder):
    @PROPERTY
    @given(scenarios())
    def property_(value):
        work = fresh(folder)
        (work / "ha.yaml").write_text(yaml_text(value))
        if errors(findings_of("ha.yaml", cwd=work)):
            event("the scenario has a lint error")
            return
        event("the scenario lints clean")
        whole = built_lints_clean(work, "modelarts")
        assert whole.code == 0 or "job is incomplete" in whole.err, whole.err
        assert built_lints_clean(work, "modelarts", "--only", "annotations").code == 0
        volcano = built_lints_clean(work, "volcano")
        # or a job name ModelArts takes and Kubernetes does not, refused at job.name
        refused = "job is incomplete" in volcano.err or (": job.name " in volcano.err and "a Kubernetes name" in volcano.err)
        assert volcano.code == 0 or refused, volcano.err

    property_()


# --- 2: import hides no finding, builds back what it read, and its comments are true ------------


OWNED_SOURCES = {
    "max": ("metadata", "annotations", ma.JOB_RETRY_NUM),
    "unconditional": ("metadata", "annotations", ma.UNCONDITIONAL_RETRY),
    "on_hang": ("metadata", "annotations", ma.HANG_RETRY),
    "pod_reschedules": ("metadata", "annotations", ma.POD_RETRY_NUM),
    "operator_retry": ("metadata", "annotations", ma.HCCL_OP_RETRY),
    "nodes": ("spec", "resource", "node_count"),
}
COMMENTED = re.compile(r"^\s*(?P<key>[\w-]+): (?P<value>.*?)\s+# (?P<comment>.*)$")


def dotted_path(text: str) -> tuple:
    return tuple(part.strip('"') for part in re.findall(r'"[^"]*"|[^."]+', text))


def lookup(tree, path):
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            return None
        tree = tree[key]
    return tree


def check_comments(text: str, body: dict) -> None:
    """Each comment on an imported value says truly where it came from, or that the request did not say."""
    import yaml

    for line in text.splitlines():
        match = COMMENTED.match(line)
        if not match or line.startswith("#"):
            continue
        key, value, comment = match["key"], yaml.safe_load(match["value"]), match["comment"]
        if comment == "not set in the request":
            assert lookup(body, OWNED_SOURCES[key]) is None, line
        elif comment.startswith("from "):  # "from metadata.annotations.KEY", then maybe "(written as 3)"
            written = lookup(body, dotted_path(comment.removeprefix("from ").partition(" (")[0]))
            assert written is not None, line
            if key == "accelerator":  # from the flavor, or from operator retry, which only Ascend runs
                assert value in (ma.accelerator_of(str(written)), "npu" if written in ("true", True) else None), line
                continue
            spellings = (value, ma.annotation_string(value), f"{written}m" == value and written)
            assert written in spellings or (key == "precheck" and (written, value) == ("0", False)), line
        else:
            source, _, shown = comment.partition(" is ")
            assert shown.endswith(": kept in passthrough"), line
            assert json.dumps(lookup(body, dotted_path(source))).startswith(shown.removesuffix(": kept in passthrough").removesuffix("...")), line


def test_import_keeps_every_finding_builds_back_the_body_and_comments_truly(folder):
    @PROPERTY
    @given(bodies(), FORMATS)
    def property_(body, fmt):
        work = fresh(folder)
        path = written(work, "job", body, fmt)
        found = findings_of(path.name, cwd=work)
        result = hacfg("import", path.name, "-o", "ha.yaml", cwd=work)
        assert result.code == 0, result.err
        lost = {f["rule"] for f in found} - {f["rule"] for f in findings_of("ha.yaml", cwd=work)}
        # an unquoted annotation is imported as the string the platform reads (and build can send), with a note
        assert lost - {"HA007"} == set(), lost
        check_comments((work / "ha.yaml").read_text(), body)
        if errors(found):
            return  # the API would refuse it: nothing to build back
        whole = "kind" in body
        rebuilt = hacfg("build", "ha.yaml", *(() if whole else ("--only", "annotations")), cwd=work)
        assert rebuilt.code == 0, rebuilt.err
        document = json.loads(rebuilt.out)
        assert document["metadata"]["annotations"] == {
            key: value if isinstance(value, str) else ma.annotation_string(value)
            for key, value in body["metadata"]["annotations"].items()
        }
        if whole:
            assert document["algorithm"].get("environments", {}) == body["algorithm"].get("environments", {})

    property_()


# --- 3: --into changes nothing of the body outside what hacfg owns, or says so ------------------


def owned(path: tuple) -> bool:
    if len(path) != 3:
        return False
    if path[:2] == ("metadata", "annotations"):
        return str(path[2]).startswith(ma.FAULT_TOLERANCE_PREFIX)
    return path[:2] == ("algorithm", "environments") and path[2] in ma.SETTABLE_PLATFORM_VARIABLES


def leaves(tree, path=()):
    if isinstance(tree, dict) and tree:
        for key, value in tree.items():
            yield from leaves(value, (*path, key))
    else:
        yield path, tree


def test_into_keeps_every_other_field_or_names_the_change(folder):
    @PROPERTY
    @given(bodies().filter(lambda body: "kind" in body), scenarios(), st.booleans())
    def property_(body, scenario, only):
        work = fresh(folder)
        written(work, "job", body, "json")
        (work / "ha.yaml").write_text(yaml_text(scenario))
        result = hacfg("build", "ha.yaml", "--into", "job.json", "-o", "out.json", *(("--only", "annotations") if only else ()), cwd=work)
        if result.code != 0:
            return  # refused: the body is left as it was
        out = json.loads((work / "out.json").read_text())
        for path, value in leaves(body):
            if path and not owned(path) and json.dumps(lookup(out, path)) != json.dumps(value):
                label = re.escape(".".join(str(part) for part in path))
                assert re.search(rf"--into changes {label}: ", result.err.replace('"', "")), (path, result.err)

    property_()
