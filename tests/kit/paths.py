"""Where the repository, its test programs and the reference documents are."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHILDREN = REPO / "tests" / "children"  # small programs the agent supervises

# The reference documents live beside the repository (``../shared``), or beside a folder holding it, as a worktree.
SHARED = next((folder / "shared" for folder in REPO.parents if (folder / "shared").is_dir()), REPO.parent / "shared")
