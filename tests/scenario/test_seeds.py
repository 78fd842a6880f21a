"""Every number and rule of the platform's HA pages, pinned at hacfg's defaults.

One test per statement. Each docstring starts with the document and the sentence it checks,
quoted as written there (``test_every_quote_is_in_its_document`` holds them to it); the
documents are ``shared/seeds/ha-configuration.txt`` and ``ha-scenarios.txt`` beside the
repository, cross-checked with the reference notes (``shared/reference/modelarts.md``). Nothing here moves a threshold: where the real thing
cannot be had on a test machine (a 32 GB disk, an open-files limit above the hard limit), the
check runs on a tmpfs of the exact size in a private mount namespace, or the limit read is
replaced at exactly the threshold and one unit above it.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import re
import resource
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from kit.agents import read_events
from kit.cli import findings, run_hacfg
from kit.paths import REPO, SHARED

from hacfg.agent.prechecks import prechecks
from hacfg.plugin.precheck import GiB, PrecheckContext, PrecheckSettings
from hacfg.plugin.provided import presets as available_presets
from hacfg.restart.policy import Budgets, Policy, decide
from hacfg.scenario import modelarts as ma
from hacfg.scenario.config import load_config

DOCUMENTS = {
    "ha-configuration.txt": SHARED / "seeds" / "ha-configuration.txt",
    "ha-scenarios.txt": SHARED / "seeds" / "ha-scenarios.txt",
    "modelarts.md": SHARED / "reference" / "modelarts.md",
}
QUOTE = re.compile(r'^(?P<doc>[\w.-]+): "(?P<quote>.+?)"(?:\s|$)', re.DOTALL)
LOGS = REPO / "tests" / "data" / "logs"


# --- helpers: the real CLI, the real agent, real pre-checks -------------------------------------


def preset(name: str):
    return load_config(available_presets()[name], available_presets()).config


def annotations(cli, scenario: str | Path) -> dict[str, str]:
    result = cli("build", "--only", "annotations", scenario)
    assert result.code == 0, result.err
    return json.loads(result.out)["metadata"]["annotations"]


# What a finding is compared by: its rule, where in the file's logical tree, how severe.
WHAT_WHERE = ("rule", "logical_path", "severity")
# A whole body needs something to run and somewhere to run it; these seeds are about the rest.
RUNNABLE = "passthrough: {algorithm: {id: seed-algorithm}, spec: {resource: {pool_id: seed-pool}}}\n"


def built(cli, write, text: str, *args: str) -> tuple[dict, str]:
    result = cli("build", write("ha.yaml", text + RUNNABLE), *args)
    assert result.code == 0, result.err
    return json.loads(result.out), result.err


def body(annotations: dict | None = None, environments: dict | None = None) -> str:
    job = {
        "kind": "job",
        "metadata": {"name": "job1", "annotations": annotations or {}},
        "algorithm": {"environments": environments or {}},
        "spec": {"resource": {"node_count": 1}, "volumes": [{}]},
    }
    return json.dumps(job)


@dataclass
class AgentRun:
    code: int
    attempts: list[tuple[int, int]]  # (HACFG_ATTEMPT, HACFG_RESTART_COUNT) as each attempt saw them
    events: list[dict]
    err: str

    @property
    def actions(self) -> list[str]:
        return [e["action"] for e in self.events if e["event"] == "decision"]

    @property
    def remaining(self) -> int:
        last = self.events[-1]
        return last["max_restarts"] - last["counted"]


def agent_run(tmp_path: Path, restart: str, script: str, *options: str) -> AgentRun:
    """``hacfg agent`` on a CPU single-node job without pre-checks, around ``sh -c script``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "ha.yaml"
    config.write_text(
        f"version: 1\nscenario: single-node\njob: {{accelerator: cpu}}\nprecheck: false\nrestart: {restart}\n"
    )
    seen = tmp_path / "attempts"
    command = f'echo "$HACFG_ATTEMPT $HACFG_RESTART_COUNT" >> {seen}; {script}'
    result = run_hacfg(
        "agent", "--config", config, "--state-dir", tmp_path / "state", *options, "--", "sh", "-c", command
    )
    events = read_events(tmp_path / "state")
    attempts = [(int(a), int(r)) for a, r in (line.split() for line in seen.read_text().splitlines())]
    return AgentRun(result.code, attempts, events, result.err)


USER_ERROR = "exit 1"
KILLED = "kill -9 $$"


@pytest.fixture(scope="module")
def hang_run(tmp_path_factory) -> AgentRun:
    """A command that hangs every time, under restart upon suspension with restart.max 10."""
    return agent_run(
        tmp_path_factory.mktemp("hang"),
        "{max: 10, on_hang: true}",
        "exec sleep 60",
        "--hang-timeout",
        "1s",
        "--initial-hang-timeout",
        "1s",
    )


def items(output: str) -> dict[str, tuple[str, str]]:
    """``item -> (status, value)`` from pre-check lines."""
    found = {}
    for line in output.splitlines():
        match = re.match(r"\[hacfg\] item=(?P<name>.+?) status=(?P<status>\w+)(?: value=(?P<value>\S+))?", line)
        if match:
            found[match["name"]] = (match["status"], match["value"])
    return found


def _namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    return (
        subprocess.run(
            ["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True, check=False
        ).returncode
        == 0
    )


namespaces = pytest.mark.skipif(
    not _namespaces_work(), reason="needs user and mount namespaces (unshare -rm) for a tmpfs of an exact size"
)


def precheck_on_tmpfs(tmp_path: Path, sizes: dict[str, int], **env: str) -> dict[str, tuple[str, str]]:
    """``hacfg precheck`` in a private mount namespace where each path is a tmpfs of exactly that many bytes."""
    config = tmp_path / "cpu.yaml"
    config.write_text("version: 1\nscenario: single-node\njob: {accelerator: cpu}\n")
    mounts = []
    for path, size in sizes.items():
        Path(path).mkdir(parents=True, exist_ok=True)
        mounts.append(f"mount -t tmpfs -o size={size} tmpfs {path}")
    script = " && ".join([*mounts, f"exec {sys.executable} -m hacfg precheck --config {config}"])
    result = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env},
        timeout=60,
        check=False,
    )
    return items(result.stdout) or pytest.fail(result.stderr)


