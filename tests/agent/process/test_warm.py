"""Warm restarts: an attempt forked from a warm interpreter behaves as a cold start, only sooner.

The matrix runs the same probe under ``hacfg agent`` twice, ``--no-warm`` and warm: attempt 1
kills itself (once the warm interpreter is ready, in the warm run), attempt 2 records what it can
see of how it was started and ends as the case says; everything but random draws must match.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kit.paths import REPO
from kit.processes import end, left_running

from hacfg.agent.process import warm_server
from hacfg.agent.process.warm import Entry, interpreter_env, python_entry

PROBES = REPO / "tests" / "children" / "warm"
PY = sys.executable


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ([PY, "train.py", "--lr", "1"], Entry(PY, (), "train.py", None, ("--lr", "1"))),
        ([PY, "-u", "-X", "dev", "-Wignore", "train.py"], Entry(PY, ("-u", "-X", "dev", "-Wignore"), "train.py", None, ())),
        ([PY, "-um", "pkg.train", "-x"], Entry(PY, ("-u",), None, "pkg.train", ("-x",))),
        ([PY, "-m", "torch.distributed.run", "train.py"], "torch.distributed.run starts its workers itself"),
        ([PY, "-c", "print(1)"], "python -c cannot start warm"),
        ([PY, "-i", "train.py"], "python -i cannot start warm"),
        ([PY, "-"], "python reads its program from stdin"),
        ([PY, "missing.py"], "missing.py is not a script file"),
        (["/bin/sh", "-c", "true"], "/bin/sh is not a Python interpreter"),
        (["no-such-command"], "the command is not found"),
    ],
)
def test_which_commands_can_start_warm(tmp_path, monkeypatch, command, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    assert python_entry(command, os.environ.get("PATH")) == expected


def test_the_warm_interpreter_never_sees_the_attempts_variables():
    attempt = {"HACFG_RESUME_FROM": "/ckpt/step_4", "HACFG_ATTEMPT": "2", "TORCHELASTIC_RESTART_COUNT": "1"}
    assert interpreter_env({"PATH": "/bin", **attempt}) == {"PATH": "/bin"}


def test_it_preloads_the_scripts_top_level_imports_that_are_installed_never_its_own_modules(tmp_path):
    (tmp_path / "mine.py").write_text("")
    script = tmp_path / "train.py"
    script.write_text(
        "from __future__ import annotations\nimport json, mine\nfrom os import path\nfrom . import sibling\n"
        "try:\n    import no_such_package_here\nexcept ImportError:\n    pass\n"
        "def later():\n    import sqlite3\n"
    )
    names = warm_server._imports_of({"script": str(script), "module": None})
    assert names == ["json", "mine", "os", "no_such_package_here"]
    assert warm_server._installed(names, str(tmp_path)) == (["json", "os"], ["mine", "no_such_package_here"])


def run(tmp_path: Path, ending: str, *options: str, warm: bool, env: dict | None = None, module: bool = False):
    """One agent run of the probe (``python -m probe`` from the working directory with ``module``);
    returns the agent's process, attempt 2's record and events."""
    probe = [str(PROBES / "probe.py")]
    if module:
        for name in ("probe.py", "helper.py"):
            shutil.copy(PROBES / name, tmp_path / name)
        probe = ["-m", "probe"]
    state = tmp_path / "state"
    subprocess.run(["rm", "-rf", str(state)], check=True)
    records = tmp_path / "records"
    records.mkdir(exist_ok=True)
    (records / "attempt-2.json").unlink(missing_ok=True)
    wait = records / "wait-for-warm"
    wait.touch() if warm else wait.unlink(missing_ok=True)
    argv = [PY, "-m", "hacfg", "agent", "--state-dir", str(state), "--no-precheck", "--max-restarts", "1", "--unconditional",
            "--grace", "2", *(() if warm else ("--no-warm",)), *options, "--", PY, *probe, str(records), ending]
    proc = subprocess.run(argv, input="typed on stdin\n", capture_output=True, text=True, timeout=180, cwd=tmp_path,
                          env={**os.environ, "PROBE_STATE": str(state), **(env or {})})
    found = [json.loads(line) for line in (state / "events.jsonl").read_text().splitlines()]
    record_file = records / "attempt-2.json"
    return proc, json.loads(record_file.read_text()) if record_file.exists() else None, found


def attempt_events(found: list[dict], kind: str) -> list[dict]:
    return [e for e in found if e["event"] == kind]


def comparable_output(text: str) -> list[str]:
    """The attempts' own lines, addresses and the warm interpreter's frames taken out."""
    lines = [re.sub(r"0x[0-9a-f]+", "0x?", line) for line in text.splitlines() if not line.startswith("[hacfg]")]
    return [line for line in lines if "warm_server.py" not in line and '"<string>"' not in line]


DIFFERENT = ("random", "hash", "numpy", "ppid")  # fresh per process, as in any two cold starts


@pytest.mark.slow
@pytest.mark.parametrize(
    ("ending", "module"),
    [(ending, False) for ending in ("success", "exit3", "exception", "interrupt", "sigkill", "sigsegv")]
    + [("success", True), ("exception", True)],
    ids=["success", "exit3", "exception", "interrupt", "sigkill", "sigsegv", "module-success", "module-exception"],
)
def test_a_warm_attempt_is_observably_a_cold_one(tmp_path, ending, module):
    cold, cold_record, cold_events = run(tmp_path, ending, warm=False, module=module)
    warm, warm_record, warm_events = run(tmp_path, ending, warm=True, module=module)
    starts = [(e["start"], e["start_reason"]) for e in attempt_events(warm_events, "attempt_start")]
    assert [how for how, _ in starts] == ["cold", "warm"], starts
    assert "imported" in starts[1][1] and "helper" not in starts[1][1]
    assert [e["start_reason"] for e in attempt_events(cold_events, "attempt_start")] == ["warm restarts are off"] * 2
    assert cold_record is not None and warm_record is not None
    for key in DIFFERENT:
        assert (key, cold_record.pop(key)) != (key, warm_record.pop(key))
    # what the warm interpreter imported is frozen out of the collector's way; the attempt's own garbage is not
    assert (cold_record.pop("frozen"), warm_record.pop("frozen")) == (False, True)
    assert warm_record["collects"] and cold_record["collects"]
    # threads an import started (OpenBLAS's pool) do not survive a fork; their library restarts them
    assert int(warm_record["proc"].pop("Threads")) <= int(cold_record["proc"].pop("Threads"))
    # each agent makes its own memory tier, under a name nobody can guess
    assert cold_record["env"].pop("HACFG_MEMORY_DIR") != warm_record["env"].pop("HACFG_MEMORY_DIR")
    assert warm_record == cold_record
    assert warm_record["stdin"] == "typed on stdin\n" and warm_record["pools"] == [49, 49, 49]
    assert warm_record["session"] == [True, True] and warm_record["main_thread"]
    assert warm.returncode == cold.returncode
    assert comparable_output(warm.stdout) == comparable_output(cold.stdout)
    assert comparable_output(warm.stderr) == comparable_output(cold.stderr)
    keys = ("exit_code", "signal", "cause", "reason", "classifier")
    assert [{k: e.get(k) for k in keys} for e in attempt_events(warm_events, "attempt_exit")] == \
        [{k: e.get(k) for k in keys} for e in attempt_events(cold_events, "attempt_exit")]
    assert_no_process_left(tmp_path)


@pytest.mark.slow
def test_expected_endings_reach_the_agent(tmp_path):
    """The matrix compares warm with cold; this pins down what both must be, for two of the cases."""
    proc, _, found = run(tmp_path, "exception", warm=True)
    assert proc.returncode == 1
    assert 'File "' + str(PROBES / "probe.py") + '", line' in proc.stderr and "ValueError: the probe failed on purpose" in proc.stderr
    assert "warm_server" not in proc.stderr
    assert "atexit handler ran" in proc.stdout and "thread finished after the main one" in proc.stdout
    assert proc.stdout.count("helper imported") >= 2  # each attempt imports the script's own module itself
    assert [e["exit_code"] for e in attempt_events(found, "attempt_exit")] == [None, 1]


def assert_no_process_left(tmp_path: Path) -> None:
    assert not (left := left_running(tmp_path)), f"processes left: {left}"


def test_no_warm_start_when_the_import_initialised_an_accelerator(tmp_path):
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("class cuda:\n    is_initialized = staticmethod(lambda: True)\n")
    script = tmp_path / "train.py"
    script.write_text("import os, torch\nos.kill(os.getpid(), 9) if os.environ['HACFG_ATTEMPT'] == '1' else None\n")
    _, _, found = run_script(tmp_path, script, env={"PYTHONPATH": str(tmp_path / "site")})
    assert [e["start"] for e in attempt_events(found, "attempt_start")] == ["cold", "cold"]
    reason = attempt_events(found, "attempt_start")[1]["start_reason"]
    assert reason == "the warm interpreter cannot serve: torch.cuda was initialised at import", reason


def test_an_import_that_fails_in_the_warm_interpreter_means_a_cold_start(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import os\nos.kill(os.getpid(), 9) if os.environ['HACFG_ATTEMPT'] == '1' else None\n")
    _, _, found = run_script(tmp_path, script, "--preload", "json,no_such_module_anywhere")
    reason = attempt_events(found, "attempt_start")[1]["start_reason"]
    assert reason.startswith("the warm interpreter cannot serve: importing no_such_module_anywhere failed: ModuleNotFoundError"), reason
    assert "cannot serve" in (tmp_path / "state" / "warm.log").read_text()


FIND_THE_WARM_INTERPRETER = """\
def is_the_agents_warm_interpreter(proc, agent):
    try:  # any other process may exit while /proc is walked
        return b'warm_server' in (proc / 'cmdline').read_bytes() and (proc / 'stat').read_text().rsplit(')', 1)[1].split()[1] == agent
    except OSError:
        return False
