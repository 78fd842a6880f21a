"""``hacfg plan``: the forecast of a scenario file, its inputs' origins, what-if flags, the lines
to change, and the measured inputs of --from-events."""

from __future__ import annotations

import json
import re

import pytest
from kit.packaging import imported_modules

from hacfg.plan import inputs as planned
from hacfg.plan.forecast import NotEnough, forecast

LONG_RUN = """\
version: 1
scenario: llm-long-term
job:
  nodes: 1024
  duration: 30d
checkpoint:
  path: obs://bucket/run/ckpt
  interval: 2h
  save_time: 5m
  resume: true
reliability:
  restart_time: 10m
"""


@pytest.fixture
def long_run(tmp_path):
    path = tmp_path / "ha.yaml"
    path.write_text(LONG_RUN)
    return path


def plan_json(cli, *args) -> dict:
    result = cli("plan", *args, "-f", "json")
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_the_forecast_of_a_long_run_says_what_it_costs_and_where_each_input_came_from(cli, long_run):
    result = cli("plan", long_run)
    assert result.code == 0, result.err
    out = result.out
    assert "1024 nodes, a failure every 6h11m on average" in out
    assert re.search(r"\n  checkpoint.save_time +5m +stated\n", out)
    assert re.search(r"\n  reliability.node_mtbf +263d22h38m +default: Llama 3 report, Table 5: "
                     r"419 interruptions in 54 days on 2,048 8-GPU nodes\n", out)
    assert re.search(r"\n  reliability.hang_share +1.7% +default: Llama 3 report, Table 5: "
                     r"7 of 419 were NCCL watchdog timeouts\n", out)
    assert "checkpoint interval: 2h; optimum 58m (Daly), 1h1m (Young)" in out
    assert "ETTR: 78.5% at 2h, 82.1% at 58m" in out
    # restart.max 5 with 3 pod reschedules cannot last 148 failures; huaweicloud's 128 cannot either
    assert "restart budget: restart.max 5 and 3 pod reschedules: 100.0% chance" in out
    assert "    checkpoint:\n      interval: 58m\n" in out
    assert "    restart:\n      max: 128\n      pod_reschedules: 42\n" in out
    assert "or split the run into jobs of at most 22d" in out


def test_json_gives_the_figures_as_fractions_and_seconds(cli, long_run):
    data = plan_json(cli, long_run)
    assert data["interval"]["configured_s"] == 7200
    assert data["interval"]["daly_s"] == pytest.approx(57.64 * 60, abs=1)
    assert data["interval"]["young_s"] == pytest.approx(60.93 * 60, abs=1)
    assert 0 < data["ettr"]["configured"] < data["ettr"]["optimal"] < 1
    assert data["failures"]["expected"] == pytest.approx(148, abs=1)
    assert data["failures"]["uncounted"] == pytest.approx(data["failures"]["hang"])  # on_hang from the preset
    assert data["budget"]["p_exhausted"] > 0.99 and data["budget"]["method"] == "Markov chain over the failures"
    assert data["inputs"]["hang_timeout"] == {"key": "hang.timeout", "value": 1800.0, "origin": "stated"}


def test_what_if_flags_override_the_file_for_one_run(cli, long_run):
    data = plan_json(cli, long_run, "--nodes", "64", "--interval", "4h", "--node-mtbf", "100d", "--duration", "5d")
    assert data["inputs"]["nodes"] == {"key": "job.nodes", "value": 64, "origin": "what-if: --nodes"}
    assert data["inputs"]["interval"]["origin"] == "what-if: --interval"
    assert data["interval"]["configured_s"] == 4 * 3600
    assert data["job_mtbf_s"] == pytest.approx(100 * 86400 / 64)
    # a shorter, smaller run fits the preset's budget: no change to it is asked for
    assert data["budget"]["p_exhausted"] < 0.05
    assert not any("restart" in change["lines"] for change in data["changes"])