def ulimit_with(monkeypatch, limit: int, soft: int) -> dict[str, tuple[str, str]]:
    """The registered ulimit pre-check on InfiniBand, with ``getrlimit(limit)`` reading ``soft``."""
    real = resource.getrlimit
    monkeypatch.setattr(resource, "getrlimit", lambda which: (soft, real(which)[1]) if which == limit else real(which))
    [check] = [c for c in prechecks() if c.name == "ulimit"]
    results = check.run(PrecheckContext(Policy(network="infiniband"), PrecheckSettings(), {}))
    return {r.name: (r.status, r.value) for r in results}


# --- ha-configuration.txt: constraints and Table 1 ---------------------------------------------


@pytest.mark.slow
def test_suspension_detected_only_on_gpu_and_npu(cli, write):
    """ha-configuration.txt: "Suspension can be detected only for training jobs that run on GPUs or NPUs."

    On a CPU job hang settings are an error and no MA_HANG_DETECT_TIME is emitted; on GPU and NPU it is.
    """
    for accelerator in ("gpu", "npu", "cpu"):
        path = write(
            f"{accelerator}.yaml",
            f"version: 1\nscenario: single-node\njob: {{accelerator: {accelerator}}}\nhang: {{detect: true, timeout: 45m}}\n"
            + RUNNABLE,
        )
        job = json.loads(cli("build", path).out)
        emitted = job["algorithm"].get("environments", {}).get(ma.HANG_DETECT_TIME)
        hang_errors = {f for f in findings(cli, path, keys=WHAT_WHERE) if f[0] == "HA004"}
        if accelerator == "cpu":
            assert emitted is None and hang_errors == {("HA004", "hang.detect", "error")}
        else:
            assert emitted == "45" and not hang_errors


def test_process_container_and_job_level_restarts():
    """ha-configuration.txt: "The system supports process-level, container-level, and job-level automatic restarts out of the box without extra setup, automatically matching and upgrading recovery policies."

    In place first (proc_restart); a spent budget upgrades to the pod (with pod reschedules) or the job.
    """
    for pods, escalation in ((0, "job_reschedule"), (2, "pod_reschedule")):
        budgets, policy = Budgets(), Policy(max_restarts=1, pod_reschedules=pods)
        first = decide("environment", budgets, policy, progressed=False, command_code=137)
        second = decide("environment", budgets, policy, progressed=False, command_code=137)
        assert (first.action, second.action, second.exit_code) == ("proc_restart", escalation, 138)


def test_maximum_restarts_range_from_1_to_128(cli, write, tmp_path):
    """ha-configuration.txt: "The value ranges from 1 to 128."

    restart.max 1 and 128 build; 129 is refused where it is written; 0 is auto restart off.
    """
    for value in (1, 128):
        job, _ = built(cli, write, f"version: 1\nscenario: single-node\nrestart: {{max: {value}}}\n")
        assert job["metadata"]["annotations"][ma.JOB_RETRY_NUM] == str(value)
    refused = cli("build", write("over.yaml", "version: 1\nscenario: single-node\nrestart: {max: 129}\n"))
    assert refused.code == 2 and refused.err.startswith(f"{tmp_path / 'over.yaml'}:3:16: restart.max")
    job, _ = built(cli, write, "version: 1\nscenario: single-node\nrestart: {max: 0}\n")
    assert ma.JOB_RETRY_NUM not in job["metadata"]["annotations"]


def test_auto_restart_default_maximum_is_3(cli, tmp_path):
    """ha-configuration.txt: "the auto-restart feature is enabled with a default maximum restart limit of 3"

    The starting file `hacfg init` writes (hacfg's counterpart of the console form) asks for 3.
    """
    assert cli("init", "-o", tmp_path / "ha.yaml").code == 0
    assert annotations(cli, tmp_path / "ha.yaml")[ma.JOB_RETRY_NUM] == "3"


@pytest.mark.slow
def test_only_three_consecutive_unconditional_restarts(tmp_path):
    """ha-configuration.txt: "To avoid invalid restart, the system supports only three consecutive unconditional restarts."

    A command failing with a user error, restart.max 10: three restarts, then the agent gives up with its code.
    """
    run = agent_run(tmp_path, "{max: 10, unconditional: true}", USER_ERROR)
    assert run.actions == ["proc_restart"] * 3 + ["give_up"]
    assert run.code == 1 and len(run.attempts) == 4


@pytest.mark.slow
def test_unconditional_restarts_occupy_the_maximum(tmp_path):
    """ha-configuration.txt: "Note: Unconditional auto restart occupies Maximum number of restarts."

    restart.max 2 stops user-error restarts after two, before the three-in-a-row cap.
    """
    run = agent_run(tmp_path, "{max: 2, unconditional: true}", USER_ERROR)
    assert run.actions == ["proc_restart", "proc_restart", "give_up"]
    assert run.events[-1]["counted"] == 2 and "restart budget of 2 spent" in run.err


@pytest.mark.slow
def test_unconditional_example_leaves_seven_restarts(tmp_path):
    """ha-configuration.txt: "If the training job continues to repeatedly restart after the restart, Unconditional auto restart will no longer be triggered, leaving 7 remaining restart attempts."

    restart.max 10: three user errors restart and leave 7, which environment faults then use; a fourth user error in a row does not restart.
    """
    run = agent_run(
        tmp_path / "env", "{max: 10, unconditional: true}", f'[ "$HACFG_ATTEMPT" -le 3 ] && {USER_ERROR}; {KILLED}'
    )
    assert [r for _, r in run.attempts] == list(range(11))
    assert run.actions == ["proc_restart"] * 10 + ["job_reschedule"] and run.code == 138
    after_three = agent_run(tmp_path / "user", "{max: 10, unconditional: true}", USER_ERROR)
    assert after_three.remaining == 7 and after_three.actions[-1] == "give_up"


@pytest.mark.slow
def test_hang_restarts_limited_to_three_in_a_row(hang_run):
    """ha-configuration.txt: "To prevent unnecessary restarts, ModelArts limits consecutive restarts to three."

    Three hang restarts, then the fourth hang asks to be rescheduled (exit 138).
    """
    assert hang_run.actions == ["proc_restart"] * 3 + ["job_reschedule"]
    assert hang_run.code == 138 and len(hang_run.attempts) == 4


@pytest.mark.slow
def test_hang_restarts_do_not_occupy_the_maximum(hang_run):
    """ha-configuration.txt: "Note: Restart Upon Suspension does not occupy Maximum number of restarts." """
    assert [e["counted"] for e in hang_run.events if e["event"] == "decision"] == [0, 0, 0, 0]
    assert [r for _, r in hang_run.attempts] == [0, 1, 2, 3]  # restarts, all the same


