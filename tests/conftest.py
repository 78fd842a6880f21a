"""Shared helpers: run the CLI in-process or as a real process, read its findings and the agent's
events, write scenario files and installed distributions.

Plain functions are imported (``from conftest import findings``); fixtures are named as arguments.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from hacfg.cli.main import main

REPO = Path(__file__).resolve().parent.parent
CHILDREN = REPO / "tests" / "children"  # small programs the agent supervises
# The reference documents live beside the repository (``../shared``), or beside a folder holding it, as a worktree.
SHARED = next((folder / "shared" for folder in REPO.parents if (folder / "shared").is_dir()), REPO.parent / "shared")


def children_of(pid: int) -> list[tuple[int, str]]:
    """The processes whose parent is ``pid``, each with its state letter (``S``, ``Z``...)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append((int(entry.name), fields[0]))
    return found


def left_running(marker: str | Path) -> list[int]:
    """The live processes (zombies aside) whose command line names ``marker``, a test's own folder: what it left."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                named = str(marker).encode() in (entry / "cmdline").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if named and state not in ("Z", "X"):
                found.append(int(entry.name))
    return found


def wait_agents(agents: Mapping[int, subprocess.Popen], timeout: float, output: Callable[[int], str]) -> dict[int, int]:
    """Each agent's exit code, all within ``timeout`` seconds; else every agent's session is killed and the
    test fails with the output of the one that did not finish."""
    deadline = time.monotonic() + timeout
    codes = {}
    for key, agent in sorted(agents.items()):
        try:
            codes[key] = agent.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_agents(agents)
            pytest.fail(f"agent {key} did not finish:\n{output(key)[-4000:]}")
    return codes


def kill_agents(agents: Mapping[int, subprocess.Popen]) -> None:
    """End every agent a test started in a session of its own, and whatever it runs."""
    for agent in agents.values():
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()


def free_port() -> int:
    """A TCP port nobody holds now, for a store or a process group (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys):
    """Run ``hacfg ARGS`` in this process; returns exit code, stdout and stderr."""

    def run(*args: str | Path) -> Result:
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def run_hacfg(*args: str | Path, cwd: Path | None = None, env: dict | None = None, timeout: float = 60) -> Result:
    """Run ``hacfg ARGS`` as a real process (``python -m hacfg``)."""
    proc = subprocess.run(
        [sys.executable, "-m", "hacfg", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def findings(cli, *args: str | Path, keys: str | tuple[str, ...] | None = None) -> Any:
    """The findings of ``hacfg lint -f json ARGS``: each as the JSON report writes it, or, with
    ``keys``, the set of those fields of each (of the one field, when ``keys`` is a name)."""
    result = cli("lint", "-f", "json", *args)
    assert result.code in (0, 1), result.err
    found = json.loads(result.out)["findings"]
    if keys is None:
        return found
    if isinstance(keys, str):
        return {f[keys] for f in found}
    return {tuple(f[key] for key in keys) for f in found}


def agent_argv(state: Path, *options: str) -> list[str]:
    """``hacfg agent OPTIONS --`` with its state in ``state`` and no pre-checks: the command follows."""
    return [sys.executable, "-m", "hacfg", "agent", "--state-dir", str(state), "--no-precheck", *options, "--"]


def agent(
    tmp_path: Path, *options: str, child: str, args: tuple = (), env: dict | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """Run ``hacfg agent OPTIONS -- python tests/children/CHILD ARGS`` in tmp_path, its state in tmp_path/state."""
    argv = [*agent_argv(tmp_path / "state", *options), sys.executable, str(CHILDREN / child), *map(str, args)]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}, cwd=tmp_path
    )


def read_events(state: Path) -> list[dict]:
    """The events an agent wrote to ``state``/events.jsonl, in order."""
    return [json.loads(line) for line in (state / "events.jsonl").read_text().splitlines()]


def saved_state(state: Path) -> dict:
    """The state an agent saved in ``state``/state.json: the words of its sealed line (``job``,
    ``ended``) and its document."""
    line, _, document = (state / "state.json").read_text().partition("\n")
    return {**dict(word.split("=", 1) for word in line.split()[2:-1]), **json.loads(document)}


def distribution(site: Path, name: str, entry_points: dict[str, str], version: str = "1.0") -> Path:
    """An unpacked distribution with ``hacfg`` entry points in ``site``, as pip leaves one in site-packages."""
    dist = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (dist / "entry_points.txt").write_text("[hacfg]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))
    return dist


def imported_modules(
    *args: str | Path, cwd: Path = REPO, env: dict | None = None, python: str | Path = sys.executable
) -> set[str]:
    """Every module a real ``hacfg ARGS`` process imports, however it exits (recorded as each is looked for)."""
    recorder = (
        "import runpy, sys\n"
        "class Recorder:\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        sys.stderr.write(f'imported {name}\\n')\n"
        "sys.meta_path.insert(0, Recorder())\n"
        "runpy.run_module('hacfg', run_name='__main__', alter_sys=True)\n"
    )
    proc = subprocess.run(
        [str(python), "-c", recorder, *map(str, args)], capture_output=True, text=True, cwd=cwd,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode in (0, 1, 2), proc.stderr
    return {line.removeprefix("imported ") for line in proc.stderr.splitlines() if line.startswith("imported ")}


@pytest.fixture
def builtin_plugins_only(monkeypatch):
    """hacfg's own plugins only, whatever else this environment has installed, in this process and the
    ones a test starts: for tests that compare with hacfg's own catalogue."""
    from hacfg.plugin import manager

    monkeypatch.setenv(manager.AUTOLOAD_SWITCH, "1")
    manager.reset()
    yield
    manager.reset()


@pytest.fixture
def project(tmp_path, monkeypatch):
    """An empty project folder as the working directory (so no outer pyproject applies)."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def write(tmp_path):
    """Write a dedented file under tmp_path and return its path."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
        return path

    return _write


@dataclass
class Venv:
    python: Path
    bin: Path

    def run(self, *args: str | Path, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})

    def pip_install(self, *requirements: str | Path) -> subprocess.CompletedProcess:
        """This interpreter's pip installing into the virtualenv: seeding one of its own (ensurepip)
        costs 7 s of CPU."""
        return self.run(sys.executable, "-m", "pip", "--python", self.python, "install", "--quiet", *requirements)


@pytest.fixture(scope="session")
def wheel_venv(tmp_path_factory) -> Venv:
    """A fresh virtualenv with hacfg installed from a wheel built from this tree (not editable)."""
    import venv

    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", tmp / "dist", REPO], check=True, capture_output=True)
    wheel = next((tmp / "dist").glob("hacfg-*.whl"))
    venv.create(tmp / "venv", with_pip=False)
    env = Venv(tmp / "venv" / "bin" / "python", tmp / "venv" / "bin")
    installed = env.pip_install(wheel)
    assert installed.returncode == 0, installed.stderr
    return env


@pytest.fixture
def joined_pair(tmp_path):
    """Node 0 and node 1 of a two-node group on a real TCPStore, through their first round's start."""
    from concurrent.futures import ThreadPoolExecutor

    torch = pytest.importorskip("torch")
    from hacfg.agent.group.discovery import GroupSpec
    from hacfg.agent.group.protocol import GroupRounds
    from hacfg.agent.group.signing import JobSecret
    from hacfg.agent.records.state import NodeState
    from hacfg.restart.policy import Policy

    port = free_port()

    def member(rank):
        spec = GroupSpec(nnodes=2, rank=rank, host="127.0.0.1", port=port, timeout=30)
        secret = JobSecret({}, tmp_path, None, create=spec.leader, timeout=spec.timeout, shared=True)
        return GroupRounds(spec, Policy(), torch.distributed.TCPStore, echo=print, secret=secret)

    leader, follower = member(0), member(1)
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda group: group.recover(NodeState()) or group.begin(NodeState()), [leader, follower]))
        yield leader, follower
    finally:
        follower.close()
        leader.close()


