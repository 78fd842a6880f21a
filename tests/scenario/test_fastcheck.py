"""The pydantic-free fast path gives exactly pydantic's verdicts and values, or leaves the file to pydantic."""

from __future__ import annotations

import dataclasses
import enum
import glob
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kit.paths import REPO

from hacfg.plugin.provided import presets
from hacfg.scenario import fastcheck, validation
from hacfg.scenario._pruned_core_schema import SCHEMA
from hacfg.scenario.config import with_presets
from hacfg.scenario.model import HAConfig
from hacfg.scenario.source import load


def exactly(value: Any) -> Any:
    """``value`` with every type spelled out: ``1 == True`` and ``"1" == StrSubclass("1")`` must not pass."""
    if dataclasses.is_dataclass(value):
        return (type(value), tuple((f.name, exactly(getattr(value, f.name))) for f in dataclasses.fields(value)))
    if isinstance(value, dict):
        return (dict, tuple((exactly(k), exactly(v)) for k, v in value.items()))
    if isinstance(value, list):
        return (list, tuple(exactly(v) for v in value))
    return (type(value), value)


def verdicts(data: Any, platform: Any = "huaweicloud") -> tuple[Any, Any]:
    context = {"platform": platform}
    return fastcheck.validate(SCHEMA, data, context), validation.model_or_errors(data, context)


def test_the_compiled_schema_is_generated_from_the_model_as_it_is():
    assert validation.COMPILED.read_text() == validation.compiled_source(), "run: python -m hacfg.scenario.validation"


class Colour(enum.StrEnum):
    GPU = "gpu"


class Count(int):
    pass


# Values of every shape pydantic treats differently in strict and lax mode, or refuses.
ODD = st.sampled_from(
    [None, True, False, 0, 1, -1, 3, 129, 1.0, 2.5, 0.25, -0.0, float("inf"), "", "3", "true", "yes", "1h", "gpu", b"gpu", "a\n", Colour.GPU,
     Count(2), [], [1], {}, {"x": 1}, timedelta(minutes=5), float("nan")]
)
DURATIONS = st.sampled_from(["90s", "30m", "2h", "1d", "1h30m", " 5m ", "30", "m", "1.5h", "", timedelta(hours=1)])
NAMES = st.sampled_from(["demo", "job-7_x", "Bad Name", "a" * 64, "a" * 65, "x\n", "", "名前"])
ENVIRONMENTS = st.dictionaries(
    st.sampled_from(["A", "B", "NCCL_DEBUG", 1]), st.one_of(st.text(max_size=5), st.integers(-3, 99), ODD), max_size=3
)


PLAIN = st.fixed_dictionaries(
    {"version": st.just(1), "scenario": st.sampled_from(["single-node", "multi-node", "llm-long-term"])},
    optional={
        "platform": st.just("huaweicloud"),
        "job": st.fixed_dictionaries(
            {},
            optional={
                "name": st.from_regex(r"\A[a-z0-9_-]{1,64}\Z"),
                "nodes": st.integers(1, 64),
                "accelerator": st.sampled_from(["gpu", "npu", "cpu"]),
                "environment": st.dictionaries(st.text(max_size=5), st.one_of(st.text(max_size=5), st.integers())),
            },
        ),
        "checkpoint": st.fixed_dictionaries(
            {}, optional={"path": st.text(max_size=9), "interval": st.sampled_from(["30m", "1h", "1h30m"])}
        ),
        "restart": st.fixed_dictionaries({}, optional={"max": st.integers(0, 128), "on_hang": st.booleans()}),
        "hang": st.fixed_dictionaries({}, optional={"timeout": st.sampled_from(["5m", "20m"])}),
        "reliability": st.fixed_dictionaries(
            {},
            optional={
                "node_mtbf": st.sampled_from(["264d", "90d12h"]),
                "hang_share": st.floats(0, 1),
                "restart_time": st.sampled_from(["90s", "10m"]),
            },
        ),
        "passthrough": st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    },
)