@pytest.mark.slow
def test_hang_example_leaves_ten_restarts(hang_run):
    """ha-configuration.txt: "The remaining number of restart times is 10."

    restart.max 10 and three hang restarts in a row.
    """
    assert hang_run.remaining == 10


# --- ha-configuration.txt: the API (Table 2) ------------------------------------------------------

API_EXAMPLE = {ma.JOB_RETRY_NUM: "3", ma.UNCONDITIONAL_RETRY: "true", ma.HANG_RETRY: "true", ma.POD_RETRY_NUM: "2"}


def test_api_example_annotations_round_trip(cli, tmp_path):
    """ha-configuration.txt: "When creating a training job via the API, you can enable HA capabilities by configuring the corresponding parameters under annotations."

    The page's example request imports to a scenario file that builds the same four annotations, and lints without errors.
    """
    request = tmp_path / "job.json"
    request.write_text(body(API_EXAMPLE))
    assert not {f for f in findings(cli, request, keys=WHAT_WHERE) if f[2] == "error"}
    assert cli("import", request, "-o", tmp_path / "ha.yaml").code == 0
    assert annotations(cli, tmp_path / "ha.yaml") == API_EXAMPLE


def test_job_retry_num_enables_auto_restart(tmp_path):
    """ha-configuration.txt: "If the fault-tolerance/job-retry-num field is added, auto restart is enabled."

    restart.max 3 (the key's value) restarts an environment fault in place.
    """
    run = agent_run(tmp_path, "{max: 3}", KILLED)
    assert run.actions == ["proc_restart"] * 3 + ["job_reschedule"]


def test_job_retry_num_is_an_integer_from_1_to_128(cli, tmp_path):
    """ha-configuration.txt: "The value can be an integer ranging from 1 to 128."

    In a request body: "1" and "128" pass; "0", "129", "3.5" and "three" are HA006 errors.
    """
    for value, bad in (("1", False), ("128", False), ("0", True), ("129", True), ("3.5", True), ("three", True)):
        request = tmp_path / f"job-{value}.json"
        request.write_text(body({ma.JOB_RETRY_NUM: value}))
        assert (("HA006", f'metadata.annotations."{ma.JOB_RETRY_NUM}"', "error") in findings(cli, request, keys=WHAT_WHERE)) == bad, (
            value
        )


def test_job_retry_num_default_0_is_not_reissued(cli, tmp_path):
    """ha-configuration.txt: "If this hyperparameter is not specified, the default value 0 is used, indicating that the job will not be re-issued and the environment pre-check will not be enabled."

    A request without the key imports as restart.max 0 and builds without it; the agent then hands
    the command's own code back after one attempt.
    """
    request = tmp_path / "job.json"
    request.write_text(body({}))
    assert cli("import", request, "-o", tmp_path / "ha.yaml").code == 0
    assert load_config(tmp_path / "ha.yaml", available_presets()).config.restart.max == 0
    assert ma.JOB_RETRY_NUM not in annotations(cli, tmp_path / "ha.yaml")
    run = agent_run(tmp_path / "agent", "{max: 0}", KILLED)
    assert (run.actions, run.code, len(run.attempts)) == (["give_up"], 137, 1)


def test_job_retry_num_default_0_means_no_platform_precheck(cli, write):
    """ha-configuration.txt: "the environment pre-check will not be enabled"

    A job built with auto restart off is told so: the platform will not run its pre-check.
    """
    _, notes = built(cli, write, "version: 1\nscenario: single-node\nrestart: {max: 0}\n")
    assert "the platform runs the environment pre-check only with auto restart (restart.max >= 1)" in notes


def test_job_retry_num_default_0_agent_runs_no_precheck(tmp_path):
    """ha-configuration.txt: "the environment pre-check will not be enabled"

    The agent, like the platform, runs no pre-check when auto restart is off.
    """
    config = tmp_path / "ha.yaml"
    config.write_text("version: 1\nscenario: single-node\njob: {accelerator: gpu}\nrestart: {max: 0}\n")
    result = run_hacfg(
        "agent",
        "--config",
        config,
        "--state-dir",
        tmp_path / "state",
        "--",
        "true",
        env={"HACFG_PRECHECK_GPU_DEVICES": str(tmp_path / "no-gpu[0-9]")},
    )
    assert "item=" not in result.err and result.code == 0


def test_unconditional_retry_annotation(cli, write):
    """ha-configuration.txt: "Specifies whether to enable unconditional automatic restart."

    restart.unconditional true is the string "true"; false leaves the key out.
    """
    on, _ = built(cli, write, "version: 1\nscenario: single-node\nrestart: {max: 4, unconditional: true}\n")
    off, _ = built(cli, write, "version: 1\nscenario: single-node\nrestart: {max: 4, unconditional: false}\n")
    assert (
        on["metadata"]["annotations"][ma.UNCONDITIONAL_RETRY] == "true"
        and ma.UNCONDITIONAL_RETRY not in off["metadata"]["annotations"]
    )


def test_hang_retry_annotation(cli, write):
    """ha-configuration.txt: "Specifies whether to enable restart upon suspension." """
    on, _ = built(cli, write, "version: 1\nscenario: single-node\nrestart: {max: 2, on_hang: true}\n")
    off, _ = built(cli, write, "version: 1\nscenario: single-node\nrestart: {max: 2, on_hang: false}\n")
    assert (
        on["metadata"]["annotations"][ma.HANG_RETRY] == "true" and ma.HANG_RETRY not in off["metadata"]["annotations"]
    )


def test_pod_retry_num_annotation(cli, write, tmp_path):
    """ha-configuration.txt: "Number of pod-level reschedules."

    restart.pod_reschedules 2 is "2", and a spent budget asks for a pod reschedule rather than the job's.
    """
    job, _ = built(cli, write, "version: 1\nscenario: single-node\nrestart: {max: 1, pod_reschedules: 2}\n")
    assert job["metadata"]["annotations"][ma.POD_RETRY_NUM] == "2"
    run = agent_run(tmp_path, "{max: 1, pod_reschedules: 2}", KILLED)
    assert run.actions == ["proc_restart", "pod_reschedule"] and run.code == 138


# --- ha-configuration.txt: check items (Table 3) -------------------------------------------------