def test_a_memory_save_time_prices_both_tiers_side_by_side(cli, long_run):
    data = plan_json(cli, long_run, "--memory-save-time", "400ms")
    disk, memory = data["tiers"]
    assert (disk["tier"], disk["save_time"], disk["daly"]) == ("disk", 300, pytest.approx(data["interval"]["daly_s"]))
    assert (memory["tier"], memory["save_time"]) == ("memory", 0.4)
    # Young: sqrt(2 * save * MTBF); a failure redoes half an interval and half a save
    assert memory["young"] == pytest.approx((2 * 0.4 * data["job_mtbf_s"]) ** 0.5)
    assert memory["lost_per_failure"] == pytest.approx((memory["daly"] + 0.4) / 2)
    assert memory["lost_per_failure"] < disk["lost_per_failure"] / 20
    text = cli("plan", long_run, "--memory-save-time", "400ms").out
    assert re.search(r"\n  memory save 400ms: optimum every \d+m\d*s? \(Daly\).*a node's loss from its peer's copy\n", text), text
    assert "checkpoint tiers" not in cli("plan", long_run).out
    refused = cli("plan", long_run, "--memory-save-time", "soon")
    assert refused.code == 2 and "--memory-save-time: 'soon' is not a duration" in refused.err


def test_the_plain_call_and_typer_give_the_same_answer(cli, long_run, tmp_path):
    plain = cli("plan", long_run, "--save-time", "3m")
    through_typer = cli("plan", long_run, "--save-time=3m")
    assert plain.code == through_typer.code == 0
    assert plain.out == through_typer.out


def test_a_plain_plan_imports_neither_typer_nor_pydantic(long_run):
    modules = imported_modules("plan", long_run, "-f", "json")
    assert not {"typer", "pydantic", "hacfg.agent.records.calibration"} & modules


def test_a_budget_the_platform_can_hold_is_raised_within_its_range(cli, tmp_path):
    path = tmp_path / "ha.yaml"
    path.write_text(LONG_RUN.replace("nodes: 1024", "nodes: 128"))
    data = plan_json(cli, path)
    needed = data["budget"]["restart_max_needed"]
    assert 5 < needed <= 128
    assert {"why": f"{data['budget']['p_exhausted']:.0%} chance the restart budget runs out before the end; "
            f"restart.max {needed} brings it under 5%", "lines": f"restart:\n  max: {needed}"} in data["changes"]
    raised = plan_json(cli, path)  # the same answer twice: nothing random
    assert raised == data


def test_on_otc_what_else_helps_when_three_restarts_cannot_hold_it(cli, tmp_path):
    path = tmp_path / "ha.yaml"
    path.write_text(LONG_RUN.replace("scenario: llm-long-term", "scenario: multi-node\nplatform: otc")
                    .replace("nodes: 1024", "nodes: 64").replace("duration: 30d", "duration: 10d"))
    data = plan_json(cli, path)
    assert data["budget"]["restart_max"] == 3 and data["budget"]["restart_max_needed"] is None
    lines = [change["lines"] for change in data["changes"]]
    assert any(line.startswith("restart:\n  max: 3\n  pod_reschedules: ") for line in lines)
    assert "restart:\n  on_hang: true" not in lines  # the multi-node preset restarts hangs already
    assert any(line.startswith("job:\n  duration: ") for line in lines)