def pytest_addoption(parser):
    # Not --slow: the marker of that name (`pytest -m "not slow"`) says which tests to skip.
    parser.addoption("--many-examples", action="store_true", help="Run the property-based tests with many more examples.")


@pytest.fixture(scope="session")
def examples(request) -> int:
    """How many examples each property-based test runs: thousands in all in CI (four fuzzers, five
    hundred each, and their siblings), far more with --many-examples."""
    return 20000 if request.config.getoption("--many-examples") else 500


# The invariants across commands (tests/test_invariants.py) run the whole CLI several times per example:
# 300 each by default, thousands with --many-examples or HYPOTHESIS_PROFILE=slow.
settings.register_profile("ci", max_examples=300, deadline=None, database=None)
settings.register_profile("slow", max_examples=3000, deadline=None, database=None)


def pytest_configure(config):
    many = config.getoption("--many-examples")
    settings.load_profile("slow" if many else os.environ.get("HYPOTHESIS_PROFILE", "ci"))
    if not hasattr(config, "workerinput"):  # once per run, before xdist's workers start
        write_bytecode()
        write_rewritten_modules(config)


def write_bytecode() -> None:
    """Write the bytecode of hacfg and the plugins beside their sources, as pip does for an
    installed package. With PYTHONDONTWRITEBYTECODE set, an editable install is otherwise compiled
    anew by every process the tests start (about 0.2 s of CPU per agent or CLI process)."""
    import compileall

    for folder in ("hacfg", "plugins"):
        compileall.compile_dir(REPO / folder, quiet=2)  # a file it cannot write is compiled as before, in memory


