"""`passthrough:` is linted as the request body it becomes part of; it may not override what hacfg writes."""

from __future__ import annotations

from kit.cli import findings

HEAD = "version: 1\nscenario: multi-node\ncheckpoint: {path: obs://b/ckpt, interval: 30m, resume: true}\n"
AT = ("rule", "line", "column")  # what a finding is compared by here


def test_an_owned_key_that_overrides_the_scenario_is_an_error_at_its_line(cli, write):
    path = write("ha.yaml", HEAD + """\
restart: {max: 8, on_hang: true}
passthrough:
  metadata:
    annotations:
      fault-tolerance/job-retry-num: "1"
      fault-tolerance/hang-retry: "false"
  algorithm:
    environments: {MA_DETECT_TRAIN_INJECT_CODE: "0", OTHER: "x"}
""")
    result = cli("lint", path)
    assert result.code == 1
    assert {f for f in findings(cli, path, keys=AT) if f[0] == "HA020"} == {("HA020", 8, 7), ("HA020", 9, 7), ("HA020", 11, 20)}
    assert 'passthrough sets fault-tolerance/job-retry-num to "1" over restart.max ("8")' in result.out


def test_an_owned_key_that_agrees_with_the_scenario_is_harmless(cli, write):
    path = write("ha.yaml", HEAD + """\
restart: {max: 8, unconditional: true, on_hang: false}  # hacfg: disable=HA003 -- own watchdog
passthrough:
  metadata:
    annotations: {fault-tolerance/hang-retry: "false", fault-tolerance/job-retry-num: "8"}
  algorithm:
    environments: {MA_HANG_DETECT_TIME: "30"}
""")
    assert findings(cli, path, keys=AT) == set()


def test_body_rules_read_passthrough(cli, write):
    path = write("ha.yaml", HEAD + """\
passthrough:
  metadata:
    name: "not a name"
    annotations:
      tensorboard/enable: "True"
      fault-tolerance/hang-retires: "true"
      jupyter-lab/enable: 1
""")
    assert findings(cli, path, keys=AT) == {("HA012", 6, 11), ("HA015", 8, 27), ("HA008", 9, 7), ("HA007", 10, 27)}


def test_ignoring_the_override_rule_still_judges_the_overriding_key(cli, project):
    """Which passthrough keys override the scenario is the engine's own question, not HA020's finding."""
    (project / "ha.yaml").write_text(HEAD + """\
restart: {max: 0}
passthrough:
  metadata:
    annotations: {fault-tolerance/job-retry-num: "500"}
""")
    both = findings(cli, "ha.yaml", keys=AT)
    assert {rule for rule, _, _ in both} >= {"HA020", "HA001", "HA006"}
    (project / "pyproject.toml").write_text('[tool.hacfg]\nignore = ["HA020"]\n')
    assert findings(cli, "ha.yaml", keys=AT) == {f for f in both if f[0] != "HA020"}


def test_a_passthrough_key_the_scenario_does_not_write_is_judged_where_it_stands(cli, write):
    """A variable only passthrough sets was seen by no scenario rule: its body rule speaks at its line."""
    path = write("ha.yaml", HEAD + """\
job: {environment: {NCCL_DEBUG: INFO}}
passthrough:
  algorithm:
    environments: {NCCL_SOCKET_IFNAME: "$IFACE"}
""")
    assert findings(cli, path, keys=AT) == {("HA013", 7, 40)}


def test_a_problem_passthrough_causes_elsewhere_is_placed_at_the_scenario_key_it_meets(cli, write):
    """A passthrough switch turns a budget the scenario sets into a risk: the finding is at restart.max."""
    path = write("ha.yaml", HEAD.replace("multi-node", "single-node") + """\
restart: {max: 2}
passthrough:
  metadata:
    annotations: {fault-tolerance/job-unconditional-retry: "true"}
""")
    assert {f for f in findings(cli, path, keys=AT) if f[0] != "HA020"} == {("HA009", 4, 16)}


def test_what_the_scenario_itself_builds_is_not_said_twice(cli, write):
    """The built body's own findings are the scenario rules' to report, in the scenario's words."""
    path = write("ha.yaml", HEAD + """\
restart: {max: 8}
passthrough:
  spec:
    log_export_path: {obs_url: "obs://b/logs/"}
""")
    assert findings(cli, path, keys=AT) == set()