"""
SIGNAL_THE_WARM_INTERPRETER = """\
import os, signal, time
from pathlib import Path
""" + FIND_THE_WARM_INTERPRETER + """\
if os.environ['HACFG_ATTEMPT'] == '1':
    agent = str(os.getppid())
    [warm] = [int(p.name) for p in Path('/proc').iterdir() if p.name.isdigit() and is_the_agents_warm_interpreter(p, agent)]
    os.kill(warm, signal.{signal})
    while (Path('/proc') / str(warm) / 'stat').read_text().rsplit(')', 1)[1].split()[0] != '{state}':
        time.sleep(0.01)
    os.kill(os.getpid(), 9)
"""


@pytest.mark.parametrize(
    ("signal", "state", "reason"),
    [
        ("SIGKILL", "Z", "the warm interpreter exited (signal SIGKILL)"),
        pytest.param("SIGSTOP", "T", "the warm interpreter failed to fork: no answer in 5s", marks=pytest.mark.slow),
    ],
)
def test_a_warm_interpreter_killed_or_stopped_means_a_cold_start_that_says_so(tmp_path, signal, state, reason):
    script = tmp_path / "train.py"
    script.write_text(SIGNAL_THE_WARM_INTERPRETER.format(signal=signal, state=state))
    proc, _, found = run_script(tmp_path, script)
    assert proc.returncode == 0, proc.stderr
    starts = attempt_events(found, "attempt_start")
    assert [(e["start"], e["start_reason"]) for e in starts[1:]] == [("cold", reason)]


def test_a_command_that_is_not_python_starts_cold_and_says_why(tmp_path):
    state = tmp_path / "state"
    subprocess.run([PY, "-m", "hacfg", "agent", "--state-dir", str(state), "--no-precheck", "--", "/bin/sh", "-c", "exit 0"],
                   capture_output=True, timeout=60, check=True)
    start = attempt_events([json.loads(line) for line in (state / "events.jsonl").read_text().splitlines()], "attempt_start")[0]
    assert (start["start"], start["start_reason"]) == ("cold", "/bin/sh is not a Python interpreter")


def run_script(tmp_path: Path, script: Path, *options: str, env: dict | None = None):
    """Attempt 1 of ``script`` runs long enough for the warm interpreter to be ready or to fail."""
    state = tmp_path / "state"
    argv = [PY, "-m", "hacfg", "agent", "--state-dir", str(state), "--no-precheck", "--max-restarts", "1", *options,
            "--", PY, str(script)]
    body = script.read_text()
    script.write_text(
        "import os, time\nif os.environ['HACFG_ATTEMPT'] == '1':\n"
        f"    while not os.path.exists({str(state / 'warm.log')!r}) or 'warm interpreter' not in open({str(state / 'warm.log')!r}).read():\n"
        "        time.sleep(0.02)\n" + body
    )
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path, env={**os.environ, **(env or {})})
    return proc, None, [json.loads(line) for line in (state / "events.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.torch
# unset, and a device this machine does not have: the variable reaches the attempt as it was, and
# nothing initialises an accelerator ("" takes the same path as "0")
@pytest.mark.parametrize("cuda", [None, "0"], ids=["cuda-unset", "fake-device"])
def test_torch_warm_matches_cold_and_no_accelerator_is_initialised(tmp_path, cuda):
    pytest.importorskip("torch")
    state, records = tmp_path / "state", tmp_path / "records"
    records.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "CUDA_VISIBLE_DEVICES"}
    if cuda is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda
    argv = [PY, "-m", "hacfg", "agent", "--state-dir", str(state), "--no-precheck", "--max-restarts", "1",
            "--", PY, str(PROBES / "torch_probe.py"), str(records)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = [json.loads(line) for line in (state / "events.jsonl").read_text().splitlines()]
    assert [e["start"] for e in attempt_events(found, "attempt_start")] == ["cold", "warm"]
    assert "torch" in attempt_events(found, "attempt_start")[1]["start_reason"]
    cold, warm = (json.loads((records / f"attempt-{n}.json").read_text()) for n in (1, 2))
    cold_draws, warm_draws = cold.pop("draws"), warm.pop("draws")
    # the first optimizer step imports torch._dynamo: a warm interpreter that imports torch imports it too
    assert (cold.pop("dynamo_at_start"), warm.pop("dynamo_at_start")) == (False, True)
    assert "torch._dynamo" in attempt_events(found, "attempt_start")[1]["start_reason"]
    assert warm == cold and warm["stepped"] == [0.5, 0.5]
    assert warm["cuda_initialized_at_start"] is False and warm["cuda_visible_devices"] == cuda
    assert warm["fork"] == warm["spawn"] == [[0, 1, 4, 9], [16, 25, 36, 49]]
    for source in ("torch", "seed", "numpy", "workers"):
        assert warm_draws[source] != cold_draws[source], source  # fresh random state, as two cold starts have
    assert_no_process_left(tmp_path)


@pytest.mark.slow
def test_an_agent_killed_by_sigkill_takes_its_warm_attempt_and_warm_interpreter_with_it(tmp_path):
    state = tmp_path / "state"
    log = state / "warm.log"
    script = tmp_path / "train.py"
    script.write_text(
        "import os, time\nfrom pathlib import Path\n"
        f"log = Path({str(log)!r})\n"
        "while log.read_text().count(' ready:') < int(os.environ['HACFG_ATTEMPT']) if log.exists() else True:\n"
        "    time.sleep(0.02)\n"
        "print('attempt', os.environ['HACFG_ATTEMPT'], 'trains', flush=True)\n"
        "os.kill(os.getpid(), 9) if os.environ['HACFG_ATTEMPT'] == '1' else time.sleep(600)\n"
    )
    argv = [PY, "-m", "hacfg", "agent", "--state-dir", str(state), "--no-precheck", "--max-restarts", "1", "--", PY, str(script)]
    agent = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path)
    try:
        assert agent.stdout is not None
        assert agent.stdout.readline().split() == ["attempt", "1", "trains"]
        assert agent.stdout.readline().split() == ["attempt", "2", "trains"]  # forked warm, and a third interpreter is ready
        starts = [json.loads(line) for line in (state / "events.jsonl").read_text().splitlines() if '"attempt_start"' in line]
        assert [e["start"] for e in starts] == ["cold", "warm"]
    finally:
        end(agent)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            assert_no_process_left(tmp_path)
            break
        except AssertionError:
            time.sleep(0.05)
    assert_no_process_left(tmp_path)


SECRET = "the job's group secret, forty characters"
SEES = (  # what the attempt and a process it starts can read of their environment
    "import os, subprocess, sys\n"
    "attempt = os.environ['HACFG_ATTEMPT']\n"
    "child = [sys.executable, '-c', 'import sys; sys.stdout.buffer.write(open(\"/proc/self/environ\", \"rb\").read())']\n"
    "seen = open(f'/proc/{os.getpid()}/environ', 'rb').read() + repr(dict(os.environ)).encode()\n"
    "seen += subprocess.run(child, capture_output=True, check=True).stdout\n"
    "open(f'seen-{attempt}', 'wb').write(seen)\n"
    "os.kill(os.getpid(), 9) if attempt == '1' else None\n"
)


@pytest.mark.slow
def test_the_group_secret_reaches_neither_a_cold_nor_a_warm_attempt_nor_what_they_start(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SEES)
    _, _, found = run_script(tmp_path, script, env={"HACFG_GROUP_SECRET": SECRET})
    assert [e["start"] for e in attempt_events(found, "attempt_start")] == ["cold", "warm"]
    for attempt in ("1", "2"):
        seen = (tmp_path / f"seen-{attempt}").read_bytes()
        assert b"HACFG_RESUME_FROM" in seen  # the attempt's own variables are there
        assert SECRET.encode() not in seen and b"HACFG_GROUP_SECRET" not in seen


@pytest.mark.slow
def test_a_preloaded_module_changed_during_the_attempt_starts_the_next_cold_with_todays_code(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    hotfix = site / "hotfix.py"
    hotfix.write_text("VALUE = 'yesterday'\n")
    script = tmp_path / "train.py"
    script.write_text(
        "import os, hotfix\nprint('running', hotfix.VALUE, flush=True)\n"
        "if os.environ['HACFG_ATTEMPT'] == '1':\n"
        f"    open({str(hotfix)!r}, 'w').write(\"VALUE = 'the fix of today'\\n\")\n"
        "    os.kill(os.getpid(), 9)\n"
    )
    proc, _, found = run_script(tmp_path, script, env={"PYTHONPATH": str(site)})
    starts = attempt_events(found, "attempt_start")
    assert [(e["start"], e["start_reason"]) for e in starts][1] == (
        "cold", f"{hotfix} changed on disk since the warm interpreter imported it")
    assert re.findall(r"running (.*)", proc.stdout) == ["yesterday", "the fix of today"]


@pytest.mark.slow
def test_a_library_reading_sys_argv_at_import_sees_the_attempts(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "reads_argv.py").write_text("import sys\nAT_IMPORT = (list(sys.argv), list(sys.orig_argv))\n")
    script = tmp_path / "train.py"
    script.write_text(
        "import os, reads_argv\nprint('argv', reads_argv.AT_IMPORT, flush=True)\n"
        "os.kill(os.getpid(), 9) if os.environ['HACFG_ATTEMPT'] == '1' else None\n"
    )
    proc, _, found = run_script(tmp_path, script, env={"PYTHONPATH": str(site)})
    assert [e["start"] for e in attempt_events(found, "attempt_start")] == ["cold", "warm"]
    cold, warm = re.findall(r"argv (.*)", proc.stdout)
    assert warm == cold == repr(([str(script)], [PY, str(script)]))


HUGE = """\
import os, signal, sys, torch
state = torch.ones(64 << 18)  # 64 MB
rollup = open("/proc/self/smaps_rollup").read()
huge = next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("AnonHugePages:"))
print(f"attempt {os.environ['HACFG_ATTEMPT']} {os.environ.get('THP_MEM_ALLOC_ENABLE')} {huge}", file=sys.stderr)
if os.environ["HACFG_ATTEMPT"] == "1":
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("asked", [None, "0"], ids=["by-default", "job-says-no"])
def test_a_ranks_large_buffers_get_huge_pages_cold_and_warm_unless_the_job_says_no(tmp_path, asked):
    """A restarted rank makes its state again: its buffers of 2 MB or more get transparent huge
    pages from torch's allocator, in a cold start and in one forked from the warm interpreter
    (which imported torch before the attempt's environment), unless the job's environment says no."""
    pytest.importorskip("torch")
    if "[never]" in Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text():
        pytest.skip("this kernel grants no transparent huge pages")
    script = tmp_path / "huge.py"
    script.write_text(HUGE)
    env = {key: value for key, value in os.environ.items() if key != "THP_MEM_ALLOC_ENABLE"}
    proc, _, events = run_script(tmp_path, script, "--preload", "torch", env={**env, **({"THP_MEM_ALLOC_ENABLE": asked} if asked else {})})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [e["start"] for e in events if e["event"] == "attempt_start"] == ["cold", "warm"]
    seen = [line.split()[1:] for line in proc.stderr.splitlines() if line.startswith("attempt ")]
    assert [(attempt, flag) for attempt, flag, _ in seen] == [("1", asked or "1"), ("2", asked or "1")]
    assert all((int(huge) >= 32 << 10) == (asked is None) for _, _, huge in seen), seen  # KB: half the buffer at least