def write_rewritten_modules(config: pytest.Config) -> None:
    """Write the modules pytest's assertion rewriting changes (the tests, and every module of a package
    that brings a pytest plugin, such as hypothesis) as it makes them, into the cache it reads (checked
    against each source). With PYTHONDONTWRITEBYTECODE set, pytest writes none, and every xdist worker
    rewrites each module it imports for itself: 2 s of CPU each, a third of collecting."""
    try:
        from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc, _rewrite_test, _write_pyc, assertstate_key
    except ImportError:  # pytest's internals moved: each worker rewrites for itself, as before
        return
    state = config.stash.get(assertstate_key, None)
    if state is None:  # --assert=plain: nothing is rewritten
        return
    for module in [*(REPO / "tests").glob("*.py"), *marked_for_rewrite(state.hook)]:
        cache = module.parent / "__pycache__"
        pyc = cache / f"{module.stem}{PYC_TAIL}"
        if _read_pyc(module, pyc, state.trace) is None:
            source_hash, code = _rewrite_test(module, config)
            with contextlib.suppress(OSError):  # a folder it cannot write: the workers rewrite that module
                cache.mkdir(exist_ok=True)
                _write_pyc(state, code, source_hash, pyc)


def marked_for_rewrite(hook) -> list[Path]:
    """The source files of the modules and packages pytest rewrites on import."""
    from importlib.util import find_spec

    files = []
    for name in getattr(hook, "_must_rewrite", ()):
        spec = find_spec(name) if "." not in name else None
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            continue
        if spec.submodule_search_locations:
            files += [path for folder in spec.submodule_search_locations for path in Path(folder).rglob("*.py")]
        else:
            files.append(Path(spec.origin))
    return files


def rank_table(path: Path, nodes: int, cards: int, status: str = "completed") -> Path:
    """A version 1.0 rank table laid out as the CANN HCCL guide's example (tests/data/ranktable)."""
    servers = [
        {"server_id": f"node_{node}", "device": [
            {"device_id": str(card), "device_ip": f"192.168.{node + 1}.{card + 8}", "rank_id": str(node * cards + card)}
            for card in range(cards)]}
        for node in range(nodes)
    ]  # fmt: skip
    path.write_text(json.dumps({"status": status, "version": "1.0", "server_count": str(nodes), "server_list": servers}))
    return path


@functools.cache
def volcano_job_schema() -> dict:
    """The Job's schema in Volcano's CRD: read when a test asks, not while every worker collects."""
    import yaml

    crd = yaml.load((REPO / "tests/data/volcano-batch.volcano.sh_jobs.yaml").read_text(), Loader=yaml.CSafeLoader)
    return next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")["schema"]["openAPIV3Schema"]
