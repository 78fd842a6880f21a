"""How hacfg writes files: through symlinks, keeping hard links, mode and owner, never over a
read-only file unless forced, and whole or not at all on a full disk or a read-only folder."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hacfg.agent.records.metrics import Metrics

# A request body with one safe fix (HA007 quotes the count), so every writer can start from it.
BODY = "kind: job\nmetadata:\n  name: demo\n  annotations:\n    fault-tolerance/job-retry-num: 3\nspec: {resource: {node_count: 1}}\n"
SCENARIO = "version: 1\nscenario: single-node\njob: {image: org/train:1.0, command: bash run.sh, flavor: f}\n"
PAGE = 4096
# Another owner, where this process may give one (root); elsewhere its own, which chown allows too.
OWNER = (65534, 65534) if os.geteuid() == 0 else (os.getuid(), os.getgid())


def writers(source: Path) -> dict[str, object]:
    """Each command that writes a file the user names, as the arguments that write ``path``."""
    scenario = source.parent / "ha.yaml"
    return {
        "fix": lambda path: ("fix", path),
        "build -o": lambda path: ("build", scenario, "-o", path),
        "build --into": lambda path: ("build", scenario, "--into", path),
        "lint -o": lambda path: ("lint", source, "-o", path),
        "import -o": lambda path: ("import", source, "-o", path),
        "schema -o": lambda path: ("schema", "-o", path),
    }


WRITERS = list(writers(Path()))


@pytest.fixture
def run(cli, tmp_path):
    """Run one writer over ``path``; the bytes it writes to a plain file are the reference."""
    source = tmp_path / "source" / "job.yaml"
    source.parent.mkdir()
    source.write_text(BODY)
    (source.parent / "ha.yaml").write_text(SCENARIO)

    def run_writer(name: str, path: Path, *extra: str):
        return cli(*writers(source)[name](path), *extra)  # type: ignore[operator]

    def expected(name: str) -> bytes:
        plain = tmp_path / "plain" / "job.yaml"
        plain.parent.mkdir(exist_ok=True)
        plain.write_text(BODY)
        assert run_writer(name, plain).code in (0, 1)
        return plain.read_bytes()

    run_writer.expected = expected  # type: ignore[attr-defined]
    return run_writer


def leftovers(*folders: Path) -> list[str]:
    return [p.name for folder in folders for p in folder.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("writer", WRITERS)
def test_a_symlink_is_written_through_to_its_target(run, tmp_path, writer):
    target = tmp_path / "real" / "job.yaml"
    target.parent.mkdir()
    target.write_text(BODY)
    link = tmp_path / "link.yaml"
    link.symlink_to(os.path.join("real", "job.yaml"))  # relative, as links in a repository are
    result = run(writer, link)
    assert result.code in (0, 1), result.err
    assert link.is_symlink() and os.readlink(link) == os.path.join("real", "job.yaml")
    assert target.read_bytes() == run.expected(writer) != BODY.encode()
    assert leftovers(tmp_path, target.parent) == []


@pytest.mark.parametrize("writer", WRITERS)
def test_hard_links_mode_and_owner_are_kept(run, tmp_path, writer):
    path = tmp_path / "job.yaml"
    path.write_text(BODY)
    other = tmp_path / "elsewhere.yaml"
    os.link(path, other)
    path.chmod(0o640)
    os.chown(path, *OWNER)
    inode = path.stat().st_ino
    assert run(writer, path).code in (0, 1)
    after = path.stat()
    assert (after.st_ino, after.st_nlink, stat.S_IMODE(after.st_mode)) == (inode, 2, 0o640)
    assert (after.st_uid, after.st_gid) == OWNER
    assert other.read_bytes() == path.read_bytes() == run.expected(writer)


@pytest.mark.parametrize("writer", WRITERS)
def test_mode_and_owner_are_kept_when_the_file_is_replaced(run, tmp_path, writer):
    path = tmp_path / "job.yaml"
    path.write_text(BODY)
    path.chmod(0o604)
    os.chown(path, *OWNER)
    assert run(writer, path).code in (0, 1)
    after = path.stat()
    assert (stat.S_IMODE(after.st_mode), after.st_uid, after.st_gid) == (0o604, *OWNER)
    assert path.read_bytes() == run.expected(writer)


@pytest.mark.parametrize("writer", WRITERS)
def test_a_read_only_file_is_refused_unless_forced(run, tmp_path, writer):
    path = tmp_path / "job.yaml"
    path.write_text(BODY)
    path.chmod(0o444)
    refused = run(writer, path)
    assert refused.code == 2
    refusal = f"{path}: cannot write: read-only file; pass --force to overwrite it"
    assert any(line.startswith(refusal) for line in refused.err.splitlines()), refused.err
    assert path.read_text() == BODY
    forced = run(writer, path, "--force")
    assert forced.code in (0, 1), forced.err
    assert path.read_bytes() == run.expected(writer)
    assert stat.S_IMODE(path.stat().st_mode) == 0o444


def test_a_new_file_gets_the_umask_mode(cli, tmp_path):
    old = os.umask(0o027)
    try:
        assert cli("schema", "-o", tmp_path / "schema.json").code == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "schema.json").stat().st_mode) == 0o640


def test_a_dangling_symlink_creates_its_target(cli, tmp_path):
    link = tmp_path / "schema.json"
    link.symlink_to("generated/schema.json")
    (tmp_path / "generated").mkdir()
    assert cli("schema", "-o", link).code == 0
    assert link.is_symlink() and (tmp_path / "generated" / "schema.json").read_text().startswith("{")


def test_a_pipe_is_written_as_a_redirection_would(cli, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    assert cli("schema", "-o", fifo).code == 0
    reader.join(10)
    assert stat.S_ISFIFO(fifo.stat().st_mode) and received[0].startswith(b"{")


def test_a_symlink_loop_is_one_line(cli, tmp_path):
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    result = cli("schema", "-o", loop)
    assert (result.code, result.err) == (2, f"{loop}: cannot write: Too many levels of symbolic links\n")


def test_the_metrics_textfile_is_written_through_its_link(tmp_path):
    target = tmp_path / "textfile" / "hacfg.prom"
    target.parent.mkdir()
    target.write_text("# old\n")
    link = tmp_path / "hacfg.prom"
    link.symlink_to(target)
    said: list[str] = []
    metrics = Metrics([], textfile=link, echo=said.append)
    metrics.record({"event": "agent_start", "time": "2026-01-01T00:00:00+00:00"})
    assert link.is_symlink() and "hacfg_attempt" in target.read_text()
    target.chmod(0o444)
    metrics.record({"event": "attempt_start", "time": "2026-01-01T00:00:01+00:00", "attempt": 1})
    assert said == [f"[hacfg] cannot write metrics to {link}: read-only file; supervision continues"]


# Full disks and read-only folders, on real small tmpfs mounts.


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs, unmounted afterwards; skipped where this process may not mount one."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path, leave: int) -> None:
    """Take all the disk's free space but ``leave`` bytes."""
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with contextlib.suppress(OSError), open(disk / "filler", "wb") as filler:
        filler.write(b"\0" * (free - leave))
    assert os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize <= leave


