"""Shell completion: what a TAB offers, answered without typer, and through a real bash."""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys
import time

import pytest

from hacfg.cli import complete, grammar


def offered(line: str) -> list[str]:
    """What bash would offer for ``line`` (a trailing space: a new word)."""
    words = line.split()
    index = len(words) if line.endswith(" ") else len(words) - 1
    text = complete.answer({"_HACFG_COMPLETE": "complete_bash", "COMP_WORDS": line, "COMP_CWORD": str(index)})
    assert text is not None
    return text.splitlines()


def test_the_grammar_is_typers_app_as_it_is():
    assert complete.GRAMMAR.read_text() == grammar.source(), "run: python -m hacfg.cli.grammar"


def test_targets_platforms_formats_presets_and_rule_ids_by_name():
    from hacfg.lint import engine
    from hacfg.plugin import provided

    assert offered("hacfg build --target ") == sorted(provided.targets())
    assert offered("hacfg lint --platform ") == ["huaweicloud", "otc"]
    assert offered("hacfg lint -f s") == ["sarif"]
    assert offered("hacfg build multi") == ["multi-node"]
    assert offered("hacfg explain HA00") == [r for r in engine.registry() if r.startswith("HA00")]
    assert offered("hacfg explain ") == list(engine.registry())
    for option in ("--select", "--extend-select", "--ignore"):
        assert offered(f"hacfg lint {option} HA01") == [r for r in engine.registry() if r.startswith("HA01")]


def test_commands_options_and_files():
    assert offered("hacfg li") == ["lint"]
    assert offered("hacfg --deb") == ["--debug"]
    assert {"--baseline", "--format", "--fail-on"} <= set(offered("hacfg lint --"))
    assert "README.md" in offered("hacfg lint READ")
    assert offered("hacfg agent -- pyth") == []  # the supervised command's words are the shell's


def test_zsh_and_fish_get_values_with_their_help():
    zsh = complete.answer({"_HACFG_COMPLETE": "complete_zsh", "_TYPER_COMPLETE_ARGS": "hacfg build --target mo"})
    assert zsh is not None and zsh.startswith("_arguments '*: :((\"modelarts\":")
    assert complete.answer({"_HACFG_COMPLETE": "complete_zsh", "_TYPER_COMPLETE_ARGS": "hacfg explain ZZ"}) == "_files"
    fish = complete.answer({"_HACFG_COMPLETE": "complete_fish", "_TYPER_COMPLETE_ARGS": "hacfg li"})
    assert fish is not None and fish.startswith("lint\t")
    assert complete.answer({"_HACFG_COMPLETE": "complete_powershell"}) is None  # typer's own


def test_a_tab_imports_neither_typer_nor_pydantic():
    probe = "import os, sys; from hacfg.cli.main import main; main([]); print(sorted(sys.modules))"
    env = {**os.environ, "_HACFG_COMPLETE": "complete_bash", "COMP_WORDS": "hacfg explain HA0", "COMP_CWORD": "2"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60).stdout
    lines = out.splitlines()
    assert "HA001" in lines[:-1]
    modules = eval(lines[-1])
    assert not [m for m in modules if m.split(".")[0] in ("typer", "pydantic", "click")]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_under_a_pty_completes_rule_ids_and_targets(tmp_path):
    # Typed at a bash prompt: typer finds the shell among the command's ancestors (`&& :` keeps bash
    # from exec'ing it, so bash stays one even when the suite itself runs with no shell above it).
    hacfg = shutil.which("hacfg") or "hacfg"
    shown = subprocess.run(["bash", "-c", f"{hacfg} --show-completion && :"], capture_output=True, text=True,
                           timeout=60)
    assert "complete -o default -F _hacfg_completion hacfg" in shown.stdout, (shown.returncode, shown.stderr)
    (tmp_path / "completion.bash").write_text(shown.stdout)
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe("bash", ["bash", "--norc", "--noprofile", "-i"], {**os.environ, "PS1": "$ ", "TERM": "dumb"})

    def typed(keys: str, expect: str, timeout: float = 30) -> str:
        os.write(fd, keys.encode())
        seen, deadline = b"", time.monotonic() + timeout
        while expect.encode() not in seen and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.5)[0]:
                seen += os.read(fd, 65536)
        return seen.decode(errors="replace")

    try:
        typed("", "$ ")  # what is typed before bash's first prompt may be thrown away
        # and so, now and then, is a line typed while bash still sets its terminal up (pexpect waits before
        # every line it sends for this): typed again until bash shows the function in place
        for _ in range(3):
            sourced = typed(f"source {tmp_path / 'completion.bash'}; complete -p hacfg\n", "-F _hacfg_completion hacfg\r\n$ ", 10)
            if "-F _hacfg_completion hacfg\r\n" in sourced:
                break
        else:
            pytest.fail(f"bash never showed the completion function: {sourced!r}")
        shown = typed("hacfg explain HA00\t\t", "HA001")
        if "HA001" not in shown:  # what the function itself answers, for the failure's message
            asked = "\x15COMP_WORDS=(hacfg explain HA00) COMP_CWORD=2; _hacfg_completion hacfg; echo \"[${COMPREPLY[*]}]\"\n"
            answered = typed(asked, "]\r\n$ ", 10)
            pytest.fail(f"TAB showed {shown!r}; the function answers {answered!r}")
        typed("\x15", "")  # ^U: a fresh line
        assert "volcano" in typed("hacfg build --target \t\t", "volcano")
    finally:
        os.write(fd, b"\x15exit\n")
        os.waitpid(pid, 0)
