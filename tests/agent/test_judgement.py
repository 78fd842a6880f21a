"""Judgement by precedence of evidence, on the inputs users met: what the agent decides, and why.

How the process ended comes first, then the exception that ended the program, then the runtime's
error lines; INFO lines and echoed settings are never evidence. The platform's own rules (a signal
is an environment fault) hold without any plugin, and an agent without hacfg's own plugins
refuses to start rather than judge blind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kit.agents import agent_argv, read_events
from kit.packaging import distribution
from kit.paths import REPO

from hacfg.agent.classify import classify
from hacfg.plugin import manager as plugin_manager
from hacfg.plugin.recovery import Failure

CORPUS = REPO / "tests" / "data" / "failure-logs"
# What NCCL_DEBUG=INFO prints at start-up (NVIDIA/nccl#1510, huggingface/accelerate#2183), and a script's echo.
NCCL_INFO = "axon:5022:5089 [3] NCCL INFO NET/Socket : GPU Direct RDMA Disabled for HCA 0 'enp1s0f0'"
ECHOED = "export HCCL_CONNECT_TIMEOUT=1200"
NAME_ERROR = f"print({NCCL_INFO!r}); print({ECHOED!r}); undefined_learning_rate * 2"


def _scenario(tmp_path: Path, restart: str = "restart:\n  max: 2\n") -> Path:
    """The single-node preset (two restarts for environment faults), checkpoints in tmp_path."""
    scenario = tmp_path / "ha.yaml"
    scenario.write_text(
        "version: 1\nscenario: single-node\njob:\n  name: demo\n  accelerator: cpu\n"
        f"checkpoint:\n  path: {tmp_path / 'ckpt'}\n{restart}"
    )
    return scenario


def _supervise(tmp_path: Path, command: list[str], *options: str) -> subprocess.CompletedProcess:
    argv = [*agent_argv(tmp_path / "state", "--config", str(_scenario(tmp_path)), "--no-warm", *options), *command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)


def _tail(text: str) -> tuple[str, ...]:
    return tuple(text.splitlines())


@pytest.mark.slow
def test_a_user_bug_after_nccl_info_and_an_echoed_setting_is_the_users_and_is_not_restarted(tmp_path):
    result = _supervise(tmp_path, [sys.executable, "-c", NAME_ERROR])
    assert result.returncode == 1, result.stderr  # the command's own code: not 138, not a restart
    events = read_events(tmp_path / "state")
    [ended] = [e for e in events if e["event"] == "attempt_exit"]
    assert ended["cause"] == "user" and "NameError" in ended["reason"]
    assert ended["evidence"] == ["NameError: name 'undefined_learning_rate' is not defined"]
    assert any("INFO or debug" in why and "GPU Direct RDMA" in why for why in ended["not_counted"])
    assert any("echoed setting" in why and ECHOED in why for why in ended["not_counted"])
    assert [e["action"] for e in events if e["event"] == "decision"] == ["give_up"]


def test_info_lines_and_echoed_settings_are_never_evidence():
    for line in (NCCL_INFO, ECHOED, "+ export NCCL_DEBUG=INFO", "[I ProcessGroupNCCL.cpp:562] [Rank 0] Running"):
        verdict = classify(Failure(1, None, (line,)))
        assert (verdict.cause, verdict.evidence) == ("user", ()), line


@pytest.mark.slow
def test_deepspeeds_report_of_a_worker_killed_by_the_oom_killer_is_an_environment_fault(tmp_path):
    """DeepSpeed's launcher logs the worker's -9 and exits 247 (sys.exit(-9))."""
    log = CORPUS / "deepspeed-sigkill-3232.log"
    replay = f"import sys; sys.stderr.write(open({str(log)!r}).read()); sys.exit(-9)"
    result = _supervise(tmp_path, [sys.executable, "-c", replay], "--max-restarts", "1")
    events = read_events(tmp_path / "state")
    ended = [e for e in events if e["event"] == "attempt_exit"]
    assert ended[0]["exit_code"] == 247 and ended[0]["cause"] == "environment", ended[0]["reason"]
    assert "killed by SIGKILL" in ended[0]["reason"] and "exits with return code = -9" in ended[0]["evidence"][0]
    assert [e["action"] for e in events if e["event"] == "decision"] == ["proc_restart", "job_reschedule"]
    assert result.returncode == 138


def _replayed(tmp_path: Path, name: str, *options: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """The agent around a command that prints a corpus log and exits 1, as the job in the thread did."""
    replay = f"import sys; sys.stderr.write(open({str(CORPUS / name)!r}).read()); sys.exit(1)"
    result = _supervise(tmp_path, [sys.executable, "-c", replay], "--max-restarts", "3", *options)
    return result, read_events(tmp_path / "state")


@pytest.mark.slow
def test_a_gpu_fallen_off_the_bus_moves_the_job_at_once(tmp_path):
    """Restarting in place three times on a GPU the node can no longer reach only delays the move."""
    result, events = _replayed(tmp_path, "xid-79-surprise-down-gpu-burn-1.log")
    [ended] = [e for e in events if e["event"] == "attempt_exit"]
    assert (ended["cause"], ended["relocate"]) == ("environment", True) and "79, GPU has fallen off" in ended["evidence"][-1]
    [decision] = [e for e in events if e["event"] == "decision"]
    assert (decision["action"], decision["counted"], result.returncode) == ("job_reschedule", 0, 138), result.stderr
    assert decision["reason"] == "a fault no restart on this node can fix: retry elsewhere"


@pytest.mark.slow
def test_a_full_disk_is_named_and_not_restarted_on_the_same_storage(tmp_path):
    result, events = _replayed(tmp_path, "disk-full-torch-save-dolly-139.log", "--unconditional")
    [ended] = [e for e in events if e["event"] == "attempt_exit"]
    assert ended["cause"] == "disk_full" and "a full disk" in ended["reason"]
    [decision] = [e for e in events if e["event"] == "decision"]
    assert (decision["cause"], decision["action"], result.returncode) == ("disk_full", "give_up", 1)
    assert "free space on it (or raise its quota), then start the job again" in decision["reason"]
    assert "attempt 1 disk_full" in result.stderr and "free space on it" in result.stderr


def test_the_root_cause_is_cited_not_the_line_that_followed_it():
    """An Xid 64 (the page could not be retired) follows the Xid 48 (the double-bit error) it is about."""
    verdict = classify(Failure(1, None, _tail((CORPUS / "xid-48-then-64-gpu-operator-1146.log").read_text())))
    assert ": 48, " in verdict.evidence[-1] and verdict.relocate
    assert any("outranked by a fault of the machine itself" in why and ": 64, " in why for why in verdict.not_counted)
    remapped = (
        "NVRM: Xid (PCI:0000:07:00): 48, pid=1, name=python, An uncorrectable double bit error (DBE) has been detected",
        "NVRM: Xid (PCI:0000:07:00): 63, pid=1, name=python, Row Remapper: New row marked for remapping, reset gpu",
    )
    assert not classify(Failure(1, None, remapped)).relocate  # a remapped row: a restart here can go on


def test_nccls_chain_of_return_codes_is_evidence_where_other_info_lines_are_not():
    lines = _tail((CORPUS / "nccl-info-chain-fsdp-nccl-1000.log").read_text())
    verdict = classify(Failure(1, None, (NCCL_INFO, *lines)))
    assert verdict.cause == "environment" and verdict.evidence == (lines[0],)
    assert classify(Failure(1, None, (NCCL_INFO, "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] via P2P"))).cause == "user"


def test_a_dataloader_worker_the_oom_killer_took_is_judged_as_the_oom_killer_itself():
    worker = classify(Failure(1, None, _tail((CORPUS / "dataloader-worker-killed-dcpdn-12.log").read_text())))
    kernel = classify(Failure(None, 9, _tail((CORPUS / "oom-killer-dmesg-ert-7797.log").read_text())))
    assert worker.cause == kernel.cause == "environment" and "killed by SIGKILL" in worker.reason


def test_deepspeeds_minus_11_is_a_segfault():
    log = (CORPUS / "deepspeed-segfault-examples-626.log").read_text()
    verdict = classify(Failure(245, None, _tail(log)))
    assert verdict.cause == "environment" and "SIGSEGV" in verdict.reason


def test_cuda_out_of_memory_names_its_line(cli):
    log = CORPUS / "cuda-oom-one-2-3-45-25.log"
    result = cli("diagnose", "-f", "json", log)
    [report] = json.loads(result.out)
    assert report["cause"] == "user" and "out of accelerator memory" in report["reason"]
    assert [e["line"] for e in report["evidence"]] == [1]


def test_torchruns_root_cause_beats_the_workers_it_stopped(cli, tmp_path):
    """torchrun lists the worker it stopped with SIGTERM among its failures: the root cause is an exit 3."""
    log = tmp_path / "torchrun.log"
    log.write_text(
        "W1201 15:43:38.705000 11688 torch/distributed/elastic/multiprocessing/api.py:1028] "
        "Sending process 11738 closing signal SIGTERM\n"
        "E1201 15:43:38.713000 11688 torch/distributed/elastic/multiprocessing/api.py:1002] "
        "failed (exitcode: 3) local_rank: 0 (pid: 11737) of binary: /work/venv/bin/python\n"
        "Failures:\n[1]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : -15 (pid: 11738)  (SIGTERM)\n"
        "  traceback : Signal 15 (SIGTERM) received by PID 11738\n"
        "Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n"
        "  exitcode  : 3 (pid: 11737)\n  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
        "============================================================\n"
    )
    [report] = json.loads(cli("diagnose", "-f", "json", log).out)
    assert (report["cause"], report["exit_status"]["exit_code"], report["exit_status"]["signal"]) == ("user", 3, None)


def test_a_signal_is_an_environment_fault_without_any_plugin(monkeypatch):
    monkeypatch.setattr(plugin_manager, "_entry_points", lambda: iter(()))
    plugin_manager.reset()
    try:
        verdict = classify(Failure(None, 9, ()))
    finally:
        plugin_manager.reset()
    assert (verdict.cause, verdict.reason) == ("environment", "killed by SIGKILL")


@pytest.mark.slow
def test_an_agent_whose_own_plugins_do_not_load_refuses_to_start(tmp_path):
    """As when a checkout on PYTHONPATH shadows a non-editable install: hacfg's entry points name
    modules that cannot be imported."""
    site = tmp_path / "site"
    distribution(site, "hacfg", {"prechecks": "hacfg.plugins.prechecks_gone", "rules-job": "hacfg.plugins.rules.job"})
    ran = tmp_path / "ran"
    argv = [*agent_argv(tmp_path / "state", "--max-restarts", "2"), "sh", "-c", f"touch {ran}; kill -9 $$"]
    env = {**os.environ, "PYTHONPATH": f"{site}:{REPO}"}
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "prechecks" in result.stderr and "No module named 'hacfg.plugins.prechecks_gone'" in result.stderr
    assert not ran.exists()  # nothing was judged blind


@pytest.mark.slow
def test_a_failure_seen_only_as_another_ranks_consequence_counts_once(tmp_path):
    """Alone, a lost peer is still a failed job: one environment fault, as the platform counts it."""
    command = [sys.executable, "-c", "import sys; sys.exit('RuntimeError: Connection reset by peer')"]
    result = _supervise(tmp_path, command, "--max-restarts", "1")
    events = read_events(tmp_path / "state")
    [first, *_] = [e for e in events if e["event"] == "decision"]
    assert (first["cause"], first["action"], first["counted"]) == ("environment", "proc_restart", 1)
    assert result.returncode == 138



@pytest.mark.slow
def test_torchruns_start_up_warning_is_no_sign_of_life(tmp_path):
    """torchrun prints its OMP_NUM_THREADS banner at once; its workers take 3 s to say anything. The
    initial hang timeout covers them until then; hang.timeout (2 s) only once they have spoken."""
    script = tmp_path / "train.py"
    script.write_text("import time\ntime.sleep(3)\nprint('step 1', flush=True)\ntime.sleep(600)\n")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script)]
    result = _supervise(tmp_path, torchrun, "--hang-timeout", "2s", "--initial-hang-timeout", "120s", "--grace", "1")
    assert "Setting OMP_NUM_THREADS" in result.stderr  # the banner was there, and did not end the start-up:
    assert "step 1" in result.stdout  # the workers were not judged hung 2 s after it, before they could speak
    events = [e for e in read_events(tmp_path / "state") if e["event"] in ("first_activity", "hang")]
    assert [e["event"] for e in events] == ["first_activity", "hang"], result.stderr
    assert events[0]["after"] >= 3  # the workers' first line, not the launcher's
    assert events[1]["timeout"] == 2  # hung after the training spoke, not during its start-up


def test_hccls_roce_completion_error_is_a_peers_or_the_networks_and_canns_advice_is_no_evidence():
    """EI0013 (a RoCE CQE error, CANN's HCCL error list) found no public log; in the layout HCCL prints its
    codes, it is another rank's failure or the network's. The advice CANN prints under a code names
    timeouts and peers whatever happened, and decides nothing."""
    roce = "EI0013: [PID: 1234] 2025-01-01-00:00:00.000.000 RoCE CQE error occurred. Reason: the remote rank: [3] link failed."
    verdict = classify(Failure(1, None, ("RuntimeError: HCCL error in: hccl_comm.cc:71", roce)))
    assert (verdict.cause, verdict.peer) == ("environment", True) and "remote rank 3" in verdict.reason, verdict
    advice = "        Possible Cause: 1. The number of training samples of each NPU is inconsistent (HCCL_EXEC_TIMEOUT)."
    assert classify(Failure(1, None, (advice,))).evidence == ()