WATCH_THE_WARM_INTERPRETERS_SESSION = """\
import os, time
from pathlib import Path
""" + FIND_THE_WARM_INTERPRETER + """\
if os.environ['HACFG_ATTEMPT'] == '1':
    agent = str(os.getppid())
    while not Path(os.environ['SLOW_IMPORT_BEGAN']).exists():
        time.sleep(0.01)
    [warm] = [p for p in Path('/proc').iterdir() if p.name.isdigit() and is_the_agents_warm_interpreter(p, agent)]
    importing = (warm / 'autogroup').read_text().split()[-1]
    log = Path(os.environ['HACFG_HEARTBEAT_FILE']).with_name('warm.log')
    while ' ready: ' not in log.read_text():
        time.sleep(0.01)
    print('session nice', importing, (warm / 'autogroup').read_text().split()[-1], flush=True)
    os.kill(os.getpid(), 9)
"""


AUTOGROUPS = Path("/proc/sys/kernel/sched_autogroup_enabled")


@pytest.mark.skipif(not AUTOGROUPS.exists() or AUTOGROUPS.read_text().strip() != "1", reason="the kernel has no autogroups")
def test_the_warm_interpreters_session_yields_to_the_training_while_it_imports_and_no_longer(tmp_path):
    """Its import thread's nice weighs only within its session where the kernel shares the CPU
    between sessions first: the session itself is at nice 19 while it imports, at 0 once ready."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "slow_import.py").write_text(
        "import os, time\nopen(os.environ['SLOW_IMPORT_BEGAN'], 'w').close()\ntime.sleep(1)\n"
    )
    script = tmp_path / "train.py"
    script.write_text(WATCH_THE_WARM_INTERPRETERS_SESSION)
    env = {"PYTHONPATH": f"{tmp_path / 'lib'}:{os.environ.get('PYTHONPATH', '')}", "SLOW_IMPORT_BEGAN": str(tmp_path / "began")}
    state = tmp_path / "state"
    argv = [PY, "-m", "hacfg", "agent", "--state-dir", str(state), "--no-precheck", "--max-restarts", "1",
            "--preload", "slow_import", "--", PY, str(script)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr
    assert "session nice 19 0" in proc.stdout