@pytest.mark.slow
def test_dns_resolves_the_volcano_host_files(tmp_path):
    """ha-configuration.txt: "The domain names of the volcano containers in the .host file in /etc/volcano are successfully resolved."

    /etc/volcano is where the check looks by default; each *.host file's names must resolve, other files are not read.
    """
    assert PrecheckSettings().hosts_dir == Path("/etc/volcano")
    config = tmp_path / "cpu.yaml"
    config.write_text("version: 1\nscenario: single-node\njob: {accelerator: cpu}\n")
    hosts = tmp_path / "volcano"
    hosts.mkdir()
    (hosts / "worker.host").write_text("localhost\n")
    (hosts / "notes.txt").write_text("no-such-host.invalid\n")
    env = {"HACFG_PRECHECK_HOSTS_DIR": str(hosts)}
    assert items(run_hacfg("precheck", "--config", config, env=env).out)["dns"] == ("passed", "1/1")
    (hosts / "worker.host").write_text("localhost\nno-such-host.invalid\n")
    assert items(run_hacfg("precheck", "--config", config, env=env).out)["dns"] == ("failed", "1/2")


def verdicts_at_and_above(tmp_path: Path, item: str, variable: str, size: int) -> tuple[str, str]:
    """The pre-check's status on a tmpfs of exactly ``size`` bytes, and on one 4 KiB larger."""
    exact, above = tmp_path / "exact", tmp_path / "above"
    at = precheck_on_tmpfs(tmp_path, {str(exact): size}, **{variable: str(exact)})[item][0]
    over = precheck_on_tmpfs(tmp_path, {str(above): size + 4096}, **{variable: str(above)})[item][0]
    return at, over


@pytest.mark.slow
@namespaces
def test_disk_size_root_greater_than_32_gb(tmp_path):
    """ha-configuration.txt: "Disk size – Container root directory	disk-size root	None	The directory is greater than 32 GB."

    A root of exactly 32 GiB fails, 4 KiB more passes (the default threshold, on tmpfs).
    """
    assert verdicts_at_and_above(tmp_path, "disk-size root", "HACFG_PRECHECK_ROOT_PATH", 32 * GiB) == ("failed", "passed")


@pytest.mark.slow
@namespaces
def test_disk_size_shm_greater_than_1_gb(tmp_path):
    """ha-configuration.txt: "Disk size – /dev/shm	disk-size shm	None	The directory is greater than 1 GB."

    /dev/shm itself (default path and threshold), remounted at exactly 1 GiB fails, 4 KiB more passes.
    """
    assert precheck_on_tmpfs(tmp_path, {"/dev/shm": GiB})["disk-size shm"] == ("failed", "1.0GiB")
    assert precheck_on_tmpfs(tmp_path, {"/dev/shm": GiB + 4096})["disk-size shm"][0] == "passed"


@pytest.mark.slow
@namespaces
def test_disk_size_cache_greater_than_32_gb(tmp_path):
    """ha-configuration.txt: "Disk size – /cache	disk-size cache	None	The directory is greater than 32 GB."

    /cache is the default path; a cache of exactly 32 GiB fails, 4 KiB more passes.
    """
    assert PrecheckSettings().cache_path == Path("/cache")
    assert verdicts_at_and_above(tmp_path, "disk-size cache", "HACFG_PRECHECK_CACHE_PATH", 32 * GiB) == ("failed", "passed")


@pytest.mark.slow
def test_ulimit_only_on_infiniband(tmp_path):
    """ha-configuration.txt: "ulimit check	ulimit	An IB network is used."

    Skipped on ethernet and RoCE; on InfiniBand each of the four limits is one item.
    """
    for network, expected in (
        ("ethernet", {"ulimit"}),
        ("roce", {"ulimit"}),
        (
            "infiniband",
            {"ulimit max-locked-memory", "ulimit open-files", "ulimit stack-size", "ulimit max-user-processes"},
        ),
    ):
        config = tmp_path / f"{network}.yaml"
        config.write_text(f"version: 1\nscenario: single-node\njob: {{accelerator: cpu, network: {network}}}\n")
        found = {name for name in items(run_hacfg("precheck", "--config", config).out) if name.startswith("ulimit")}
        assert found == expected, network


ULIMITS = [
    pytest.param("ulimit max-locked-memory", resource.RLIMIT_MEMLOCK, 16000, 1024, id="max locked memory > 16000"),
    pytest.param("ulimit open-files", resource.RLIMIT_NOFILE, 1000000, 1, id="open files > 1000000"),
    pytest.param("ulimit stack-size", resource.RLIMIT_STACK, 8000, 1024, id="stack size > 8000"),
    pytest.param("ulimit max-user-processes", resource.RLIMIT_NPROC, 1000000, 1, id="max user processes > 1000000"),
]


