"""The README's editor snippets with the real editor where one is installed: Neovim, headless."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kit.cli import run_hacfg
from kit.paths import REPO

README = (REPO / "README.md").read_text()
BODY = '{\n  "kind": "job",\n  "metadata": {"name": "x", "annotations": {"fault-tolerance/job-retry-num": 3}}\n}\n'
# Waits for the diagnostics, then writes them, and the quick fixes offered on their line, to out.json.
REPORT = """
vim.wait(30000, function() return #vim.diagnostic.get(0) > 0 end, 50)
local found = {}
for _, d in ipairs(vim.diagnostic.get(0)) do
  table.insert(found, { d.code, d.lnum, d.col, d.end_lnum, d.end_col })
end
local line = found[1] and found[1][2] or 0
local answer = vim.lsp.buf_request_sync(0, "textDocument/codeAction", {
  textDocument = { uri = vim.uri_from_bufnr(0) },
  range = { start = { line = line, character = 0 }, ["end"] = { line = line, character = 200 } },
  context = { diagnostics = {}, only = { "quickfix" } },
}, 10000) or {}
local titles = {}
for _, reply in pairs(answer) do
  for _, action in ipairs(reply.result or {}) do table.insert(titles, action.title) end
end
local out = io.open("out.json", "w")
out:write(vim.fn.json_encode({ diagnostics = found, actions = titles }))
out:close()
"""


def snippet(heading: str) -> str:
    """The first Lua block after ``heading`` in the README."""
    return re.search(rf"{re.escape(heading)}.*?```lua\n(.*?)```", README, re.DOTALL).group(1)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvim") is None, reason="Neovim is not installed (apt-get install neovim)")
def test_the_older_neovim_snippet_shows_what_hacfg_lint_reports(tmp_path):
    version = subprocess.run(["nvim", "--version"], capture_output=True, text=True).stdout.split()[1]
    if tuple(int(part) for part in re.findall(r"\d+", version)[:2]) >= (0, 10):
        pytest.skip(f"Neovim {version}: the snippet is for 0.7 to 0.9")
    (tmp_path / "init.lua").write_text(snippet("Neovim 0.7 to 0.9"))
    (tmp_path / "report.lua").write_text(REPORT)
    (tmp_path / "job.json").write_text(BODY)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["nvim", "--headless", "-u", "init.lua", "job.json", "-c", "luafile report.lua", "-c", "qa!"],
                   cwd=tmp_path, env=env, timeout=120, capture_output=True, check=True)
    shown = json.loads((tmp_path / "out.json").read_text())
    linted = json.loads(run_hacfg("lint", "-f", "json", "job.json", cwd=tmp_path).out)["findings"]
    expected = [[f["rule"], f["line"] - 1, f["column"] - 1, f["end_line"] - 1, f["end_column"] - 1] for f in linted]
    assert sorted(shown["diagnostics"]) == sorted(expected) and expected
    assert 'quote the value: "3" (HA007)' in shown["actions"]