def fixable(size: int) -> str:
    """The body, padded with a comment to ``size`` bytes."""
    return BODY + "#" * (size - len(BODY) - 1) + "\n"


def test_fix_on_a_full_disk_writes_what_fits_and_says_which_were_not(cli, small_disk):
    small, large = fixable(1000), fixable(5 * PAGE)
    for name, text in (("a.yaml", small), ("b.yaml", large), ("c.yaml", small)):
        (small_disk / name).write_text(text)
    fill(small_disk, 2 * PAGE)  # room for a small file's new copy, not for the large one's
    result = cli("fix", small_disk / "a.yaml", small_disk / "b.yaml", small_disk / "c.yaml")
    assert result.code == 2
    assert result.err.splitlines() == [
        f"fixed 1 in {small_disk}/a.yaml",
        f"{small_disk}/b.yaml: cannot write: No space left on device; not fixed",
        f"fixed 1 in {small_disk}/c.yaml",
        f"hacfg: error: 1 of 3 files not fixed: {small_disk}/b.yaml",
    ]
    assert (small_disk / "b.yaml").read_text() == large
    assert '"3"' in (small_disk / "a.yaml").read_text() and '"3"' in (small_disk / "c.yaml").read_text()
    assert leftovers(small_disk) == []


def test_a_hard_linked_file_on_a_full_disk_is_left_whole(cli, small_disk):
    path = small_disk / "job.yaml"
    path.write_text(fixable(2 * PAGE))  # the fix adds two bytes: a third page the disk does not have
    os.link(path, small_disk / "other.yaml")
    fill(small_disk, 0)
    result = cli("fix", path)
    assert result.code == 2 and "No space left on device; not fixed" in result.err
    assert path.read_text() == fixable(2 * PAGE) and path.stat().st_size == 2 * PAGE