@pytest.mark.parametrize(("item", "limit", "minimum", "unit"), ULIMITS)
def test_ulimit_minimums(tmp_path, monkeypatch, item, limit, minimum, unit):
    """ha-configuration.txt: "max locked memory > 16000 open files > 1000000 stack size > 8000 max user processes > 1000000"

    In ulimit's units (KiB for locked memory and stack). A real process with the soft limit at the
    minimum (or the hard limit, if lower) fails; the decision at exactly the minimum and one unit above.
    """
    hard = resource.getrlimit(limit)[1]
    soft = minimum * unit if hard == resource.RLIM_INFINITY else min(hard, minimum * unit)
    config = tmp_path / "ib.yaml"
    config.write_text("version: 1\nscenario: single-node\njob: {accelerator: cpu, network: infiniband}\n")
    result = subprocess.run(
        [sys.executable, "-m", "hacfg", "precheck", "--config", config],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=lambda: resource.setrlimit(limit, (soft, hard)),
    )
    assert items(result.stdout)[item] == ("failed", str(soft // unit)) and result.returncode == 138
    assert f"need=>{minimum}" in result.stdout
    assert ulimit_with(monkeypatch, limit, minimum * unit)[item] == ("failed", str(minimum))
    assert ulimit_with(monkeypatch, limit, (minimum + 1) * unit)[item] == ("passed", str(minimum + 1))


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("pynvml") is not None, reason="with NVML the check counts real GPUs, not device nodes"
)
def test_gpu_check_on_gpu_jobs_only(tmp_path):
    """ha-configuration.txt: "GPU check	gpu-check	GPU and the v2 training engine are used.	GPUs are detected."

    A GPU job with no GPU device fails, one device passes; CPU and NPU jobs skip it.
    """
    devices = tmp_path / "dev"
    devices.mkdir()
    env = {"HACFG_PRECHECK_GPU_DEVICES": str(devices / "nvidia[0-9]*")}
    for accelerator in ("gpu", "npu", "cpu"):
        config = tmp_path / f"{accelerator}.yaml"
        config.write_text(f"version: 1\nscenario: single-node\njob: {{accelerator: {accelerator}}}\n")
        status = items(run_hacfg("precheck", "--config", config, env=env).out)["gpu-check"]
        assert status == (("failed", "0") if accelerator == "gpu" else ("skipped", None)), accelerator
    (devices / "nvidia0").touch()
    assert items(run_hacfg("precheck", "--config", tmp_path / "gpu.yaml", env=env).out)["gpu-check"] == ("passed", "1")


# --- ha-configuration.txt: workflow -------------------------------------------------------------


def test_workflow_checkpoint_saving_and_loading(cli, write):
    """ha-configuration.txt: "Ensure your training script already supports checkpoint saving and loading."

    Auto restart with no checkpoint path is an error (HA001); with resume off, a warning (HA017).
    """
    no_path = write("a.yaml", "version: 1\nscenario: single-node\ncheckpoint: {path: null}\nrestart: {max: 2}\n")
    no_resume = write("b.yaml", "version: 1\nscenario: single-node\ncheckpoint: {resume: false}\nrestart: {max: 2}\n")
    assert ("HA001", "restart.max", "error") in findings(cli, no_path, keys=WHAT_WHERE)
    assert ("HA017", "checkpoint.resume", "warning") in findings(cli, no_resume, keys=WHAT_WHERE)


def test_workflow_checkpoint_path_survives_a_restart(cli, write):
    """ha-configuration.txt: "Confirm that the checkpoint path is located in a location accessible after a job restarts." """
    for path in ("/tmp/ckpt", "/cache/ckpt", "/dev/shm/ckpt", "ckpt"):
        assert ("HA002", "checkpoint.path", "error") in findings(
            cli, write("ha.yaml", f"version: 1\nscenario: multi-node\ncheckpoint: {{path: {path}}}\n"), keys=WHAT_WHERE
        ), path
    assert not {
        f
        for f in findings(cli, write("ok.yaml", "version: 1\nscenario: multi-node\ncheckpoint: {path: obs://b/ckpt}\n"), keys=WHAT_WHERE)
        if f[0] == "HA002"
    }


def test_workflow_appropriate_maximum(cli, write):
    """ha-configuration.txt: "Configure an appropriate value for the maximum number of restarts."

    Unconditional restarts with a budget of 3 or fewer can spend it all on one bug (HA009); 4 is enough.
    """
    assert ("HA009", "restart.max", "warning") in findings(
        cli, write("a.yaml", "version: 1\nscenario: single-node\nrestart: {max: 3, unconditional: true}\n"), keys=WHAT_WHERE
    )
    assert not {
        f
        for f in findings(
            cli, write("b.yaml", "version: 1\nscenario: single-node\nrestart: {max: 4, unconditional: true}\n"), keys=WHAT_WHERE
        )
        if f[0] == "HA009"
    }


def test_workflow_multi_node_hang_restart(cli, write):
    """ha-configuration.txt: "For multi-node multi-PU tasks, enable job suspension detection or restart upon suspension." """
    assert ("HA003", "restart.on_hang", "warning") in findings(
        cli, write("a.yaml", "version: 1\nscenario: multi-node\nrestart: {on_hang: false}\n"), keys=WHAT_WHERE
    )
    assert not {f for f in findings(cli, write("b.yaml", "version: 1\nscenario: multi-node\n"), keys=WHAT_WHERE) if f[0] == "HA003"}


def test_workflow_operator_re_execution_on_ascend(cli, write):
    """ha-configuration.txt: "For Ascend supernode communication failure scenarios, evaluate whether to enable operator re-execution."

    On NPU jobs operator_retry is the string "true"; elsewhere it is an error (HA010).
    """
    job, _ = built(cli, write, "version: 1\nscenario: multi-node\njob: {accelerator: npu}\noperator_retry: true\n")
    assert job["metadata"]["annotations"][ma.HCCL_OP_RETRY] == "true"
    assert ("HA010", "operator_retry", "error") in findings(
        cli, write("gpu.yaml", "version: 1\nscenario: multi-node\njob: {accelerator: gpu}\noperator_retry: true\n"), keys=WHAT_WHERE
    )


@pytest.mark.slow
def test_workflow_monitor_events(tmp_path, cli):
    """ha-configuration.txt: "Monitor logs, events, and recovery details while the job is running."

    Every attempt and decision is an event, and `hacfg events` shows them.
    """
    run = agent_run(tmp_path, "{max: 1}", KILLED)
    assert [e["event"] for e in run.events if e["event"] in ("attempt_start", "attempt_exit", "decision")] == [
        "attempt_start",
        "attempt_exit",
        "decision",
    ] * 2
    table = cli("events", tmp_path / "state" / "events.jsonl").out
    assert "proc_restart: environment fault: restart 1 of 1" in table and "job_reschedule" in table


# --- ha-configuration.txt: Table 4 ----------------------------------------------------------------


def test_table_4_single_node(cli):
    """ha-configuration.txt: "{ "metadata": { "annotations": { "fault-tolerance/job-retry-num": "2" } } }" """
    assert annotations(cli, "single-node") == {ma.JOB_RETRY_NUM: "2"}


def test_table_4_multi_node(cli):
    """ha-configuration.txt: "{ "metadata": { "annotations": { "fault-tolerance/job-retry-num": "3", "fault-tolerance/job-unconditional-retry": "true", "fault-tolerance/hang-retry": "true" } } }" """
    assert annotations(cli, "multi-node") == {
        ma.JOB_RETRY_NUM: "3",
        ma.UNCONDITIONAL_RETRY: "true",
        ma.HANG_RETRY: "true",
    }


def test_table_4_long_term(cli):
    """ha-configuration.txt: "{ "metadata": { "annotations": { "fault-tolerance/job-retry-num": "5", "fault-tolerance/job-unconditional-retry": "true", "fault-tolerance/hang-retry": "true", "fault-tolerance/pod-retry-num": 3 (number of pod reschedules) } } }"

    The page writes the pod count as a bare 3; annotations are strings, so it is "3".
    """
    assert annotations(cli, "llm-long-term") == {
        ma.JOB_RETRY_NUM: "5",
        ma.UNCONDITIONAL_RETRY: "true",
        ma.HANG_RETRY: "true",
        ma.POD_RETRY_NUM: "3",
    }


# --- ha-configuration.txt: effect of the check, restart details ---------------------------------


@pytest.mark.slow
def test_passed_checks_log_the_keyword_item(tmp_path):
    """ha-configuration.txt: "If the fault tolerance check is passed, the logs of the check items will be recorded, indicating that the check items are successful."

    One line per item with the keyword `item`, in the agent's log too.
    """
    config = tmp_path / "cpu.yaml"
    config.write_text("version: 1\nscenario: single-node\njob: {accelerator: cpu}\nrestart: {max: 1}\n")
    env = {
        "VC_WORKER_HOSTS": "localhost",
        "HACFG_PRECHECK_ROOT_PATH": str(tmp_path),
        "HACFG_PRECHECK_SHM_PATH": str(tmp_path),
    }
    result = run_hacfg("agent", "--config", config, "--state-dir", tmp_path / "state", "--", "true", env=env)
    assert "[hacfg] item=dns status=passed value=1/1" in result.err


@pytest.mark.slow
def test_failed_checks_log_the_keyword_item(tmp_path):
    """ha-configuration.txt: "If a fault tolerance check fails, check failure logs will be recorded."

    A GPU job on a machine without GPUs: the failure is an `item` line, and the command never starts.
    """
    config = tmp_path / "gpu.yaml"
    config.write_text("version: 1\nscenario: single-node\njob: {accelerator: gpu}\nrestart: {max: 1}\n")
    marker = tmp_path / "ran"
    result = run_hacfg(
        "agent",
        "--config",
        config,
        "--state-dir",
        tmp_path / "state",
        "--",
        "touch",
        marker,
        env={"HACFG_PRECHECK_GPU_DEVICES": str(tmp_path / "nvidia[0-9]*")},
    )
    assert "[hacfg] item=gpu-check status=failed value=0" in result.err
    assert result.code == 138 and not marker.exists()


@pytest.mark.slow
def test_restarted_while_the_count_is_not_reached(tmp_path):
    """ha-configuration.txt: "If the number of job restarts does not reach the specified time, the job will be automatically issued again."

    restart.max 2: attempts 1 and 2 are started again, the third failure is not.
    """
    run = agent_run(tmp_path, "{max: 2}", KILLED)
    assert run.attempts == [(1, 0), (2, 1), (3, 2)] and run.code == 138


@pytest.mark.slow
def test_restarted_job_that_fails_logs_error_exiting(tmp_path):
    """ha-configuration.txt: "You can search for keywords error,exiting to obtain the logs recording a restarted job that ends with a failure."

    Three unconditional restarts, then the agent gives up: the job ends. (An exit 138 hands the job
    to the platform to retry elsewhere, so it has not ended yet.)
    """
    run = agent_run(tmp_path, "{max: 5, unconditional: true}", USER_ERROR)
    assert run.code == 1 and "error,exiting" in run.err


@pytest.mark.slow
def test_restart_count_and_maximum_are_shown(tmp_path, cli):
    """ha-configuration.txt: "Restarts displays the current number of restart times and the maximum number of restart times." """
    run = agent_run(tmp_path, "{max: 2}", KILLED)
    assert [(e["restarts"], e["max_restarts"]) for e in run.events if e["event"] == "decision"] == [
        (1, 2),
        (2, 2),
        (2, 2),
    ]
    assert "2/2" in cli("events", tmp_path / "state" / "events.jsonl").out


# --- ha-scenarios.txt: Table 1 ------------------------------------------------------------------


def test_single_node_is_one_node():
    """ha-scenarios.txt: "Suitable for single-node single-PU and single-node multi-PU training." """
    assert preset("single-node").job.nodes == 1


def test_single_node_resumable_training_recommended():
    """ha-scenarios.txt: "Resumable training	Recommended" """
    checkpoint = preset("single-node").checkpoint
    assert checkpoint.path and checkpoint.resume


def test_single_node_auto_restart_recommended():
    """ha-scenarios.txt: "Auto restart	Recommended"

    Single-node (and multi-node): auto restart is on, with Table 4's budget.
    """
    assert preset("single-node").restart.max == 2 and preset("multi-node").restart.max == 3


def test_single_node_suspension_detection_optional(cli, write):
    """ha-scenarios.txt: "Job suspension detection	Optional"

    A single-node job may turn detection off without a finding.
    """
    stated = "checkpoint: {path: obs://b/ckpt, resume: true}\n"
    assert not findings(cli, write("ha.yaml", f"version: 1\nscenario: single-node\n{stated}hang: {{detect: false}}\n"), keys=WHAT_WHERE)


def test_single_node_restart_upon_suspension_optional(cli):
    """ha-scenarios.txt: "Restart upon suspension	Optional"

    The single-node preset leaves restart upon suspension off, and the linter does not ask for it.
    """
    assert not preset("single-node").restart.on_hang
    assert not findings(cli, available_presets()["single-node"], keys=WHAT_WHERE)


def test_single_node_operator_re_execution_not_needed():
    """ha-scenarios.txt: "Operator re-execution	Usually not needed" """
    assert not preset("single-node").operator_retry


def test_single_node_failure_log_analysis(cli):
    """ha-scenarios.txt: "Troubleshoot issues via failure log analysis after job failure."

    `hacfg diagnose` on a real single-node log points at the user's exception.
    """
    result = cli("diagnose", "--config", "single-node", LOGS / "python-traceback.log")
    assert result.code == 1 and "user error" in result.out and "KeyError: 'labels'" in result.out


def test_multi_node_is_distributed():
    """ha-scenarios.txt: "Suitable for distributed training and large-scale GPU/NPU training." """
    config = preset("multi-node")
    assert config.job.nodes >= 2 and config.job.accelerator in ("gpu", "npu")


def test_resumable_training_required(cli, write):
    """ha-scenarios.txt: "Resumable training	Required"

    The multi-node and LLM presets resume from a checkpoint path; auto restart without one is an error.
    """
    for name in ("multi-node", "llm-long-term"):
        assert preset(name).checkpoint.path and preset(name).checkpoint.resume
        assert ("HA001", "checkpoint", "error") in findings(
            cli, write(f"{name}.yaml", f"version: 1\nscenario: {name}\ncheckpoint: {{path: null}}\n"), keys=WHAT_WHERE
        )


def test_multi_node_reliable_shared_storage(cli, write):
    """ha-scenarios.txt: "Save checkpoints in reliable shared storage."

    Local storage is a warning on one node and an error on many.
    """
    assert ("HA002", "checkpoint.path", "warning") in findings(
        cli, write("a.yaml", "version: 1\nscenario: single-node\ncheckpoint: {path: /tmp/c}\n"), keys=WHAT_WHERE
    )
    assert ("HA002", "checkpoint.path", "error") in findings(
        cli, write("b.yaml", "version: 1\nscenario: multi-node\ncheckpoint: {path: /tmp/c}\n"), keys=WHAT_WHERE
    )


@pytest.mark.slow
def test_re_entrant_scripts_are_launched_again(tmp_path):
    """ha-scenarios.txt: "Ensure training scripts support repeated launches (i.e., re-entrancy capability)."

    The same command runs again in place, told which attempt it is.
    """
    run = agent_run(tmp_path, "{max: 2}", KILLED)
    assert [a for a, _ in run.attempts] == [1, 2, 3]


def test_unconditional_auto_restart_recommended():
    """ha-scenarios.txt: "Unconditional auto restart	Recommended" """
    assert preset("multi-node").restart.unconditional and preset("llm-long-term").restart.unconditional


def test_multi_node_suspension_detection_recommended():
    """ha-scenarios.txt: "Job suspension detection	Recommended" """
    assert preset("multi-node").hang.detect


def test_restart_upon_suspension_recommended():
    """ha-scenarios.txt: "Restart upon suspension	Recommended" """
    assert preset("multi-node").restart.on_hang and preset("llm-long-term").restart.on_hang


def test_pod_rescheduling_depends_on_the_pool(cli, write):
    """ha-scenarios.txt: "Pod-level rescheduling	Based on resource pool capabilities"

    The multi-node preset does not assume it; a pool that has it sets restart.pod_reschedules.
    """
    assert preset("multi-node").restart.pod_reschedules == 0
    job, _ = built(cli, write, "version: 1\nscenario: multi-node\nrestart: {pod_reschedules: 2}\n")
    assert job["metadata"]["annotations"][ma.POD_RETRY_NUM] == "2"


def test_isolated_rescheduling_has_no_invented_key(cli):
    """ha-scenarios.txt: "Isolated job-level rescheduling	Based on resource pool capabilities"

    It has no annotation on the platform, so no preset emits one: only the five known keys ever appear.
    """
    for name in available_presets():
        assert set(annotations(cli, name)) <= set(ma.FAULT_TOLERANCE_KEYS)


def test_llm_long_term_scale():
    """ha-scenarios.txt: "Suitable for tasks with long durations and large resource scales, such as LLM pre-training, fine-tuning, and reinforcement learning." """
    assert preset("llm-long-term").job.nodes >= 8


def test_llm_periodic_checkpoints(cli, write):
    """ha-scenarios.txt: "Periodically save training states including models, optimizers, learning rate schedulers, and random states."

    The preset saves every 30 minutes; a long run saving less often than every 2 hours, or not saying, is warned (HA011).
    """
    assert preset("llm-long-term").checkpoint.interval == timedelta(minutes=30)
    assert ("HA011", "checkpoint.interval", "warning") in findings(
        cli, write("a.yaml", "version: 1\nscenario: llm-long-term\ncheckpoint: {interval: 3h}\n"), keys=WHAT_WHERE
    )


@pytest.mark.slow
def test_llm_recovers_from_the_newest_valid_checkpoint(tmp_path):
    """ha-scenarios.txt: "Support automatic recovery from the most recent valid checkpoint."

    After a fault the attempt resumes from the newest complete checkpoint, never a partial newer one.
    """
    ckpt = tmp_path / "ckpt"
    (ckpt / "checkpoint-100").mkdir(parents=True)
    (ckpt / "checkpoint-100" / "trainer_state.json").write_text("{}")
    (ckpt / "checkpoint-200").mkdir()  # partial: no trainer_state.json
    seen = tmp_path / "resumed"
    agent_run(tmp_path, "{max: 1}", f'echo "$HACFG_RESUME_FROM" >> {seen}; {KILLED}', "--checkpoint-path", str(ckpt))
    assert seen.read_text().splitlines() == [str(ckpt / "checkpoint-100")] * 2


def test_llm_auto_restart_required(cli, write):
    """ha-scenarios.txt: "Auto restart	Required"

    An LLM long-term scenario with auto restart off gets a finding on restart.max.
    """
    path = write(
        "a.yaml",
        "version: 1\nscenario: llm-long-term\nrestart: {max: 0, unconditional: false, on_hang: false, pod_reschedules: 0}\n",
    )
    assert any(rule_path == "restart.max" for _, rule_path, _ in findings(cli, path, keys=WHAT_WHERE))


def test_llm_suspension_detection_recommended():
    """ha-scenarios.txt: "Suspension detection	Recommended" """
    assert preset("llm-long-term").hang.detect


def test_llm_operator_re_execution_on_ascend_supernodes(cli, write):
    """ha-scenarios.txt: "Operator re-execution	Recommended for specific Ascend supernode scenarios"

    Off in the preset (its accelerator is not known to be Ascend); on an NPU job it is emitted.
    """
    assert not preset("llm-long-term").operator_retry
    job, _ = built(cli, write, "version: 1\nscenario: llm-long-term\njob: {accelerator: npu}\noperator_retry: true\n")
    assert job["metadata"]["annotations"][ma.HCCL_OP_RETRY] == "true"


def test_llm_log_failure_analysis(cli):
    """ha-scenarios.txt: "Log failure analysis	Recommended"

    `hacfg diagnose --config llm-long-term` applies the LLM budget to a real OOM-killed job's log.
    """
    result = cli("diagnose", "-f", "json", "--config", "llm-long-term", LOGS / "modelarts-exit-137.log")
    [report] = json.loads(result.out)
    assert [d["action"] for d in report["decisions"]] == ["proc_restart"] * 5 + ["pod_reschedule"]


# --- reference notes (modelarts.md) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "name", "value", "bad"),
    [
        pytest.param(100, 2, 1, False, id="100 pairs"),
        pytest.param(101, 2, 1, True, id="101 pairs"),
        pytest.param(1, 8192, 1, False, id="name 8192"),
        pytest.param(1, 8193, 1, True, id="name 8193"),
        pytest.param(1, 2, 4096, False, id="value 4096"),
        pytest.param(1, 2, 4097, True, id="value 4097"),
    ],
)
def test_environment_limits(cli, tmp_path, count, name, value, bad):
    """modelarts.md: "At most 100 pairs; key ≤ 8,192 characters, value ≤ 4,096 characters."

    In a request body, at each limit and one over it.
    """
    environments = {f"V{i}".ljust(name, "X"): "v" * value for i in range(count)}
    request = tmp_path / "job.json"
    request.write_text(body({ma.JOB_RETRY_NUM: "1"}, environments))
    rules = {rule for rule, _, _ in findings(cli, request, keys=WHAT_WHERE)}
    assert "HA100" not in rules and ("HA013" in rules) == bad


