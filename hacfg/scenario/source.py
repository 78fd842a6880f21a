"""Read YAML and JSON into plain data, keeping where every key and value stands.

The data is ordinary dicts, lists and scalars, so pydantic and the rules need no special
types; positions live beside it in two maps keyed by the logical path (``("restart", "max")``).
YAML goes through libyaml's composer: a node graph with marks, 30x faster than a pure-Python
parser, which matters when a linter reads hundreds of files. JSON is checked by the stdlib's
C decoder, then read for positions by a small reader over the same text (libyaml would cap
keys at 1024 characters; the platform allows environment names of 8192).

Scalars follow the YAML 1.2 core schema (``on``, ``yes`` and ``no`` are strings), like
ruamel.yaml, which ``hacfg fix`` uses to write files back.
"""

from __future__ import annotations

import bisect
import codecs
import math
import re
from pathlib import Path
from typing import Any, NamedTuple

import yaml

Key = str | int
LogicalPath = tuple[Key, ...]

# An alias bomb ("billion laughs") is a small graph that expands to a huge tree.
MAX_NODES = 100_000
MAX_DEPTH = 200
MAX_BYTES = 16 << 20  # scenario files and request bodies are kilobytes; refuse before parsing a monster
# Python's own limit for int <-> str (its default), so every integer read can be printed again.
MAX_INT_DIGITS = 4300

_PLAIN = "!plain"
_STANDARD_TAG = "tag:yaml.org,2002:"
_ALLOWED_TAGS = {_STANDARD_TAG + t for t in ("str", "int", "float", "bool", "null", "map", "seq")}


class Span(NamedTuple):
    """Where something stands in a file: 1-based line and column, end exclusive."""

    file: str
    line: int
    column: int
    end_line: int
    end_column: int


class InputError(Exception):
    """Input the user can fix. Renders as one line: ``file:line:col: message``."""

    def __init__(self, message: str, span: Span | None = None, file: str | None = None):
        super().__init__(message)
        self.message = message
        self.span = span
        self.file = span.file if span else file

    def __str__(self) -> str:
        if self.span:
            return f"{self.span.file}:{self.span.line}:{self.span.column}: {self.message}"
        if self.file:
            return f"{self.file}: {self.message}"
        return self.message


def dotted(path: LogicalPath) -> str:
    """``("metadata", "annotations", "a/b")`` -> ``metadata.annotations."a/b"``."""
    parts = []
    for key in path:
        if isinstance(key, int):
            parts.append(f"[{key}]")
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", key):
            parts.append(("." if parts else "") + key)
        else:
            import json  # quotes the rare key that is no name: most paths, and lints, never need it

            parts.append(("." if parts else "") + json.dumps(key))
    return "".join(parts)


def lookup(tree: Any, path: LogicalPath) -> Any:
    """The value at ``path`` in nested mappings and lists (an int steps into a list), or None where any
    step is missing."""
    for key in path:
        if isinstance(tree, list) and isinstance(key, int) and not isinstance(key, bool):
            if not 0 <= key < len(tree):
                return None
        elif not isinstance(tree, dict) or key not in tree:
            return None
        tree = tree[key]
    return tree


def closest(word: object, choices: list[str]) -> str | None:
    """The one choice close to ``word``, ignoring case, if any."""
    import difflib

    folded = {choice.lower(): choice for choice in choices}  # GPU is meant as gpu
    close = difflib.get_close_matches(str(word).lower(), list(folded), n=1, cutoff=0.5)
    return folded[close[0]] if close else None


def did_you_mean(word: object, choices: list[str]) -> str:
    """``; did you mean 'max'?`` when one choice is close, ignoring case, else nothing."""
    close = closest(word, choices)
    return f"; did you mean {close!r}?" if close else ""