def test_inputs_nobody_knows_stop_the_plan_with_the_lines_to_add(cli, tmp_path):
    path = tmp_path / "ha.yaml"
    path.write_text("version: 1\nscenario: multi-node\ncheckpoint: {path: obs://b/c}\n")
    result = cli("plan", path)
    assert result.code == 2
    assert result.err == (f"{path}: the plan needs checkpoint.save_time and reliability.restart_time: "
                          "state them, pass them as flags, or give --from-events\n")
    one_missing = cli("plan", path, "--save-time", "1m")
    assert one_missing.err == (f"{path}: the plan needs reliability.restart_time: "
                               "state it, pass it as a flag, or give --from-events\n")
    without_duration = cli("plan", path, "--save-time", "1m", "--restart-time", "2m")
    assert without_duration.code == 0
    assert "failures over the run: unknown (state job.duration, or pass --duration)" in without_duration.out


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--interval", "soon", "hacfg: error: --interval: 'soon' is not a duration; use a number and a unit: 90s, 30m, 2h, 1d"),
    ("--node-mtbf", "0s", "hacfg: error: --node-mtbf: must be longer than 0s"),
    ("--nodes", "0", "hacfg: error: --nodes: a job has at least 1 node"),
    ("--save-time", "0s", "{file}: checkpoint.save_time must be longer than 0s: a save time of nothing has no optimum"),
])
def test_a_bad_what_if_value_is_one_line_and_exit_2(cli, long_run, flag, value, message):
    result = cli("plan", long_run, flag, value)
    assert (result.code, result.err) == (2, message.format(file=long_run) + "\n")


@pytest.mark.parametrize("nodes", ["²", "١٢", "1" * 5000])
def test_a_node_count_that_is_no_plain_integer_is_a_usage_error(cli, long_run, nodes):
    result = cli("plan", long_run, "--nodes", nodes)
    assert result.code == 2 and "Invalid value for '--nodes'" in result.err


def test_an_accepted_duration_prints_as_its_figure_and_only_an_endless_run_as_never(cli, long_run):
    """An accepted duration prints as its figure, however long; an interval so long that no segment
    ever completes gives the only "never"."""
    longest = cli("plan", long_run, "--duration", "999999999d", "--node-mtbf", "999999999d")
    assert longest.code == 0 and "never" not in longest.out
    assert re.search(r"job.duration +999999999d +what-if", longest.out)
    assert re.search(r"expected wall time: [\d.]+e\+\d+d at 2h", longest.out)  # past what a file writes: in days
    hopeless = cli("plan", long_run, "--save-time", "999999999d")
    assert (hopeless.code, "never" in hopeless.err) == (2, False)
    assert "a 999999999d save" in hopeless.err
    endless = cli("plan", long_run, "--interval", "99999999d")
    assert re.search(r"expected wall time: never at 99999999d, \S+ at ", endless.out)
    assert plan_json(cli, long_run, "--interval", "99999999d")["wall_time"]["configured_s"] is None


@pytest.mark.slow
def test_plot_draws_ettr_against_the_interval(cli, long_run, tmp_path):
    picture = tmp_path / "ettr.png"
    result = cli("plan", long_run, "--plot", picture)
    assert result.code == 0, result.err
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result.err == f"wrote {picture}\n"


def events(*records: tuple[str, str, dict]) -> str:
    return "".join(json.dumps({"time": f"2026-12-01T07:{t}+00:00", "event": e, "node": 0, **f}) + "\n"
                   for t, e, f in records)