def test_environment_no_dollar(cli, tmp_path):
    """modelarts.md: "**No `$`** in variables" """
    request = tmp_path / "job.json"
    request.write_text(body({}, {"DATA": "$HOME/data"}))
    assert ("HA013", "algorithm.environments.DATA", "error") in findings(cli, request, keys=WHAT_WHERE)


def test_environment_names(cli, tmp_path):
    """modelarts.md: "The name uses letters, digits and `_`, and starts with a letter or `_`." """
    for name, bad in (("_A1", False), ("a_b", False), ("1A", True), ("A-B", True)):
        request = tmp_path / "job.json"
        request.write_text(body({}, {name: "x"}))
        assert any(rule == "HA013" for rule, _, _ in findings(cli, request, keys=WHAT_WHERE)) == bad, name


def test_otc_allows_1_to_3_restarts(cli, write, tmp_path):
    """modelarts.md: "OTC: 1–3 (also the OTC console: "1 to 3, cannot be changed")."

    A scenario for OTC builds with 3 and is refused at 4; a request body with "4" is HA006 on OTC only.
    """
    built(cli, write, "version: 1\nscenario: single-node\nplatform: otc\nrestart: {max: 3}\n")
    assert (
        cli("build", write("otc.yaml", "version: 1\nscenario: single-node\nplatform: otc\nrestart: {max: 4}\n")).code
        == 2
    )
    request = tmp_path / "job.json"
    request.write_text(body({ma.JOB_RETRY_NUM: "4"}))
    assert any(rule == "HA006" for rule, _, _ in findings(cli, request, "--platform", "otc", keys=WHAT_WHERE))
    assert not any(rule == "HA006" for rule, _, _ in findings(cli, request, "--platform", "huaweicloud", keys=WHAT_WHERE))


