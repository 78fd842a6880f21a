"""The timeouts agree (HA040-HA043): real scenario files and request bodies through ``hacfg lint``."""

from __future__ import annotations

import json

import pytest
from kit.cli import findings

HCCL_JOB = """\
version: 1
scenario: single-node
job:
  accelerator: npu
  environment:
    HCCL_EXEC_TIMEOUT: "{value}"
hang: {{timeout: 30m}}
"""


@pytest.mark.parametrize(("value", "fires"), [("600", True), ("1799", True), ("1800", False), ("0", False)])
def test_an_hccl_timeout_shorter_than_the_agents_is_named_on_its_value(cli, tmp_path, value, fires):
    path = tmp_path / "ha.yaml"
    path.write_text(HCCL_JOB.format(value=value))
    found = findings(cli, path, "--select", "HA040")
    if not fires:
        assert found == []
        return
    [finding] = found
    assert (finding["line"], finding["column"]) == (6, 24)
    assert finding["message"].startswith(
        f"HCCL's execution timeout (HCCL_EXEC_TIMEOUT={value}) kills the job before the agent's hang timeout (30m)"
        " can name the culprit: the round is a crash, counted against restart.max, not a hang;"
    )


def test_hccls_default_fires_first_under_a_long_hang_timeout(cli, tmp_path):
    path = tmp_path / "ha.yaml"
    path.write_text("version: 1\nscenario: single-node\njob: {accelerator: npu}\nhang:\n  timeout: 45m\n")
    [finding] = findings(cli, path, "--select", "HA040")
    assert (finding["line"], finding["column"]) == (5, 12)
    assert "(default 1836 s)" in finding["message"]
    path.write_text("version: 1\nscenario: single-node\njob: {accelerator: npu}\nhang:\n  timeout: 30m\n")
    assert findings(cli, path, "--select", "HA040") == []


def test_the_nccl_watchdog_counts_only_in_the_modes_that_kill(cli, tmp_path):
    path = tmp_path / "ha.yaml"
    body = 'version: 1\nscenario: single-node\njob:\n  accelerator: gpu\n  environment:\n    {name}: "{value}"\n'
    path.write_text(body.format(name="TORCH_NCCL_ASYNC_ERROR_HANDLING", value="3"))
    [finding] = findings(cli, path, "--select", "HA040")
    assert "the NCCL watchdog (TORCH_NCCL_ASYNC_ERROR_HANDLING=3, torch's default timeout 10m" in finding["message"]
    for name, value in (("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"), ("TORCH_NCCL_BLOCKING_WAIT", "false")):
        path.write_text(body.format(name=name, value=value))
        assert findings(cli, path, "--select", "HA040") == [], name