class Document:
    """A parsed file: its data, and the span of every value and mapping key in it. (A plain class:
    a dataclass's generated methods were compiled by every lint at import.)"""

    __slots__ = ("data", "keys", "path", "text", "values")

    def __init__(
        self,
        path: str,
        text: str,
        data: Any,
        values: dict[LogicalPath, Span] | None = None,
        keys: dict[LogicalPath, Span] | None = None,
    ):
        self.path = path
        self.text = text
        self.data = data
        self.values: dict[LogicalPath, Span] = {} if values is None else values
        self.keys: dict[LogicalPath, Span] = {} if keys is None else keys

    def with_data(self, data: Any) -> Document:
        """The same file and spans, read as ``data``."""
        return Document(self.path, self.text, data, self.values, self.keys)

    def __repr__(self) -> str:
        return f"Document({self.path!r})"

    def span(self, path: LogicalPath, *, key: bool = False) -> Span:
        """The span at ``path``, or of the nearest enclosing node that exists."""
        path = tuple(path)
        if key and path in self.keys:
            return self.keys[path]
        while path:
            if path in self.values:
                return self.values[path]
            path = path[:-1]
        return self.values.get((), Span(self.path, 1, 1, 1, 1))


def load(path: str | Path) -> Document:
    """Read and parse one file; every problem is an :class:`InputError`."""
    return parse(read(path), str(path))


def load_all(path: str | Path) -> list[Document]:
    """Read and parse every document of one file (``---`` separates them in YAML)."""
    return parse_all(read(path), str(path))