def test_from_events_measures_the_node_rate_restart_cost_and_save_time(cli, long_run, tmp_path):
    log = tmp_path / "events.jsonl"
    ckpt = {"step": 10, "path": "/c/step_10", "time": "2026-12-01T07:00:20+00:00", "save_s": 1.5}
    log.write_text(events(
        ("00:00", "attempt_start", {"attempt": 1}),
        ("00:01", "first_activity", {"attempt": 1, "after": 1.0}),
        ("00:30", "attempt_exit", {"cause": "environment", "exit_code": -9, "checkpoints": [ckpt]}),
        ("00:30", "decision", {"action": "proc_restart", "cause": "environment"}),
        ("00:32", "attempt_start", {"attempt": 2, "resume_from": "/c/step_10"}),
        ("00:36", "first_activity", {"attempt": 2, "after": 4.0}),
        ("01:00", "attempt_exit", {"cause": "success", "exit_code": 0, "checkpoints": [{**ckpt, "save_s": 2.5}]}),
    ))
    data = plan_json(cli, long_run, "--from-events", log, "--nodes", "1")
    measured = data["inputs"]
    assert measured["restart_time"] == {"key": "reliability.restart_time", "value": 6.0,
                                        "origin": "measured: 1 restart; few, so a rough figure"}
    assert measured["save_time"]["value"] == 2.0 and measured["save_time"]["origin"].startswith("measured: 2 saves")
    assert measured["node_mtbf"]["value"] == 60.0  # one failure in one node-minute
    assert measured["node_mtbf"]["origin"] == "measured: 1 failure in 0.0167 node-hours; few, so a rough figure"
    assert measured["hang_share"]["value"] == 0.0
    hopeless = cli("plan", long_run, "--from-events", log)  # a failure a minute on each of 1024 nodes
    assert hopeless.code == 2
    assert hopeless.err == (f"{long_run}: with a failure every 1s, a 2s save and a 6s restart, "
                            "no checkpoint interval lets the job make progress\n")


def test_the_model_reads_defaults_when_the_file_says_nothing(tmp_path):
    from hacfg.scenario.model import HAConfig

    inputs = planned.from_config(HAConfig(version=1, scenario="single-node"))
    assert inputs.node_mtbf.value == pytest.approx(54 * 2048 / 419 * 86400)
    assert inputs.nodes.origin == "default: 1 node"
    assert inputs.missing("save_time", "restart_time", "duration") == [
        "checkpoint.save_time", "reliability.restart_time", "job.duration"]
    with pytest.raises(NotEnough, match=r"needs checkpoint\.save_time"):
        forecast(inputs)


def test_lint_pays_for_the_model_only_when_the_file_gives_its_numbers(tmp_path, long_run):
    plain = tmp_path / "plain.yaml"
    plain.write_text("version: 1\nscenario: llm-long-term\ncheckpoint: {path: obs://b/c, interval: 30m, resume: true}\n")
    assert not any(name.startswith("hacfg.plan") for name in imported_modules("lint", plain))
    assert "hacfg.plan.model" in imported_modules("lint", long_run)


def test_the_lint_rules_speak_in_the_plan_s_numbers(cli, long_run):
    result = cli("lint", long_run)
    assert result.code == 0  # warnings
    assert f"{long_run}:8:13: HA011 warning checkpoint.interval 2h gives an expected ETTR of 78.5%, every 58m " \
           "(Daly's optimum) 82.1%: set checkpoint.interval: 58m" in result.out
    assert f"{long_run}:5:13: HA021 warning 100% chance that the restart budget (restart.max 5 and 3 pod " \
           "reschedules) runs out before the 30d run ends: huaweicloud allows at most restart.max 128: " \
           "`hacfg plan` shows what else helps" in result.out


# Llama 3 405B's pre-training as the report tells it: 2,048 nodes of 8 H100s for 54 days.
LLAMA3_405B = LONG_RUN.replace("nodes: 1024", "nodes: 2048").replace("duration: 30d", "duration: 54d")
# One node that fails every 15 minutes for a month: about 3,100 failures at the optimum interval.
FAILING_NODE = """\
version: 1
scenario: llm-long-term
job: {nodes: 1, duration: 30d}
checkpoint: {path: obs://bucket/run/ckpt, save_time: 2s, resume: true}
reliability: {restart_time: 5s, node_mtbf: 15m}
"""


def with_restart(text: str, restart_max: int, pods: int) -> str:
    return text + f"restart: {{max: {restart_max}, pod_reschedules: {pods}}}\n"


