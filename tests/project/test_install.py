"""A wheel built from this tree carries the presets, schemas and built-in plugins; plugins install beside it."""

from __future__ import annotations

import json

import pytest
from kit.packaging import imported_modules
from kit.paths import REPO

pytestmark = pytest.mark.slow  # builds a wheel and installs it in a fresh virtualenv


def test_wheel_installs_and_builds_from_another_directory(wheel_venv, tmp_path):
    hacfg = wheel_venv.bin / "hacfg"
    preset = wheel_venv.run(hacfg, "build", "--only", "annotations", "llm-long-term", cwd=tmp_path)
    assert preset.returncode == 0, preset.stderr
    assert json.loads(preset.stdout)["metadata"]["annotations"]["fault-tolerance/pod-retry-num"] == "3"

    job = "{name: elsewhere, image: org/train:1.0, command: bash run.sh, pool: pool-1}"
    stated = "checkpoint: {path: obs://b/c, resume: true}\n"
    (tmp_path / "ha.yaml").write_text(f"version: 1\nscenario: multi-node\njob: {job}\n{stated}")
    built = wheel_venv.run(hacfg, "build", "ha.yaml", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    assert json.loads(built.stdout)["metadata"]["name"] == "elsewhere"
    assert wheel_venv.run(hacfg, "lint", "ha.yaml", cwd=tmp_path).returncode == 0
    imported = wheel_venv.run(wheel_venv.python, "-c", "import hacfg.compile.compiler; print(hacfg.compile.compiler.__file__)", cwd=tmp_path)
    assert "site-packages" in imported.stdout
    typed = wheel_venv.run(wheel_venv.python, "-c", "import hacfg, pathlib; print((pathlib.Path(hacfg.__file__).parent / 'py.typed').is_file())")
    assert typed.stdout == "True\n", typed.stderr  # type checkers read plugins against hacfg.plugin


def test_third_party_plugin_package_is_picked_up_with_no_change_to_hacfg(wheel_venv, tmp_path):
    plugin = REPO / "examples" / "hacfg-plugin-ascend"
    installed = wheel_venv.pip_install(f"{plugin}[test]")
    assert installed.returncode == 0, installed.stderr
    hacfg = wheel_venv.bin / "hacfg"

    rules = wheel_venv.run(hacfg, "rules", cwd=tmp_path)
    assert any(line.startswith("ASC101") and "hacfg-plugin-ascend" in line for line in rules.stdout.splitlines())

    lint = wheel_venv.run(hacfg, "lint", plugin / "tests/fixtures/ASC101/fires.yaml", cwd=tmp_path)
    assert lint.returncode == 1
    assert lint.stdout.count("ASC101 error") == 2
    imported = imported_modules("lint", plugin / "tests/fixtures/ASC101/fires.yaml", cwd=tmp_path, python=wheel_venv.python)
    assert "hacfg_plugin_ascend" in imported  # a cold lint, with the plugin pip installed
    assert not {name for name in imported if name.startswith("hacfg.agent")}, "a plugin's import of hacfg.plugin costs a lint the agent"

    config = tmp_path / "ha.yaml"
    config.write_text("version: 1\nscenario: single-node\njob: {accelerator: npu}\n")
    # a host whose card hacfg's own npu-check passes (npu-smi replies as its reference prints), the plugin's to judge
    (tmp_path / "davinci0").touch()
    (tmp_path / "davinci_manager").touch()
    smi = tmp_path / "npu-smi"
    smi.write_text('#!/bin/sh\ncase "$2" in -l) echo "NPU ID : 0" ;; *) echo "Health : OK" ;; esac\n')
    smi.chmod(0o755)
    env = {"HACFG_PRECHECK_NPU_DEVICES": str(tmp_path / "davinci[0-9]*"), "HACFG_PRECHECK_NPU_MANAGER": str(tmp_path / "davinci_manager"),
           "HACFG_PRECHECK_NPU_SMI": str(smi), "HACFG_PRECHECK_ROOT_MIN": "1K", "HACFG_PRECHECK_SHM_MIN": "1K", "VC_WORKER_HOSTS": "localhost"}
    agent = wheel_venv.run(hacfg, "agent", "--config", config, "--state-dir", tmp_path / "state", "--", "true", cwd=tmp_path, env=env)
    assert agent.returncode == 138  # no CANN toolkit here: the plugin's pre-check stops the job before it starts
    assert "[hacfg] item=cann-toolkit status=failed need=a CANN toolkit" in agent.stderr
    assert "[hacfg] item=npu-check npu 0 status=passed value=OK" in agent.stderr
    (tmp_path / "ascend-toolkit").mkdir()
    env["ASCEND_TOOLKIT_HOME"] = str(tmp_path / "ascend-toolkit")
    agent = wheel_venv.run(hacfg, "agent", "--config", config, "--state-dir", tmp_path / "state2", "--", "true", cwd=tmp_path, env=env)
    assert agent.returncode == 0, agent.stderr
    assert "item=cann-toolkit status=passed" in agent.stderr

    own_tests = wheel_venv.run(wheel_venv.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", plugin / "tests", cwd=tmp_path)
    assert own_tests.returncode == 0, own_tests.stdout + own_tests.stderr
    assert "5 passed" in own_tests.stdout