def test_an_output_on_a_full_disk_is_one_line_and_the_old_file_stays(cli, small_disk):
    path = small_disk / "schema.json"
    path.write_text("old\n")
    fill(small_disk, 0)
    result = cli("schema", "-o", path)
    assert (result.code, result.err) == (2, f"{path}: cannot write: No space left on device\n")
    assert path.read_text() == "old\n" and leftovers(small_disk) == []


def test_fix_in_a_read_only_folder_changes_nothing(cli, small_disk):
    for name in ("a.yaml", "b.yaml"):
        (small_disk / name).write_text(BODY)
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    result = cli("fix", small_disk)
    assert result.code == 2
    assert result.err.splitlines() == [
        f"{small_disk}/a.yaml: cannot write: Read-only file system; not fixed",
        f"{small_disk}/b.yaml: cannot write: Read-only file system; not fixed",
        f"hacfg: error: 2 of 2 files not fixed: {small_disk}/a.yaml, {small_disk}/b.yaml",
    ]
    assert all((small_disk / name).read_text() == BODY for name in ("a.yaml", "b.yaml"))


@pytest.mark.slow
def test_a_real_process_on_a_full_disk_exits_2_without_a_traceback(small_disk):
    fill(small_disk, 0)
    (small_disk.parent / "ha.yaml").write_text(SCENARIO)
    for command in (["schema", "-o"], ["build", str(small_disk.parent / "ha.yaml"), "-o"], ["init", "-o"]):
        proc = subprocess.run([sys.executable, "-m", "hacfg", *command, str(small_disk / "out")], capture_output=True,
                              text=True, timeout=60)
        assert (proc.returncode, proc.stderr) == (2, f"{small_disk}/out: cannot write: No space left on device\n")


@pytest.mark.slow  # matplotlib
def test_any_command_that_meets_a_full_disk_says_so_in_one_line(cli, small_disk, tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text(
        '{"event": "agent_start", "time": "2026-01-01T00:00:00+00:00", "node": 0}\n'
        '{"event": "attempt_start", "time": "2026-01-01T00:00:01+00:00", "attempt": 1, "node": 0}\n'
    )
    fill(small_disk, 0)
    result = cli("events", events, "--plot", small_disk / "job.svg")
    assert (result.code, result.err) == (2, f"hacfg: error: {small_disk}/job.svg: No space left on device\n")
    assert leftovers(small_disk) == []


@pytest.mark.slow  # matplotlib
def test_a_plot_is_written_through_its_link_and_names_its_format(cli, tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text('{"event": "agent_start", "time": "2026-01-01T00:00:00+00:00", "node": 0}\n')
    (tmp_path / "job.svg").symlink_to("drawn.svg")
    assert cli("events", events, "--plot", tmp_path / "job.svg").code == 0
    assert (tmp_path / "drawn.svg").read_text().startswith("<?xml")
    result = cli("events", events, "--plot", tmp_path / "job.txt")
    assert (result.code, result.err) == (2, f"{tmp_path}/job.txt: --plot draws .svg or .png files\n")