def test_job_name(cli, tmp_path):
    """modelarts.md: "`name`: required string, 1–64 characters, only `[A-Za-z0-9_-]`." """
    for name, bad in (("a" * 64, False), ("a-b_C9", False), ("a" * 65, True), ("", True), ("a b", True)):
        request = tmp_path / "job.json"
        request.write_text(body({}).replace('"job1"', json.dumps(name)))
        assert any(rule == "HA012" for rule, _, _ in findings(cli, request, keys=WHAT_WHERE)) == bad, name


def test_annotation_values_are_strings(cli, tmp_path):
    """modelarts.md: "**Every value is a string**, e.g. `"3"` and `"true"`."

    Numbers and booleans are HA007 errors in a request body; every preset builds strings only.
    """
    request = tmp_path / "job.json"
    request.write_text(body({ma.JOB_RETRY_NUM: 3, ma.HANG_RETRY: True}))
    assert {path for rule, path, _ in findings(cli, request, keys=WHAT_WHERE) if rule == "HA007"} == {
        f'metadata.annotations."{ma.JOB_RETRY_NUM}"',
        f'metadata.annotations."{ma.HANG_RETRY}"',
    }
    assert all(isinstance(value, str) for name in available_presets() for value in annotations(cli, name).values())


def test_hang_detect_time_default_30_minutes(cli, write):
    """modelarts.md: "Threshold: `MA_HANG_DETECT_TIME=30` (minutes) by default."

    hang.timeout defaults to 30m, which is the platform's own (no variable); other values are whole minutes, rounded up.
    """
    job, _ = built(cli, write, "version: 1\nscenario: single-node\n")
    assert ma.HANG_DETECT_TIME not in job["algorithm"].get("environments", {})
    assert Policy().hang_timeout == 30 * 60
    job, _ = built(cli, write, "version: 1\nscenario: single-node\nhang: {timeout: 45m}\n")
    assert job["algorithm"]["environments"][ma.HANG_DETECT_TIME] == "45"
    job, notes = built(cli, write, "version: 1\nscenario: single-node\nhang: {timeout: 90s}\n")
    assert job["algorithm"]["environments"][ma.HANG_DETECT_TIME] == "2" and "rounded up to 2m" in notes