@pytest.mark.parametrize(("scenario", "method"), [
    (LLAMA3_405B, "Markov chain over the failures"),
    (FAILING_NODE, "negative binomial bounds"),
])
def test_the_pod_reschedules_advised_are_the_fewest_that_plan_within_5_percent(cli, tmp_path, scenario, method):
    path = tmp_path / "ha.yaml"
    path.write_text(scenario)
    data = plan_json(cli, path)
    assert data["budget"]["method"] == method and data["budget"]["restart_max_needed"] is None
    advice = next(change["lines"] for change in data["changes"] if "pod_reschedules" in change["lines"])
    pods = int(re.fullmatch(r"restart:\n  max: 128\n  pod_reschedules: (\d+)", advice)[1])
    assert pods > data["failures"]["counted"] - 128  # more than the failures expected to count
    path.write_text(with_restart(scenario, 128, pods))
    applied = plan_json(cli, path)["budget"]
    assert applied["p_exhausted"] <= 0.05
    low = applied["p_exhausted_low"]  # an upper bound answers where the chain would cost too much
    assert low is None if method == "Markov chain over the failures" else 0 < low <= applied["p_exhausted"]
    assert not any("restart" in change["lines"] for change in plan_json(cli, path)["changes"])
    path.write_text(with_restart(scenario, 128, pods - 1))
    assert plan_json(cli, path)["budget"]["p_exhausted"] > 0.05


def test_the_restart_max_ha021_names_is_the_least_that_lints_clean(cli, tmp_path):
    path = tmp_path / "ha.yaml"
    scenario = LONG_RUN.replace("nodes: 1024", "nodes: 512").replace("duration: 30d", "duration: 12d")
    path.write_text(scenario)
    message = next(line for line in cli("lint", path).out.splitlines() if "HA021" in line)
    needed = int(re.search(r"restart\.max (\d+) brings it under 5%", message)[1])
    path.write_text(with_restart(scenario, needed, 3))
    assert "HA021" not in cli("lint", path).out
    path.write_text(with_restart(scenario, needed - 1, 3))
    assert "HA021" in cli("lint", path).out


def test_a_wall_time_longer_than_a_file_can_write_is_printed_in_days(cli, long_run):
    result = cli("plan", long_run, "--duration", "999999999d")
    assert result.code == 0, result.err
    assert re.search(r"\nexpected wall time: 1\.27e\+09d at 2h, 1\.22e\+09d at 58m\n", result.out)
    assert "never" not in result.out
    assert plan_json(cli, long_run, "--duration", "999999999d")["wall_time"]["optimal_s"] > 1e14


NODES_NO_FLOAT_HOLDS = str(10**310)


@pytest.mark.parametrize("args", [("--nodes", NODES_NO_FLOAT_HOLDS), (f"--nodes={NODES_NO_FLOAT_HOLDS}",)])
def test_a_node_count_no_float_holds_is_an_error_at_its_flag(cli, long_run, args):
    result = cli("plan", long_run, *args)
    assert (result.code, result.err) == (2, "hacfg: error: --nodes: more nodes than the plan can count\n")


def test_a_node_count_no_float_holds_is_an_error_at_its_place(cli, tmp_path):
    path = tmp_path / "ha.yaml"
    path.write_text(LONG_RUN.replace("nodes: 1024", f"nodes: {NODES_NO_FLOAT_HOLDS}"))
    result = cli("plan", path)
    assert (result.code, result.err) == (2, f"{path}:4:10: job.nodes: more nodes than the plan can count\n")


def test_the_longest_duration_a_file_can_write_is_spelled_as_one(cli, long_run):
    result = cli("plan", long_run, "--interval", "999999999d")
    assert result.code == 0, result.err
    assert "checkpoint interval: 999999999d; optimum 58m" in result.out


def test_bounds_in_place_of_the_chain_say_how_far_below_the_chance_may_be(cli, tmp_path):
    path = tmp_path / "ha.yaml"
    path.write_text(with_restart(FAILING_NODE, 128, 3016))
    assert ("restart budget: restart.max 128 and 3016 pod reschedules: 4.9% chance it runs out before the end "
            "(at least 4.3%: negative binomial bounds)\n") in cli("plan", path).out