def test_a_request_body_weighs_the_watchdog_against_the_platforms_hang_time(cli, tmp_path):
    body = {
        "kind": "job",
        "metadata": {"name": "hb"},
        "algorithm": {"command": "python t.py", "environments": {"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "300"}},
        "spec": {"resource": {"flavor_id": "modelarts.vm.gpu.8v100", "node_count": 1}},
    }
    path = tmp_path / "job.json"
    path.write_text(json.dumps(body))
    [finding] = findings(cli, path, "--select", "HA040")
    assert "before the platform's hang detection (MA_HANG_DETECT_TIME=30) calls it a hang" in finding["message"]
    body["algorithm"]["environments"]["MA_HANG_DETECT_TIME"] = "4"
    path.write_text(json.dumps(body))
    assert findings(cli, path, "--select", "HA040") == []


PHASED = """\
version: 1
scenario: single-node
job: {{accelerator: gpu, image: org/train:1.0, command: python t.py, flavor: modelarts.vm.gpu.8v100{environment}}}
restart: {{max: 2, on_hang: true}}
hang:
  timeout: {timeout}
  phases:
    checkpoint: 40m
"""


@pytest.mark.parametrize(
    ("timeout", "environment", "fires"),
    [
        ("10m", "", True),
        ("30m", ", environment: {MA_HANG_DETECT_TIME: '15'}", True),
        ("40m", "", False),
        ("30m", ", environment: {MA_HANG_DETECT_TIME: '45'}", False),
    ],
)
def test_the_platform_restarting_a_phase_is_named_with_the_time_hacfg_build_writes(
    cli, tmp_path, timeout, environment, fires
):
    path = tmp_path / "ha.yaml"
    path.write_text(PHASED.format(timeout=timeout, environment=environment))
    result = cli("build", path)
    assert result.code == 0, result.err
    written = json.loads(result.out)["algorithm"].get("environments", {}).get("MA_HANG_DETECT_TIME", "30")
    on_the_phase = [f for f in findings(cli, path, "--select", "HA041") if f["line"] == 8]
    assert bool(on_the_phase) == fires
    if fires:
        [finding] = on_the_phase
        assert finding["column"] == 17
        assert finding["message"].startswith(
            f"the platform's hang detection (MA_HANG_DETECT_TIME={written}) restarts the job {written}m into a quiet"
            " checkpoint phase, before the agent's checkpoint timeout (40m) judges it"
        )


SAVES = "version: 1\nscenario: single-node\ncheckpoint: {{save_time: {save}}}\nhang:\n  timeout: 10m\n{phases}"


@pytest.mark.parametrize(
    ("save", "phases", "at"),
    [
        ("15m", "", (5, 12)),
        ("10m", "", (5, 12)),
        ("15m", "  phases:\n    checkpoint: 15m\n", (7, 17)),
        ("9m", "", None),
        ("15m", "  phases:\n    checkpoint: 16m\n", None),
    ],
)
def test_a_save_longer_than_its_timeout_is_named_on_the_timeout(cli, tmp_path, save, phases, at):
    path = tmp_path / "ha.yaml"
    path.write_text(SAVES.format(save=save, phases=phases))
    found = findings(cli, path, "--select", "HA042")
    assert [(f["line"], f["column"]) for f in found] == ([at] if at else [])
    if at:
        assert f"a save takes {save} (checkpoint.save_time)" in found[0]["message"]
        assert "every save is killed as a hang" in found[0]["message"]


SCENARIO_ENV = "version: 1\nscenario: single-node\njob:\n  accelerator: gpu\n  environment:\n    {name}: {value}\n"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "ten"),
        ("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "'-600'"),
        ("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "'1e3'"),
        ("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "'0x258'"),
        (
            "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
            "'\uff16\uff10\uff10'",
        ),  # full-width digits: Python reads them, C does not
        ("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "'2147483648'"),  # past a C int
        ("HCCL_EXEC_TIMEOUT", "'9" + "9" * 5000 + "'"),
        ("HCCL_EXEC_TIMEOUT", "'nan'"),
        ("HCCL_EXEC_TIMEOUT", "''"),
        ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "'-1'"),
        ("TORCH_NCCL_BLOCKING_WAIT", "'2'"),
        ("MA_HANG_DETECT_TIME", "'30.5'"),
    ],
)
def test_a_hostile_timeout_is_one_finding_on_its_value(cli, tmp_path, name, value):
    path = tmp_path / "ha.yaml"
    path.write_text(SCENARIO_ENV.format(name=name, value=value), encoding="utf-8")
    result = cli("lint", path)
    assert result.code == 1, result.err
    assert "Traceback" not in result.out + result.err
    [finding] = findings(cli, path, "--select", "HA040,HA041,HA042,HA043")
    assert (finding["rule"], finding["line"], finding["column"]) == ("HA043", 6, len(name) + 7)
    assert finding["message"].startswith(f"{name} is ")
    assert len(finding["message"]) < 200  # a 5000-digit value is not echoed


@pytest.mark.parametrize("value", [["1800"], None, {"s": 1}, True, 1.5])
def test_a_body_value_no_environment_holds_is_one_finding(cli, tmp_path, value):
    body = {
        "kind": "job",
        "metadata": {"name": "hostile"},
        "algorithm": {"command": "python t.py", "environments": {"HCCL_EXEC_TIMEOUT": value}},
        "spec": {"resource": {"flavor_id": "modelarts.vm.npu.snt9b", "node_count": 1}},
    }
    path = tmp_path / "job.json"
    path.write_text(json.dumps(body))
    result = cli("lint", "--select", "HA040,HA043", path)
    assert result.code == 1, result.err
    [finding] = findings(cli, path, "--select", "HA040,HA043")
    assert finding["rule"] == "HA043"


def test_fix_writes_a_duration_in_the_unit_the_variable_reads(cli, tmp_path):
    path = tmp_path / "ha.yaml"
    path.write_text(
        "version: 1\nscenario: single-node\njob:\n  environment:\n"
        "    TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC: 10m  # the monitor\n"
        "    HCCL_CONNECT_TIMEOUT: 1h\n"
        "    MA_HANG_DETECT_TIME: 45m\n"
        "    HCCL_EXEC_TIMEOUT: 90s30m\n"  # not a duration hacfg reads: no fix
    )
    result = cli("fix", path)
    assert result.code in (0, 1), result.err
    assert path.read_text().splitlines()[4:] == [
        '    TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC: "600"  # the monitor',
        '    HCCL_CONNECT_TIMEOUT: "3600"',
        '    MA_HANG_DETECT_TIME: "45"',
        "    HCCL_EXEC_TIMEOUT: 90s30m",
    ]
    assert findings(cli, path, "--select", "HA043", keys="line") == {8}


def test_a_minute_count_that_is_not_whole_gets_no_fix(cli, tmp_path):
    path = tmp_path / "ha.yaml"
    path.write_text("version: 1\nscenario: single-node\njob:\n  environment:\n    MA_HANG_DETECT_TIME: 90s\n")
    [finding] = findings(cli, path, "--select", "HA043")
    assert finding.get("fix") is None


WAITS = """\
version: 1
scenario: single-node
job:
  accelerator: npu
  environment: {{HCCL_EXEC_TIMEOUT: "{exec}"}}
checkpoint: {{save_time: {save}}}
hang:
  timeout: 10m
  phases: {{eval: 20m, checkpoint: 45m}}
"""


@pytest.mark.parametrize(
    ("exec_seconds", "save", "named"),
    [
        (
            "900",
            "5m",
            "the agent's checkpoint timeout (45m) can name the culprit",
        ),  # cuts both phases short: names the longer
        ("2800", "50m", "a save (50m, checkpoint.save_time) completes"),
        ("2800", "5m", None),
    ],
)
def test_one_finding_per_watchdog_names_the_longest_wait_it_cuts_short(cli, tmp_path, exec_seconds, save, named):
    path = tmp_path / "ha.yaml"
    path.write_text(WAITS.format(exec=exec_seconds, save=save))
    found = findings(cli, path, "--select", "HA040")
    assert [f["line"] for f in found] == ([5] if named else [])
    if named:
        assert named in found[0]["message"]