def test_precheck_switch(cli, write):
    """modelarts.md: "`MA_DETECT_TRAIN_INJECT_CODE`: the pre-check switch, default `1` (on), `0` turns it off" """
    on, _ = built(cli, write, "version: 1\nscenario: single-node\n")
    off, _ = built(cli, write, "version: 1\nscenario: single-node\nprecheck: false\n")
    assert ma.PRECHECK_SWITCH not in on["algorithm"].get("environments", {})
    assert off["algorithm"]["environments"][ma.PRECHECK_SWITCH] == "0"


def test_retry_options_need_job_retry_num(cli, write):
    """modelarts.md: "`job-unconditional-retry` and `hang-retry` both depend on `job-retry-num` ≥ 1" """
    found = findings(
        cli,
        write("a.yaml", "version: 1\nscenario: single-node\nrestart: {max: 0, unconditional: true, on_hang: true}\n"),
        keys=WHAT_WHERE,
    )
    assert {("HA005", "restart.unconditional", "error"), ("HA005", "restart.on_hang", "error")} <= found


@pytest.mark.slow
def test_exit_137_is_an_environment_fault(tmp_path):
    """modelarts.md: "a clean OOM kill gives exit code 137, which triggers unconditional rescheduling."

    Exit 137 restarts without restart.unconditional: it is an environment fault.
    """
    run = agent_run(tmp_path, "{max: 1}", "exit 137")
    assert run.actions == ["proc_restart", "job_reschedule"]
    assert [e["cause"] for e in run.events if e["event"] == "attempt_exit"] == ["environment", "environment"]


# --- the quotes are the documents' own ----------------------------------------------------------


def _normalized(text: str) -> str:
    return " ".join(text.split())


def pinned() -> list[tuple[str, str, str]]:
    """(test, document, quote) for every test above."""
    module = sys.modules[__name__]
    found = []
    for name, function in inspect.getmembers(module, inspect.isfunction):
        if (
            name.startswith("test_")
            and function.__module__ == __name__
            and name != "test_every_quote_is_in_its_document"
        ):
            match = QUOTE.match(inspect.getdoc(function) or "")
            found.append((name, match["doc"] if match else "", match["quote"] if match else ""))
    return found


def test_every_quote_is_in_its_document():
    missing = [str(path) for path in DOCUMENTS.values() if not path.is_file()]
    if missing:
        pytest.skip(f"the platform's documents the quotes come from are missing: {', '.join(missing)}")
    texts = {name: _normalized(path.read_text()) for name, path in DOCUMENTS.items()}
    wrong = [
        f"{test}: the docstring must start with a document and a quoted sentence"
        if document not in texts
        else f"{test}: {quote!r} is not in {document}"
        for test, document, quote in pinned()
        if document not in texts or _normalized(quote) not in texts[document]
    ]
    assert not wrong, "\n".join(wrong)
