"""The NPU pre-check (``accelerator: npu``) against what npu-smi prints, replayed by a stand-in on PATH.

Each reply is quoted verbatim from where it was printed; where no public output of a state exists, the
documented state is put in the documented layout, and the test says so.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Ascend npu-smi reference, "查询所有NPU设备" (npu-smi info -l), Atlas 200I A2:
# https://www.hiascend.com/document/detail/zh/Atlas%20200I%20A2/2520/re/npu/npusmi_012.html
LIST_A2 = """\
        Card Count                     : 1

        NPU ID                         : 0
        Product Name                   : NA
        Serial Number                  : NA
        Chip Count                     : 1
"""
# The same command on Atlas A3 (HDK 26.1.0, npusmia3_0014):
# https://www.hiascend.com/document/detail/zh/HDK/latest/A3/A3npu/npusmia3_0014.html
LIST_A3 = """\
Total Count                    : 1
NPU ID                         : 0
Chip Count                     : 2
"""
# "查询所有芯片健康状态" (npu-smi info -t health -i 0): one chip and the card's MCU, both OK.
# https://www.hiascend.com/document/detail/zh/Atlas%20200I%20A2/2520/re/npu/npusmi_027.html
HEALTH_ALL_CHIPS = """\
        NPU ID                         : 0
        Chip Count                     : 1
  
        Chip ID                        : 0
        Health                         : OK

        Health                         : OK
        Chip Name                      : MCU
"""  # noqa: W293 (the blank line's two spaces are the page's)
# "查询指定芯片健康状态" (npu-smi info -t health -i 0 -c 0): the layout that carries the error code.
# https://www.hiascend.com/document/detail/zh/Atlas%20200I%20A2/2520/re/npu/npusmi_028.html
HEALTH_ONE_CHIP = """\
        Health Status                  : OK
        Error Code                     : NA
        Error Information              : NA