PLACES = [
    (),
    *[(key,) for key in ("version", "scenario", "platform", "extends", "operator_retry", "precheck", "bogus")],
    *[("job", key) for key in ("name", "nodes", "accelerator", "network", "image", "environment", "bogus")],
    ("job", "environment", "A"),
    *[("checkpoint", key) for key in ("path", "interval", "resume")],
    *[("restart", key) for key in ("max", "unconditional", "on_hang", "pod_reschedules")],
    *[("hang", key) for key in ("detect", "timeout")],
    *[("reliability", key) for key in ("node_mtbf", "hang_share", "restart_time")],
    ("job", "duration"),
    ("checkpoint", "save_time"),
    ("passthrough", "x"),
]
MISSING = object()
EDGES = st.one_of(
    ODD, DURATIONS, NAMES, ENVIRONMENTS, st.integers(-2, 130), st.sampled_from(["tpu", "otc", "aws", 2, MISSING])
)


def perturbed(document: dict[str, Any], changes: list[tuple[tuple[str, ...], Any]]) -> Any:
    """A valid document with a value or two replaced or taken out (or the whole by a scalar): near misses."""
    for place, value in changes:
        if not place:
            return None if value is MISSING else value
        parent = document
        for key in place[:-1]:
            if not isinstance(parent.get(key), dict):
                parent[key] = {}
            parent = parent[key]
        if value is MISSING:
            parent.pop(place[-1], None)
        else:
            parent[place[-1]] = value
    return document


NEAR_MISSES = st.builds(perturbed, PLAIN, st.lists(st.tuples(st.sampled_from(PLACES), EDGES), max_size=2))


@pytest.mark.slow
@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(NEAR_MISSES, st.sampled_from(["huaweicloud", "otc", None, 7]))
def test_the_fast_path_never_disagrees_with_pydantic(document, platform):
    fast, reference = verdicts(document, platform)
    if fast is not None:
        assert isinstance(reference, HAConfig), f"fast path accepted what pydantic refuses: {reference}"
        assert exactly(fast) == exactly(reference)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(PLAIN)
def test_the_fast_path_decides_plainly_valid_documents_alone(document):
    fast, reference = verdicts(document)
    assert fast is not None, "a plainly valid document went to pydantic"
    assert exactly(fast) == exactly(reference)


def shipped_scenarios() -> list[str]:
    files = [*glob.glob(f"{REPO}/examples/**/*.yaml", recursive=True), *glob.glob(f"{REPO}/presets/*.yaml")]
    return sorted(f for f in files if "version:" in Path(f).read_text())


@pytest.mark.parametrize("path", shipped_scenarios(), ids=lambda p: str(Path(p).relative_to(REPO)))
def test_every_shipped_scenario_is_decided_by_the_fast_path_as_pydantic_would(path):
    data = with_presets(load(path), presets()).data
    fast, reference = verdicts(data, data.get("platform", "huaweicloud"))
    assert fast is not None
    assert exactly(fast) == exactly(reference)


def test_what_fastcheck_cannot_replay_stops_generation_rather_than_judging_less():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class WithList:
        items: list[int] = dataclasses.field(default_factory=list)

    from pydantic import TypeAdapter

    with pytest.raises(ValueError, match="cannot replay a 'list' schema"):
        validation.compile_schema(TypeAdapter(WithList).core_schema)


def imported_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    return set(result.stdout.split())


def test_a_valid_file_is_checked_without_importing_pydantic(tmp_path):
    valid = REPO / "examples/llama-pretrain/ha.yaml"
    modules = imported_after(f"from hacfg.lint import engine as lint\nlint.lint_paths([{str(valid)!r}], lint.configured()[0])")
    assert "pydantic" not in modules and "hacfg.scenario.validation" not in modules


def test_an_invalid_file_is_judged_by_pydantic(tmp_path):
    invalid = tmp_path / "ha.yaml"
    invalid.write_text("version: 1\nscenario: single-node\nrestart: {max: '3'}\n")
    code = (
        "from hacfg.lint import engine as lint\n"
        f"found = lint.lint_paths([{str(invalid)!r}], lint.configured()[0])\n"
        "assert [f.message for f in found.findings if f.rule == 'HA102'] == "
        "[\"restart.max: Input should be a valid integer (got '3')\"], found.findings"
    )
    assert "pydantic" in imported_after(code)