def read(path: str | Path) -> str:
    """A file's text, refused when it is not a readable UTF-8 file of a sensible size."""
    name = str(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except IsADirectoryError:
        raise InputError("is a directory, not a file", file=name) from None
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", file=name) from None
    return _text(raw, name)


def parse_bytes(raw: bytes, name: str) -> Document:
    """A file's bytes as :func:`load` reads them: size, encoding, then YAML or JSON."""
    return parse(_text(raw, name), name)


def _text(raw: bytes, name: str) -> str:
    if len(raw) > MAX_BYTES:
        raise InputError(
            f"file is larger than {MAX_BYTES >> 20} MiB; hacfg reads scenario files and request bodies",
            Span(name, 1, 1, 1, 1),
        )
    return decode(raw, name)


def decode(raw: bytes, name: str) -> str:
    """UTF-8 text (a BOM is allowed); anything else names the first bad byte's position."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError("file is UTF-16; save it as UTF-8", Span(name, 1, 1, 1, 1))
    try:
        text = raw.removeprefix(codecs.BOM_UTF8).decode("utf-8")  # "utf-8-sig", without importing its codec
    except UnicodeDecodeError as err:
        line, column = _line_col(raw, err.start)
        raise InputError(
            f"invalid UTF-8 byte 0x{raw[err.start]:02x}", Span(name, line, column, line, column + 1)
        ) from None
    nul = text.find("\0")
    if nul >= 0:
        line, column = _line_col(text, nul)
        raise InputError("NUL character: this looks like a binary file", Span(name, line, column, line, column + 1))
    return text


# What libyaml counts as a line break, so line numbers and columns mean the same here as in its marks.
# This and the patterns below are compiled (and kept by re's cache) when first used, not by every
# lint that imports this module: most never place a fix or read JSON.
_LINE_BREAK = "\r\n|[\r\n\x85\u2028\u2029]"


def line_starts(text: str) -> list[int]:
    """The offset at which each line of ``text`` starts, breaking lines where libyaml does."""
    return [0, *(match.end() for match in re.finditer(_LINE_BREAK, text))]


def _line_col(text: str | bytes, offset: int) -> tuple[int, int]:
    if isinstance(text, bytes):
        text = text.decode("latin-1")  # one character per byte: offsets stay as they are
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def parse(text: str, name: str) -> Document:
    """Parse YAML, or JSON when ``name`` ends in ``.json``: one document."""
    return parse_all(text, name, single=True)[0]


def parse_all(text: str, name: str, *, single: bool = False) -> list[Document]:
    """Every document of a YAML stream, or the one of a JSON file; ``single`` refuses a second one."""
    if name.endswith(".json"):
        return [parse_json(text, name)]
    loader = _Loader(text)
    try:
        if single:
            nodes = [loader.get_single_node()]
        else:
            nodes = []
            while loader.check_node():
                nodes.append(loader.get_node())
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        if mark is None:
            raise InputError(_yaml_message(err, ""), file=name) from None
        message = _yaml_message(err, text[mark.index : mark.index + 1])
        raise InputError(message, _mark_span(name, mark, mark)) from None
    except yaml.reader.ReaderError as err:
        line, column = _line_col(text, err.position)
        character = err.character if isinstance(err.character, int) else ord(err.character)
        raise InputError(
            f"control character 0x{character:02x} is not allowed in YAML", Span(name, line, column, line, column + 1)
        ) from None
    except yaml.YAMLError as err:
        raise InputError(f"invalid YAML: {str(err).splitlines()[0]}", file=name) from None
    except RecursionError:
        raise InputError(f"nesting deeper than {MAX_DEPTH} levels", file=name) from None
    finally:
        loader.dispose()
    documents = []
    for node in nodes or [None]:
        document = Document(name, text, None)
        if node is not None:
            document.data = _Builder(document).build(node, ())
        documents.append(document)
    return documents


def _yaml_message(err: yaml.MarkedYAMLError, at: str) -> str:
    """libyaml's words for the mistakes people make, in theirs."""
    problem = err.problem or ""
    if problem.startswith("found character that cannot start any token") and at == "\t":
        return "a tab in indentation: YAML indents with spaces only"
    if problem.startswith("mapping values are not allowed"):
        return (
            "unexpected ':': this line is indented deeper than the key above it, or a value holds ': ' and needs quotes"
        )
    if problem == "did not find expected key" and err.context == "while parsing a block mapping":
        return "bad indentation: this line does not line up with the keys above it"
    return ", ".join(part for part in (err.context, err.problem) if part) or "invalid YAML"


def parse_json(text: str, name: str) -> Document:
    """Strict JSON, every key and value with its position, whatever the file is called."""
    import json  # only for a JSON file: a lint of YAML files does without the module

    try:
        # the C decoder: strict JSON's verdict and message; the reader then reads each number, with its position
        json.loads(text, parse_int=len)
    except json.JSONDecodeError as err:
        raise InputError(
            f"invalid JSON: {err.msg}", Span(name, err.lineno, err.colno, err.lineno, err.colno + 1)
        ) from None
    except RecursionError:
        raise InputError(f"nesting deeper than {MAX_DEPTH} levels", file=name) from None
    document = Document(name, text, None)
    document.data = _JsonReader(document).read()
    return document


_JSON_SPACE = r"[ \t\n\r]*"
_JSON_NUMBER = r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?"
_JSON_WORDS = {"true": True, "false": False, "null": None}


class _JsonReader:
    """Positions of every key and value in text the stdlib decoder has accepted, as libyaml marks them.

    Spans are measured in characters, with lines broken where libyaml breaks them, so ``hacfg fix``
    edits the same offsets in JSON as in YAML. ``NaN`` and ``Infinity``, which the stdlib lets
    through, are not JSON and are refused here.
    """

    def __init__(self, document: Document):
        from json.decoder import scanstring  # type: ignore[attr-defined]

        self.document = document
        self.text = document.text
        self.starts = line_starts(document.text)
        self.nodes = 0
        self.scanstring = scanstring
        self.space, self.number = re.compile(_JSON_SPACE), re.compile(_JSON_NUMBER)

    def span(self, start: int, end: int) -> Span:
        starts = self.starts
        line = bisect.bisect_right(starts, start) - 1
        end_line = line if line + 1 == len(starts) or end < starts[line + 1] else bisect.bisect_right(starts, end) - 1
        return Span(self.document.path, line + 1, start - starts[line] + 1, end_line + 1, end - starts[end_line] + 1)

    def read(self) -> Any:
        value, _ = self.value(self.skip(0), ())
        return value

    def skip(self, at: int) -> int:
        """The offset of the first character at or after ``at`` that is not JSON whitespace."""
        if at < len(self.text) and self.text[at] in " \t\n\r":
            return self.space.match(self.text, at).end()  # type: ignore[union-attr]
        return at

    def value(self, at: int, path: LogicalPath) -> tuple[Any, int]:
        """The value starting at offset ``at`` (no space before it), and the offset after it."""
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise InputError(f"document has more than {MAX_NODES} nodes", self.span(at, at + 1))
        if len(path) > MAX_DEPTH:
            raise InputError(f"nesting deeper than {MAX_DEPTH} levels", self.span(at, at + 1))
        text = self.text
        first = text[at]
        value: Any
        if first == "{":
            value, end = self.mapping(at, path)
        elif first == "[":
            value, end = self.sequence(at, path)
        elif first == '"':
            value, end = self.string(at)
        else:
            number = self.number.match(text, at)
            word = next((w for w in _JSON_WORDS if text.startswith(w, at)), None)
            if number is not None and number.end() > at:
                end = number.end()
                whole = number.group(1) is None and number.group(2) is None
                try:
                    value = integer(number.group()) if whole else float(number.group())
                except TooLong as err:
                    raise InputError(str(err), self.span(at, end)) from None
            elif word is not None:
                value, end = _JSON_WORDS[word], at + len(word)
            else:
                found = re.match(r"-?[A-Za-z]+", text[at : at + 10])
                shown = found.group() if found else text[at]
                raise InputError(f"invalid JSON: {shown} is not a JSON value", self.span(at, at + len(shown)))
        self.document.values[path] = self.span(at, end)
        return value, end

    def string(self, at: int) -> tuple[str, int]:
        """The string at ``at`` and the offset after it. A ``\\ud800`` escape with no partner, which the
        decoder lets through, is no character: no file, report or terminal could hold it."""
        value, end = self.scanstring(self.text, at + 1)
        if not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError as err:
                lone = f"\\u{ord(value[err.start]):04x}"
                raise InputError(
                    f"invalid JSON: {lone} is half of a surrogate pair, not a character", self.span(at, end)
                ) from None
        return value, end

    def mapping(self, at: int, path: LogicalPath) -> tuple[dict[str, Any], int]:
        out: dict[str, Any] = {}
        keys = self.document.keys
        text = self.text
        at = self.skip(at + 1)
        if text[at] == "}":
            return out, at + 1
        while True:
            key, key_end = self.string(at)
            key_span = self.span(at, key_end)
            if key in out:
                first = keys[(*path, key)]
                raise InputError(f"duplicate key {key!r} (first defined at line {first.line})", key_span)
            keys[(*path, key)] = key_span
            at = self.skip(self.skip(key_end) + 1)  # past the colon
            out[key], at = self.value(at, (*path, key))
            at = self.skip(at)
            if text[at] == "}":
                return out, at + 1
            at = self.skip(at + 1)  # past the comma

    def sequence(self, at: int, path: LogicalPath) -> tuple[list[Any], int]:
        out: list[Any] = []
        text = self.text
        at = self.skip(at + 1)
        if text[at] == "]":
            return out, at + 1
        while True:
            item, at = self.value(at, (*path, len(out)))
            out.append(item)
            at = self.skip(at)
            if text[at] == "]":
                return out, at + 1
            at = self.skip(at + 1)


_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[misc, valid-type]
    """Marks plain scalars instead of resolving them, so explicit tags stay visible."""

    def resolve(self, kind: type[yaml.Node], value: str | None, implicit: tuple[bool, bool]) -> str:
        if kind is yaml.ScalarNode and implicit[0]:
            return _PLAIN
        tag: str = super().resolve(kind, value, implicit)
        return tag


def _mark_span(name: str, start: yaml.Mark, end: yaml.Mark) -> Span:
    return Span(name, start.line + 1, start.column + 1, end.line + 1, end.column + 1)


_NULLS = {"", "~", "null", "Null", "NULL"}
_BOOLS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_INT = re.compile(r"[-+]?[0-9]+")
_RADIX = re.compile(r"0x[0-9a-fA-F]+|0o[0-7]+")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_SPECIAL_FLOATS = {".inf": math.inf, "+.inf": math.inf, "-.inf": -math.inf, ".nan": math.nan}


def _is_a(value: object, kind: str) -> bool:
    """Whether a plain scalar's value is what the explicit tag ``!!kind`` says."""
    expected: dict[str, type | tuple[type, ...]] = {"int": int, "float": (int, float), "bool": bool, "null": type(None)}
    return isinstance(value, expected[kind]) and not (kind == "int" and isinstance(value, bool))


def resolve_plain(value: str) -> Any:
    """A plain scalar under the YAML 1.2 core schema."""
    if value in _NULLS:
        return None
    if value in _BOOLS:
        return _BOOLS[value]
    if _INT.fullmatch(value):
        return integer(value)
    if _RADIX.fullmatch(value):
        return integer(value[2:], 16 if value[1] == "x" else 8)
    if _FLOAT.fullmatch(value):
        return float(value)
    return _SPECIAL_FLOATS.get(value.lower(), value)


def _as_float(value: int | float) -> float:
    """``!!float`` of a whole number past a double's range is infinite, as ``1e400`` reads."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


class TooLong(ValueError):
    """An integer longer than hacfg reads: Python could not print it back (its int/str limit)."""

    def __init__(self) -> None:
        super().__init__(f"integer longer than {MAX_INT_DIGITS} digits")


_SHORT_INT_BITS = int(MAX_INT_DIGITS * math.log2(10))  # a value of no more bits prints in MAX_INT_DIGITS


def integer(literal: str, base: int = 10) -> int:
    """``int(literal, base)``, refusing more than :data:`MAX_INT_DIGITS` digits, in the literal or,
    for ``0x`` and ``0o`` (which Python reads at any length), in the value's decimal spelling."""
    if len(literal.lstrip("+-")) > MAX_INT_DIGITS:
        raise TooLong
    value = int(literal, base)
    if value.bit_length() > _SHORT_INT_BITS and abs(value) >= 10**MAX_INT_DIGITS:
        raise TooLong
    return value


class _Builder:
    """Turns a composed node graph into plain data, recording spans and refusing what we don't read."""

    def __init__(self, document: Document):
        self.document = document
        self.nodes = 0
        self.open: set[int] = set()

    def span(self, node: yaml.Node) -> Span:
        return _mark_span(self.document.path, node.start_mark, node.end_mark)

    def fail(self, message: str, node: yaml.Node) -> InputError:
        return InputError(message, self.span(node))

    def build(self, node: yaml.Node, path: LogicalPath) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(f"document expands to more than {MAX_NODES} nodes (alias bomb?)", node)
        if len(path) > MAX_DEPTH:
            raise self.fail(f"nesting deeper than {MAX_DEPTH} levels", node)
        if node.tag != _PLAIN and node.tag not in _ALLOWED_TAGS:
            tag = node.tag.replace(_STANDARD_TAG, "!!")
            raise self.fail(f"YAML tag {tag} is not allowed", node)
        self.document.values[path] = self.span(node)
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node)
        if id(node) in self.open:
            raise self.fail("recursive alias", node)
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.build(item, (*path, index)) for index, item in enumerate(node.value)]
            assert isinstance(node, yaml.MappingNode)  # the composer makes only these three kinds
            return self.mapping(node, path)
        finally:
            self.open.discard(id(node))

    def mapping(self, node: yaml.MappingNode, path: LogicalPath) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.fail("a mapping key must be a scalar", key_node)
            key = self.scalar(key_node)
            if key == "<<" and key_node.tag == _PLAIN:
                raise self.fail("YAML merge keys (<<) are not supported; write the keys out", key_node)
            if isinstance(key, float) or key is None or isinstance(key, bool):
                key = key_node.value
            if key in out:
                first = self.document.keys[(*path, key)]
                raise self.fail(f"duplicate key {key!r} (first defined at line {first.line})", key_node)
            self.document.keys[(*path, key)] = self.span(key_node)
            out[key] = self.build(value_node, (*path, key))
        return out

    def scalar(self, node: yaml.ScalarNode) -> Any:
        try:
            return self._scalar(node)
        except TooLong as err:
            raise self.fail(str(err), node) from None

    def _scalar(self, node: yaml.ScalarNode) -> Any:
        if node.tag == _PLAIN:
            return resolve_plain(node.value)
        kind = node.tag.removeprefix(_STANDARD_TAG)
        if kind == "str":
            return node.value
        value = resolve_plain(node.value)
        if not _is_a(value, kind):
            raise self.fail(f"{node.value!r} is not a valid !!{kind}", node)
        return _as_float(value) if kind == "float" else value