"""
# A fault code from MindCluster's documented fault ConfigMap (a CardUnhealthy card, SeparateNPU):
# https://www.hiascend.com/document/detail/en/mindcluster/730/clustersched/schedulingug/mxdlug_com_006.html
FAULT_CODE = "80E18401"
# npu-smi in containers whose driver cannot be reached, as pasted in public issues:
# https://github.com/Ascend/cann-container-image/issues/46 and https://github.com/vllm-project/vllm-ascend/issues/2698
DEVICE_USED = "DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\ndcmi model initialized failed, because the device is used. ret is -8020\n"
NOT_INITIALISED = "DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\ndcmi module initialize failed. ret is -8005\n"


def in_state(state: str, code: str = FAULT_CODE) -> str:
    """The documented layout (npusmi_028) in one of the five documented states: no public page prints the others."""
    return HEALTH_ONE_CHIP.replace(": OK", f": {state}").replace("Error Code                     : NA", f"Error Code                     : {code}")


@pytest.fixture
def npu_host(tmp_path, cli, monkeypatch, builtin_plugins_only):
    """A host for ``hacfg precheck`` of an NPU job: /dev/davinci* and /dev/davinci_manager under tmp_path, and an
    npu-smi on PATH that replays ``replies``: the listing for ``info -l``, a device's health for ``-i N``."""
    dev, bin_dir = tmp_path / "dev", tmp_path / "bin"
    dev.mkdir()
    bin_dir.mkdir()
    smi = bin_dir / "npu-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'here=$(dirname "$0")\n'
        'case "$*" in\n'
        '  "info -l") reply=list ;;\n'
        '  "info -t health -i "*) reply=health-$5 ;;\n'
        '  *) echo "npu-smi stand-in: no reply for $*" >&2; exit 2 ;;\n'
        "esac\n"
        'cat "$here/$reply.txt"\n'
        'exit "$(cat "$here/$reply.rc" 2>/dev/null || echo 0)"\n'
    )
    smi.chmod(0o755)
    config = tmp_path / "ha.yaml"
    settings = {
        "HACFG_PRECHECK_HOSTS_DIR": str(tmp_path / "volcano"), "HACFG_PRECHECK_ROOT_MIN": "1K", "HACFG_PRECHECK_SHM_PATH": str(tmp_path),
        "HACFG_PRECHECK_SHM_MIN": "1K", "HACFG_PRECHECK_CACHE_PATH": str(tmp_path / "no-cache"), "VC_WORKER_HOSTS": "localhost",
        "HACFG_PRECHECK_NPU_DEVICES": str(dev / "davinci[0-9]*"), "HACFG_PRECHECK_NPU_MANAGER": str(dev / "davinci_manager"),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    for name, value in settings.items():
        monkeypatch.setenv(name, value)

    class Host:
        def __init__(self):
            self.dev, self.bin, self.config, self.cli = dev, bin_dir, config, cli

        def cards(self, *numbers: int, manager: bool = True) -> Host:
            for number in numbers:
                (dev / f"davinci{number}").touch()
            if manager:
                (dev / "davinci_manager").touch()
            return self

        def reply(self, name: str, text: str, code: int = 0) -> Host:
            (bin_dir / f"{name}.txt").write_text(text)
            (bin_dir / f"{name}.rc").write_text(str(code))
            return self

        def precheck(self, accelerator: str = "npu"):
            config.write_text(f"version: 1\nscenario: single-node\njob: {{accelerator: {accelerator}}}\n")
            result = cli("precheck", "--config", config)
            lines = {line.removeprefix("[hacfg] item=").split(" status=")[0]: line for line in result.out.splitlines()}
            return result, {name: line for name, line in lines.items() if name.startswith("npu-check")}

    return Host()


@pytest.mark.parametrize(("listing", "health"), [(LIST_A2, HEALTH_ALL_CHIPS), (LIST_A3, HEALTH_ONE_CHIP)], ids=["a2", "a3"])
def test_healthy_npus_as_the_reference_prints_them_pass(npu_host, listing, health):
    result, items = npu_host.cards(0).reply("list", listing).reply("health-0", health).precheck()
    assert result.code == 0, result.out
    assert items == {
        "npu-check devices": "[hacfg] item=npu-check devices status=passed value=1 need=>=1 detail=" + str(npu_host.dev / "davinci[0-9]*"),
        "npu-check npu 0": "[hacfg] item=npu-check npu 0 status=passed value=OK need=not Critical or UNKNOWN",
    }


@pytest.mark.parametrize(("state", "meaning"), [("Warning", "minor alarm"), ("Alarm", "major alarm")])
def test_a_warning_or_alarm_is_logged_with_its_error_code_and_the_job_starts(npu_host, state, meaning):
    listing = LIST_A3.replace("Total Count                    : 1", "Total Count                    : 2") + "NPU ID                         : 1\nChip Count                     : 2\n"
    npu_host.cards(0, 1).reply("list", listing).reply("health-0", HEALTH_ONE_CHIP).reply("health-1", in_state(state))
    result, items = npu_host.precheck()
    assert result.code == 0, result.out
    assert items["npu-check npu 0"].endswith("status=passed value=OK need=not Critical or UNKNOWN")
    assert items["npu-check npu 1"] == (f"[hacfg] item=npu-check npu 1 status=passed value={state} need=not Critical or UNKNOWN "
                                        f"detail={meaning}: error code {FAULT_CODE}")


@pytest.mark.parametrize(("state", "meaning"), [("Critical", "critical alarm"), ("UNKNOWN", "the device does not exist or is not started")])
def test_a_critical_or_unknown_npu_fails_the_check_and_moves_the_job(npu_host, state, meaning):
    npu_host.cards(0).reply("list", LIST_A2).reply("health-0", in_state(state))
    result, items = npu_host.precheck()
    assert result.code == 138
    assert items["npu-check npu 0"].startswith(f"[hacfg] item=npu-check npu 0 status=failed value={state} ")
    assert f"detail={meaning}: error code {FAULT_CODE}" in items["npu-check npu 0"]


def test_the_worst_chip_of_a_device_decides(npu_host):
    """The all-chips layout (npusmi_027) with its MCU in the Critical state: one chip is enough."""
    critical_mcu = HEALTH_ALL_CHIPS.replace("        Health                         : OK\n        Chip Name", "        Health                         : Critical\n        Chip Name")
    result, items = npu_host.cards(0).reply("list", LIST_A2).reply("health-0", critical_mcu).precheck()
    assert result.code == 138
    assert "status=failed value=Critical" in items["npu-check npu 0"]


@pytest.mark.parametrize(("reply", "code", "said"), [
    (NOT_INITIALISED, 0, "npu-smi info -l listed no NPU ID: dcmi module initialize failed. ret is -8005"),
    (DEVICE_USED, 236, "npu-smi info -l exited 236: dcmi model initialized failed, because the device is used. ret is -8020"),
])  # fmt: skip
def test_an_npu_smi_that_cannot_reach_the_driver_fails_with_its_own_words(npu_host, reply, code, said):
    result, items = npu_host.cards(0).reply("list", reply, code).precheck()
    assert result.code == 138 and result.err == ""
    assert items["npu-check health"] == f"[hacfg] item=npu-check health status=failed detail={said}"


def test_a_health_reply_that_says_something_else_is_one_line_and_a_failure(npu_host):
    npu_host.cards(0).reply("list", LIST_A2).reply("health-0", HEALTH_ONE_CHIP.replace(": OK", ": Degraded"))
    result, items = npu_host.precheck()
    assert result.code == 138 and result.err == ""
    assert items["npu-check npu 0"] == ("[hacfg] item=npu-check npu 0 status=failed "
                                        "detail=npu-smi printed health 'Degraded', not one of OK, Warning, Alarm, Critical, UNKNOWN")
    npu_host.reply("health-0", "Usage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]\n")
    _, items = npu_host.precheck()
    assert items["npu-check npu 0"].endswith("detail=npu-smi printed 'Usage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]', "
                                             "not one of OK, Warning, Alarm, Critical, UNKNOWN")


def test_without_npu_smi_the_check_fails_cleanly(npu_host, monkeypatch):
    monkeypatch.setenv("HACFG_PRECHECK_NPU_SMI", "npu-smi-not-installed")
    result, items = npu_host.cards(0).precheck()
    assert result.code == 138 and result.err == ""
    assert items["npu-check health"] == ("[hacfg] item=npu-check health status=failed "
                                         "detail=npu-smi-not-installed not found: cannot read the NPUs' health (HACFG_PRECHECK_NPU_SMI names it)")


def test_an_npu_smi_that_does_not_answer_is_given_up_on(npu_host, monkeypatch):
    monkeypatch.setenv("HACFG_PRECHECK_NPU_SMI_TIMEOUT", "0.5")
    (npu_host.bin / "npu-smi").write_text("#!/bin/sh\nexec sleep 30\n")
    result, items = npu_host.cards(0).precheck()
    assert result.code == 138
    assert items["npu-check health"].endswith("detail=npu-smi info -l did not answer within 0.5s")


def test_no_cards_or_no_manager_device_fails_before_npu_smi_is_asked(npu_host):
    result, items = npu_host.precheck()
    assert result.code == 138
    assert items == {"npu-check devices": f"[hacfg] item=npu-check devices status=failed value=0 need=>=1 "
                                          f"detail=no {npu_host.dev / 'davinci[0-9]*'}: the container has no NPU"}
    result, items = npu_host.cards(0, manager=False).precheck()
    assert result.code == 138
    assert items["npu-check devices"].endswith(f"detail={npu_host.dev / 'davinci_manager'} does not exist: "
                                               "the NPU driver's manager device is not in the container")


def test_a_node_that_shows_fewer_cards_than_it_asked_for_fails(npu_host):
    """An 8-card flavor's node with a card missing: the pod asked the device plugin for 8 (job.cards, or the flavor)."""
    npu_host.cards(*range(7)).reply("list", LIST_A2).reply("health-0", HEALTH_ALL_CHIPS)
    npu_host.config.write_text("version: 1\nscenario: single-node\njob: {accelerator: npu, flavor: modelarts.pool.visual.npu.8snt9b3.d}\n")
    result = npu_host.cli("precheck", "--config", npu_host.config)
    assert result.code == 138
    assert f"item=npu-check devices status=failed value=7 need=>=8 detail={npu_host.dev / 'davinci[0-9]*'}: 8 per node asked for" in result.out


def test_other_accelerators_skip_it(npu_host):
    _, items = npu_host.precheck("gpu")
    assert items == {"npu-check": "[hacfg] item=npu-check status=skipped detail=accelerator is gpu"}


def test_a_critical_npu_stops_the_agent_before_the_command(npu_host, tmp_path):
    """The agent, a real process, exits 138 and never starts the command."""
    npu_host.cards(0).reply("list", LIST_A2).reply("health-0", in_state("Critical"))
    npu_host.config.write_text("version: 1\nscenario: single-node\njob: {accelerator: npu}\n")
    marker = tmp_path / "ran"
    result = subprocess.run([sys.executable, "-m", "hacfg", "agent", "--config", str(npu_host.config), "--state-dir", str(tmp_path / "state"),
                             "--", "touch", str(marker)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 138, result.stderr
    assert "[hacfg] item=npu-check npu 0 status=failed value=Critical" in result.stderr
    assert not marker.exists()
