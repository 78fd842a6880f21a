"""The environment pre-checks, each passing and failing with overridden paths and thresholds."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest


@pytest.fixture
def precheck(tmp_path, cli, monkeypatch, builtin_plugins_only):
    """Run ``hacfg precheck`` in this process on a scenario, with paths and thresholds moved under
    tmp_path, and only hacfg's own pre-checks."""

    def run(scenario_extra: str = "", **env: str):
        config = tmp_path / "ha.yaml"
        config.write_text(f"version: 1\nscenario: single-node\n{scenario_extra}")
        settings = {
            "HACFG_PRECHECK_HOSTS_DIR": str(tmp_path / "volcano"),
            "HACFG_PRECHECK_ROOT_MIN": "1K",
            "HACFG_PRECHECK_SHM_PATH": str(tmp_path),
            "HACFG_PRECHECK_SHM_MIN": "1K",
            "HACFG_PRECHECK_CACHE_PATH": str(tmp_path / "no-cache"),
            "HACFG_PRECHECK_GPU_DEVICES": str(tmp_path / "nvidia[0-9]*"),
            "VC_WORKER_HOSTS": "localhost",
            **env,
        }
        for name, value in settings.items():
            monkeypatch.setenv(name, value)
        result = cli("precheck", "--config", config)
        items = {}
        for line in result.out.splitlines():
            name, rest = line.removeprefix("[hacfg] item=").split(" status=")
            items[name] = rest.split()[0]
        return result, items

    return run


def test_all_pass_on_a_cpu_job(precheck):
    result, items = precheck("job: {accelerator: cpu}\n")
    assert result.code == 0, result.out
    assert items == {
        "dns": "passed",
        "disk-size root": "passed",
        "disk-size shm": "passed",
        "disk-size cache": "skipped",
        "ulimit": "skipped",
        "gpu-check": "skipped",
        "npu-check": "skipped",
    }
    assert "[hacfg] item=disk-size shm status=passed value=" in result.out and "need=>1.0KiB" in result.out


def test_dns_fails_on_an_unresolvable_host_and_reads_volcano_host_files(tmp_path, precheck):
    (tmp_path / "volcano").mkdir()
    (tmp_path / "volcano" / "worker.host").write_text("localhost\nno-such-host.invalid\n")
    result, items = precheck("job: {accelerator: cpu}\n")
    assert result.code == 138
    assert items["dns"] == "failed"
    assert "detail=unresolved: no-such-host.invalid" in result.out


@pytest.mark.parametrize(("which", "env"), [("root", {"HACFG_PRECHECK_ROOT_MIN": "1024T"}), ("shm", {"HACFG_PRECHECK_SHM_MIN": "1024T"})])
def test_disk_size_fails_below_the_threshold(precheck, which, env):
    result, items = precheck("job: {accelerator: cpu}\n", **env)
    assert result.code == 138
    assert items[f"disk-size {which}"] == "failed"


def test_disk_size_cache_is_checked_when_present(tmp_path, precheck):
    (tmp_path / "cache").mkdir()
    _, items = precheck("job: {accelerator: cpu}\n", HACFG_PRECHECK_CACHE_PATH=str(tmp_path / "cache"), HACFG_PRECHECK_CACHE_MIN="1K")
    assert items["disk-size cache"] == "passed"
    _, items = precheck("job: {accelerator: cpu}\n", HACFG_PRECHECK_CACHE_PATH=str(tmp_path / "cache"), HACFG_PRECHECK_CACHE_MIN="1024T")
    assert items["disk-size cache"] == "failed"


def test_ulimit_only_on_infiniband(precheck):
    soft_nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    low = {"HACFG_PRECHECK_MEMLOCK_MIN_KB": "0", "HACFG_PRECHECK_NOFILE_MIN": "0", "HACFG_PRECHECK_STACK_MIN_KB": "0", "HACFG_PRECHECK_NPROC_MIN": "0"}
    result, items = precheck("job: {accelerator: cpu, network: infiniband}\n", **low)
    assert items["ulimit open-files"] == "passed", result.out
    result, items = precheck("job: {accelerator: cpu, network: infiniband}\n", **{**low, "HACFG_PRECHECK_NOFILE_MIN": str(soft_nofile)})
    assert items["ulimit open-files"] == "failed"
    assert result.code == 138


def test_gpu_check_counts_device_nodes(tmp_path, precheck):
    _, items = precheck("job: {accelerator: gpu}\n")
    assert items["gpu-check"] == "failed"
    (tmp_path / "nvidia0").touch()
    _, items = precheck("job: {accelerator: gpu}\n")
    assert items["gpu-check"] == "passed"


def test_gpu_check_wants_every_card_the_node_asked_for(tmp_path, precheck):
    """job.cards, or the flavor's count: a node that shows fewer has a card missing."""
    for card in range(3):
        (tmp_path / f"nvidia{card}").touch()
    assert precheck("job: {accelerator: gpu, flavor: modelarts.pool.visual.4xlarge}\n")[1]["gpu-check"] == "failed"
    assert precheck("job: {accelerator: gpu, cards: 3}\n")[1]["gpu-check"] == "passed"
    result, items = precheck("job: {accelerator: gpu, cards: 0}\n")  # a GPU job that asks for none is not judged
    assert items["gpu-check"] == "skipped" and result.code == 0


def test_a_failed_precheck_stops_the_agent_before_the_command(tmp_path):
    marker = tmp_path / "ran"
    config = tmp_path / "ha.yaml"
    config.write_text("version: 1\nscenario: single-node\njob: {accelerator: cpu}\n")
    env = {**os.environ, "HACFG_PRECHECK_SHM_MIN": "1024T", "VC_WORKER_HOSTS": "localhost", "HACFG_PRECHECK_ROOT_MIN": "1K"}
    result = subprocess.run(
        [sys.executable, "-m", "hacfg", "agent", "--config", str(config), "--state-dir", str(tmp_path / "state"), "--", "touch", str(marker)],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert result.returncode == 138
    assert "[hacfg] item=disk-size shm status=failed" in result.stderr
    assert not marker.exists()


def test_without_a_scenario_file_the_gpu_check_is_skipped_not_failed(tmp_path, cli, monkeypatch, builtin_plugins_only):
    """A CPU machine and no --config: the accelerator is unknown, so no GPU is asked for (no exit 138)."""
    monkeypatch.setenv("HACFG_PRECHECK_GPU_DEVICES", str(tmp_path / "nvidia[0-9]*"))
    for name, value in {"HACFG_PRECHECK_ROOT_MIN": "1K", "HACFG_PRECHECK_SHM_PATH": str(tmp_path), "HACFG_PRECHECK_SHM_MIN": "1K",
                        "HACFG_PRECHECK_CACHE_PATH": str(tmp_path / "no-cache"), "VC_WORKER_HOSTS": "localhost"}.items():
        monkeypatch.setenv(name, value)
    result = cli("precheck")
    assert result.code == 0, result.out
    assert "[hacfg] item=gpu-check status=skipped detail=accelerator unknown without --config\n" in result.out
