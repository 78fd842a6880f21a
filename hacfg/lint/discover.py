"""Which files ``hacfg lint`` and ``hacfg fix`` read, found the way ruff finds Python files.

Under a directory: files named like scenario files (``ha.yaml``, ``*.ha.yaml``) or matching
the ``include`` setting, and any ``*.json``/``*.yaml``/``*.yml`` whose content is a scenario
file, a ModelArts request body, or a JobSet or Kubeflow Trainer manifest (by apiVersion and
kind). ``.gitignore`` is respected (also in the folders above, up to the repository's root, and
``.git/info/exclude``); version-control folders, virtualenvs,
``node_modules`` and tool caches are skipped, other hidden folders (``.modelarts/``) are not.

A file named on the command line is read whatever its name, unless its content is plainly
something else (another Kubernetes object, ``package.json``): that is skipped with a note. With
``force_exclude`` (what pre-commit hooks use) named files are chosen like files in a walk.
Anything with a ``fault-tolerance/*`` annotation is a request body, even the platform docs'
snippet of bare metadata. In a YAML file of several documents, the bodies, scenarios and training
manifests are linted (of ``hacfg build --target jobset``'s output, the JobSet, not the ConfigMap).

Each file is read once, however many paths lead to it. A file that another one ``extends:``
is a base: its keys and values are checked, and the risks are judged in the files that extend it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from hacfg.lint.settings import Settings
from hacfg.scenario import modelarts as ma
from hacfg.scenario.kubernetes import training_kind
from hacfg.scenario.names import Kind
from hacfg.scenario.source import MAX_BYTES, Document, InputError, load_all, parse_all

# ha.yaml, ha.yml, *.ha.yaml, *.ha.yml: compared as names and suffixes, which fnmatch would compile to patterns
SCENARIO_NAMES = ("ha.yaml", "ha.yml")
_SCENARIO_SUFFIXES = tuple(f".{name}" for name in SCENARIO_NAMES)
CONTENT_SUFFIXES = (".json", ".yaml", ".yml")
# ruff's default exclusions that can hold YAML or JSON, and any folder holding a pyvenv.cfg
SKIPPED_DIRS = frozenset(
    {
        ".bzr",
        ".direnv",
        ".eggs",
        ".git",
        ".git-rewrite",
        ".hg",
        ".svn",
        ".jj",
        ".mypy_cache",
        ".nox",
        ".pants.d",
        ".pytest_cache",
        ".pytype",
        ".ruff_cache",
        ".tox",
        ".venv",
        "venv",
        "__pypackages__",
        "__pycache__",
        "node_modules",
        "site-packages",
        "buck-out",
    }
)
# The kinds the create-training-job API lists (Huawei Cloud and OTC).
MODELARTS_KINDS = frozenset(
    {
        "job",
        "federated_pool_job",
        "edge_job",
        "hetero_job",
        "mrs_job",
        "autosearch_job",
        "diag_job",
        "visualization_job",
    }
)
SCENARIO_KEYS = frozenset(
    {
        "scenario",
        "extends",
        "job",
        "checkpoint",
        "restart",
        "hang",
        "passthrough",
        "precheck",
        "operator_retry",
        "kubernetes",
    }
)


class Linted:
    """A document to lint, and the kind of file it is."""

    __slots__ = ("document", "kind")

    def __init__(self, document: Document, kind: Kind) -> None:
        self.document = document
        self.kind = kind


class Found:
    """A file to lint: its path as the user spelled it, the documents read while choosing it, and
    those to lint with their kinds."""

    __slots__ = ("base", "documents", "linted", "path")

    def __init__(
        self,
        path: Path,
        documents: tuple[Document, ...] = (),
        linted: tuple[Linted, ...] = (),
        base: bool = False,
    ) -> None:
        self.path = path
        self.documents = documents  # none when it could not be parsed: linting reports why
        self.linted = linted
        self.base = base


class Discovery:
    __slots__ = ("files", "notes")

    def __init__(self, files: list[Found], notes: list[str]) -> None:
        self.files = files
        self.notes = notes  # files named but skipped, and why


def is_request_body(data: Any) -> bool:
    """A ModelArts create-training-job body: a ModelArts kind, or metadata with an algorithm, a spec or
    a ``fault-tolerance/*`` annotation (the platform docs show that much alone).

    A Kubernetes object (``apiVersion``) never is, nor anything with scenario keys.
    """
    if not isinstance(data, dict) or "apiVersion" in data or "version" in data or "scenario" in data:
        return False
    if "kind" in data:
        return isinstance(data["kind"], str) and data["kind"] in MODELARTS_KINDS
    metadata = data.get("metadata")
    if not isinstance(metadata, dict):
        return False
    annotations = metadata.get("annotations")
    fault_tolerance = isinstance(annotations, dict) and any(
        isinstance(key, str) and key.startswith(ma.FAULT_TOLERANCE_PREFIX) for key in annotations
    )
    return fault_tolerance or "algorithm" in data or "spec" in data


def is_scenario(data: Any) -> bool:
    """A scenario file by content: it says which format version and scenario it is."""
    return isinstance(data, dict) and "version" in data and "scenario" in data


def is_manifest(data: Any) -> bool:
    """A JobSet, TrainJob or (Cluster)TrainingRuntime, by its apiVersion and kind."""
    return training_kind(data) is not None


def kind_of(document: Document) -> Kind | None:
    """The kind of file a document is by its content: a ModelArts request body, a JobSet or Kubeflow
    Trainer manifest, or a scenario file; None when it is none of them."""
    if is_request_body(document.data):
        return "job"
    if is_manifest(document.data):
        return "manifest"
    return "scenario" if is_scenario(document.data) else None


def ours(documents: list[Document] | tuple[Document, ...]) -> list[Linted]:
    """The documents to lint, each with its kind: of several, those whose content says what they are;
    else the first (a file's only one) as what it says, or when it says nothing as a scenario file,
    which its name or the command line claims it is (validation says what it lacks)."""
    several = [Linted(doc, kind) for doc in documents if (kind := kind_of(doc))] if len(documents) > 1 else []
    return several or [Linted(documents[0], kind_of(documents[0]) or "scenario")]


def _foreign(data: Any) -> bool:
    """Plainly not ours: another Kubernetes object, or a mapping with no scenario key that is no body."""
    if not isinstance(data, dict) or is_manifest(data):
        return False
    return "apiVersion" in data or not (is_request_body(data) or SCENARIO_KEYS & data.keys())


def discover(
    paths: Iterable[str | Path], settings: Settings, *, respect_gitignore: bool = True, force_exclude: bool = False
) -> Discovery:
    """The files to lint under ``paths`` (default: the current directory), sorted, each once."""
    notes: list[str] = []
    chosen: dict[object, Found] = {}
    for given in paths or ["."]:
        path = Path(given)
        if path.is_dir():
            candidates: Iterator[tuple[Path, bool]] = (
                (file, False) for file in _walk(path, settings, respect_gitignore)
            )
        elif path.exists() or path.is_symlink():
            candidates = iter([(path, not force_exclude)])
        else:
            raise InputError("no such file or directory", file=str(path))
        for file, named in candidates:
            key = _identity(file)
            if key in chosen:
                continue
            picked = _choose(file, settings, named=named, notes=notes)
            if picked is not None:
                chosen[key] = picked
    bases = _bases(chosen)
    files = sorted(
        (Found(f.path, f.documents, f.linted, base=key in bases) for key, f in chosen.items()),
        key=lambda f: os.path.normpath(f.path),
    )
    return Discovery(files, notes)


def _identity(path: Path) -> object:
    """The same file reached by two spellings or a link is one file."""
    try:
        stat = path.stat()
    except OSError:
        return os.path.normpath(path)
    return stat.st_dev, stat.st_ino


def wanted(path: Path, settings: Settings) -> bool:
    """Whether ``path`` is named like a scenario file, or matches a configured ``include`` glob."""
    return path.name in SCENARIO_NAMES or path.name.endswith(_SCENARIO_SUFFIXES) or settings.included(path)


def passed_by(path: Path) -> bool:
    """Whether a walk of the repository holding ``path`` passes it by: ignored by a ``.gitignore`` or
    the exclude file, or under a folder the walk skips or ignores."""
    absolute = Path(os.path.abspath(path))
    top = next((folder for folder in absolute.parents if (folder / ".git").exists()), absolute.parent)
    ignores = _Ignores.above(top)
    chain = [absolute.parent, *absolute.parent.parents]
    for here in reversed(chain[: chain.index(top) + 1]):  # from the top down, as the walk goes
        if here != top and (_skipped(here) or ignores.ignored(here, directory=True)):
            return True
        ignores.read(here / ".gitignore")
    return ignores.ignored(absolute, directory=False)


def chosen(path: Path, settings: Settings, text: str) -> Found | None:
    """``path`` holding ``text`` (an editor's unsaved copy) as a walk would choose it, by name (``include``
    globs too) or by content, if the walk reaches it (:func:`passed_by`); else None."""
    return _choose(path, settings, named=False, notes=[], text=text)


def choose_named(path: Path, settings: Settings, text: str, notes: list[str]) -> Found | None:
    """``text`` (standard input) as the file ``path`` named on the command line would be chosen."""
    return _choose(path, settings, named=True, notes=notes, text=text)


def _choose(path: Path, settings: Settings, *, named: bool, notes: list[str], text: str | None = None) -> Found | None:
    """``path`` (or ``text``, what an editor holds of it) as a file to lint, or None when it is not a
    scenario file or request body."""
    by_name = wanted(path, settings)
    if not (by_name or named or (path.suffix in CONTENT_SUFFIXES and _may_be_ours(path, text))):
        return None
    try:
        documents = load_all(path) if text is None else parse_all(text, str(path))
    except InputError:
        # what cannot be read or parsed is reported when the user asked for it by name
        return Found(path) if by_name or named else None
    found = Found(path, tuple(documents), tuple(ours(documents)))
    if by_name:
        return found
    recognised = any(kind_of(doc) is not None for doc in documents)
    if named:
        # a file named on the command line is linted unless its content is plainly something else
        if (len(documents) > 1 and not recognised) or all(_foreign(item.document.data) for item in found.linted):
            notes.append(f"{path}: not a scenario file or a ModelArts request body; skipped")
            return None
        return found
    return found if recognised else None


def _may_be_ours(path: Path, text: str | None) -> bool:
    """A scenario file names its scenario and a body has metadata: a data file with neither is not parsed."""
    if text is not None:
        return "scenario" in text or "metadata" in text
    try:
        with open(path, "rb") as handle:
            head = handle.read(MAX_BYTES)
    except OSError:
        return False
    return b"scenario" in head or b"metadata" in head


def _bases(chosen: dict[object, Found]) -> set[object]:
    """The chosen files that another chosen file names in ``extends:``."""
    bases = set()
    for found in chosen.values():
        only = found.linted[0] if len(found.documents) == 1 else None
        data = only.document.data if only is not None and only.kind == "scenario" else None
        reference = data.get("extends") if isinstance(data, dict) else None
        if isinstance(reference, str) and ("/" in reference or reference.endswith(CONTENT_SUFFIXES)):
            key = _identity(found.path.parent / reference)
            if key in chosen and key != _identity(found.path):
                bases.add(key)
    return bases


def _walk(root: Path, settings: Settings, respect_gitignore: bool) -> Iterator[Path]:
    """Files under ``root``, top-down, without links to directories, skipped and ignored folders."""
    ignores = _Ignores.above(root) if respect_gitignore else None
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        if ignores is not None and ".gitignore" in files:
            ignores.read(here / ".gitignore")
        dirs[:] = sorted(
            d
            for d in dirs
            if not _skipped(here / d) and not (ignores is not None and ignores.ignored(here / d, directory=True))
        )
        for name in sorted(files):
            file = here / name
            if ignores is None or not ignores.ignored(file, directory=False):
                yield file


def _skipped(folder: Path) -> bool:
    return folder.name in SKIPPED_DIRS or (folder / "pyvenv.cfg").exists()


class _Ignores:
    """gitignore files in effect under a folder: the deepest one that matches a path decides."""

    def __init__(self) -> None:
        self.specs: list[tuple[str, Any]] = []  # (folder, PathSpec), shallow before deep

    @classmethod
    def above(cls, root: Path) -> _Ignores:
        """The repository's exclude file and every .gitignore from its root down to ``root``'s parent."""
        ignores = cls()
        start = Path(os.path.abspath(root))
        chain = [start, *start.parents]
        repo = next((folder for folder in chain if (folder / ".git").exists()), None)
        if repo is not None:
            ignores.read(repo / ".git" / "info" / "exclude", base=repo)
            for folder in reversed(chain[1 : chain.index(repo) + 1]):
                ignores.read(folder / ".gitignore")
        return ignores

    def read(self, path: Path, base: Path | None = None) -> None:
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return
        import pathspec  # only when a folder is walked: a one-file lint does not pay for it

        folder = os.path.abspath(base or path.parent)
        self.specs.append((folder, pathspec.GitIgnoreSpec.from_lines(lines)))
        self.specs.sort(key=lambda item: item[0].count(os.sep))  # stable: a folder's .gitignore after the exclude file

    def ignored(self, path: Path, *, directory: bool) -> bool:
        absolute = os.path.abspath(path)
        verdict = None
        for folder, spec in self.specs:
            if absolute.startswith(folder + os.sep):
                relative = Path(os.path.relpath(absolute, folder)).as_posix() + ("/" if directory else "")
                result = spec.check_file(relative).include
                if result is not None:
                    verdict = result
        return bool(verdict)
