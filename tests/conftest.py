"""The fixtures: the CLI run in this process, scenario files written, a virtualenv with the wheel,
two joined group members; and the run's set-up (hypothesis profiles, bytecode written once).

Plain helpers are in :mod:`kit`, imported by name (``from kit.cli import findings``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

pytest.register_assert_rewrite("kit")  # a helper's failed assert says what it compared
from kit.cli import Result  # noqa: E402
from kit.packaging import Venv  # noqa: E402
from kit.paths import REPO  # noqa: E402
from kit.processes import free_port  # noqa: E402

from hacfg.cli.main import main  # noqa: E402


@pytest.fixture
def cli(capsys):
    """Run ``hacfg ARGS`` in this process; returns exit code, stdout and stderr."""

    def run(*args: str | Path) -> Result:
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


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


@pytest.fixture
def shm() -> Iterator[Path]:
    """A folder of /dev/shm of the test's own, for memory tiers (the agent's, when given as its root)."""
    from hacfg import memory

    folder = Path(tempfile.mkdtemp(dir=memory.ROOT, prefix="hacfg-test-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


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
    for module in [*(REPO / "tests").rglob("test_*.py"), Path(__file__), *marked_for_rewrite(state.hook)]:
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


