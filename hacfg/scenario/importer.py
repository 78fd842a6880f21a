"""`hacfg import`: an existing ModelArts request body becomes a scenario file.

Every value hacfg models goes to its key, with a comment naming where it came from; every
other field, and every value the platform would not read as meant (``"True"``, ``"false"``
written out, a value that is not a string, a name it rejects), goes verbatim into
``passthrough``, which the modelarts target merges back. So ``hacfg build`` of the imported
file gives the body back exactly, and ``hacfg lint`` of it finds what lint of the body found.
"""

from __future__ import annotations

import copy
import io
import re
from typing import Any

from hacfg.scenario import modelarts as ma
from hacfg.scenario.request import environments_as_mapping, environments_note, without_read_only
from hacfg.scenario.source import MAX_DEPTH, Document, InputError, dotted, lookup, parse_bytes

# A count as the platform writes it back: no sign, no leading zero, and short enough for any limit.
_COUNT = re.compile(r"0|[1-9][0-9]{0,17}")
_NAME = re.compile(ma.JOB_NAME_PATTERN)
NODE_COUNT = ("spec", "resource", "node_count")
COMMENT_COLUMN = 36


class _Importer:
    def __init__(self, body: dict[str, Any], platform: str):
        self.body = body
        self.platform = platform
        self.values: dict[tuple[Any, ...], tuple[Any, str]] = {}  # scenario path -> (value, where it came from)
        self.passthrough = copy.deepcopy(body)
        self.notes: list[str] = []

    def take(self, path: tuple[Any, ...], value: Any, source: tuple[Any, ...], how: str = "") -> None:
        self.values[path] = (value, f"from {dotted(source)}{how}")
        _remove(self.passthrough, source)

    def unset(self, path: tuple[Any, ...], value: Any, source: tuple[Any, ...]) -> None:
        """``path`` at the value the platform takes when the request says nothing at ``source``, with a
        comment that says whether it says nothing, or says something else that passthrough keeps as written."""
        written = lookup(self.body, source)
        if written is None:
            self.values[path] = (value, "not set in the request")
        else:
            self.values[path] = (value, f"{dotted(source)} is {_shown(written)}: kept in passthrough")

    def run(self) -> None:
        body = self.body
        self._annotations(lookup(body, ("metadata", "annotations")))
        name = lookup(body, ("metadata", "name"))
        if isinstance(name, str) and _NAME.fullmatch(name):
            self.take(("job", "name"), name, ("metadata", "name"))
        nodes = lookup(body, NODE_COUNT)
        self.unset(("job", "nodes"), 1, NODE_COUNT)  # never a preset's node count
        if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes >= 1:
            self.take(("job", "nodes"), nodes, NODE_COUNT)
        elif nodes is None:  # a null in passthrough leaves out the node count hacfg would write
            _set(self.passthrough, NODE_COUNT, None)
        self._accelerator(lookup(body, ("spec", "resource", "flavor_id")))
        for field, source in (
            ("image", ("algorithm", "engine", "image_url")),
            ("command", ("algorithm", "command")),
            ("flavor", ("spec", "resource", "flavor_id")),
            ("pool", ("spec", "resource", "pool_id")),
        ):
            value = lookup(body, source)
            if isinstance(value, str) and value:
                self.take(("job", field), value, source)
        self._environments(lookup(body, ("algorithm", "environments")))
        if body.get("kind") == "job":
            _remove(self.passthrough, ("kind",))
        _prune(self.passthrough)

    def _annotations(self, annotations: Any) -> None:
        # Explicit values, so nothing of the scenario's preset leaks into what the body said.
        defaults = {
            ma.JOB_RETRY_NUM: (("restart", "max"), 0),
            ma.UNCONDITIONAL_RETRY: (("restart", "unconditional"), False),
            ma.HANG_RETRY: (("restart", "on_hang"), False),
            ma.POD_RETRY_NUM: (("restart", "pod_reschedules"), 0),
            ma.HCCL_OP_RETRY: (("operator_retry",), False),
        }
        for key, (path, value) in defaults.items():
            self.unset(path, value, ("metadata", "annotations", key))
        if not isinstance(annotations, dict):
            return
        strings = {key: self._string(key, written) for key, written in annotations.items()}
        low, high = ma.RETRY_LIMITS[self.platform]
        retries = strings.get(ma.JOB_RETRY_NUM)
        # what refines auto restart is modelled only with it: restart.max 0 would build without them
        on = isinstance(retries, str) and bool(_COUNT.fullmatch(retries)) and low <= int(retries) <= high
        for key, written in strings.items():
            source = ("metadata", "annotations", key)
            if not isinstance(written, str):
                continue
            how = "" if isinstance(annotations[key], str) else f" (written as {_shown(annotations[key])})"
            if key == ma.JOB_RETRY_NUM and on:
                self.take(("restart", "max"), int(written), source, how)
            elif key == ma.POD_RETRY_NUM and on and _COUNT.fullmatch(written) and int(written) >= 1:
                self.take(("restart", "pod_reschedules"), int(written), source, how)
            elif written == "true" and key in _SWITCHES and (on or key == ma.HCCL_OP_RETRY):
                self.take(_SWITCHES[key], True, source, how)

    def _string(self, key: str, written: Any) -> Any:
        """An annotation as the platform reads it: a number or a boolean (Table 4 writes
        ``"fault-tolerance/pod-retry-num": 3``) as its string, which build can send; anything else as written."""
        source = ("metadata", "annotations", key)
        if isinstance(written, str):
            return written
        if isinstance(written, bool | int | float):
            value = ma.annotation_string(written)
            _set(self.passthrough, source, value)
            self.notes.append(f"{dotted(source)}: {_shown(written)} is not a string; imported as {_shown(value)}")
            return value
        self.notes.append(f"{dotted(source)}: {_shown(written)} is not a string; kept as written in passthrough")
        return written

    def _accelerator(self, flavor: Any) -> None:
        """``job.accelerator`` from what the body tells: an Ascend or CPU flavor, or operator re-execution,
        which only Ascend runs; else the scenario's default."""
        retry = ("metadata", "annotations", ma.HCCL_OP_RETRY)
        told = ma.accelerator_of(flavor) if isinstance(flavor, str) else None
        if told is not None:
            self.values[("job", "accelerator")] = (told, "from spec.resource.flavor_id")
        elif lookup(self.body, retry) in ("true", True):
            self.values[("job", "accelerator")] = ("npu", f"from {dotted(retry)} (operator retry runs on Ascend only)")

    def _environments(self, environments: Any) -> None:
        if not isinstance(environments, dict):
            return
        for key, value in environments.items():
            source = ("algorithm", "environments", key)
            if not isinstance(key, str) or not isinstance(value, str):
                continue
            if (
                key == ma.HANG_DETECT_TIME
                and _COUNT.fullmatch(value)
                and int(value) not in (0, ma.DEFAULT_HANG_MINUTES)
                and int(value) <= _LONGEST_MINUTES
            ):
                self.take(("hang", "timeout"), f"{int(value)}m", source)
            elif key == ma.PRECHECK_SWITCH and value == "0":
                self.take(("precheck",), False, source)
            elif key not in ma.SETTABLE_PLATFORM_VARIABLES:  # the others stay in passthrough, judged there
                self.take(("job", "environment", key), value, source)

    def scenario(self) -> dict[str, Any]:
        nodes = self.values[("job", "nodes")][0]
        pod_reschedules = self.values.get(("restart", "pod_reschedules"), (0, ""))[0]
        scenario = "llm-long-term" if pod_reschedules else "multi-node" if nodes > 1 else "single-node"
        tree: dict[str, Any] = {"version": 1, "scenario": scenario}
        if self.platform != "huaweicloud":
            tree["platform"] = self.platform
        for path, (value, _) in sorted(self.values.items(), key=lambda item: _ORDER.index(item[0][0])):
            _set(tree, path, value)
        if self.passthrough:
            tree["passthrough"] = self.passthrough
        return tree


def _shown(value: Any) -> str:
    """A request's value as the request wrote it: ``"True"``, ``3``."""
    import json

    shown = json.dumps(value, ensure_ascii=False)
    return shown if len(shown) <= 40 else shown[:37] + "..."


_SWITCHES = {
    ma.UNCONDITIONAL_RETRY: ("restart", "unconditional"),
    ma.HANG_RETRY: ("restart", "on_hang"),
    ma.HCCL_OP_RETRY: ("operator_retry",),
}
_ORDER = ["job", "checkpoint", "restart", "hang", "operator_retry", "precheck"]
_LONGEST_MINUTES = 999_999_999 * 24 * 60  # what a hang.timeout can say; a longer one stays in the environment


def import_body(document: Document, *, platform: str = "huaweicloud") -> tuple[str, list[str]]:
    """The scenario file's text, and notes about values read differently from how they were written."""
    if not isinstance(document.data, dict) or not ({"kind", "metadata"} & set(document.data)):
        raise InputError("not a ModelArts request body (no top-level kind or metadata)", document.span(()))
    notes = []
    if (pairs := environments_as_mapping(document)) is not None:
        document = pairs
        notes.append(environments_note())
    body, removed = without_read_only(document.data)
    notes += [f"{dotted(at)}: left out: the platform sets it, a create request does not" for at in removed]
    deepest = max(document.values, key=len)
    if len(deepest) >= MAX_DEPTH:  # passthrough holds the body one level deeper than it stands
        raise InputError(
            f"nested {len(deepest)} levels deep: under passthrough that is past the {MAX_DEPTH} levels hacfg reads",
            document.span(deepest),
        )
    importer = _Importer(body, platform)
    importer.run()
    text = _render(importer, document.path)
    _check(text, document.path)
    return text, notes + importer.notes


def _check(text: str, source_name: str) -> None:
    """Refuse to hand back a scenario file that hacfg would refuse to read or validate."""
    from hacfg.scenario.config import ConfigInvalid, validate

    try:
        validate(parse_bytes(text.encode(), "imported.yaml"))
    except InputError as err:
        raise InputError(f"cannot import: {err.message} (in the scenario it would write)", file=source_name) from None
    except ConfigInvalid as err:
        first = err.errors[0]
        raise InputError(f"cannot import: {first.message} (in the scenario it would write)", file=source_name) from None


def _render(importer: _Importer, source_name: str) -> str:
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    def commented(tree: Any, path: tuple[Any, ...] = ()) -> Any:
        if not isinstance(tree, dict):
            return tree
        node = CommentedMap()
        for key, value in tree.items():
            node[key] = (
                commented(value, (*path, key)) if path[:1] != ("passthrough",) and key != "passthrough" else value
            )
            origin = importer.values.get((*path, key))
            if origin is not None and not isinstance(value, dict):
                node.yaml_add_eol_comment(origin[1], key, column=COMMENT_COLUMN)
        return node

    tree = commented(importer.scenario())
    if "passthrough" in tree:
        tree.yaml_set_comment_before_after_key(
            "passthrough", before="Request fields hacfg does not model, kept verbatim: hacfg build merges them back."
        )
    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = 4096
    out = io.StringIO()
    out.write(f"# Imported from {source_name} by hacfg import.\n")
    out.write("# Set checkpoint.path (and interval, resume): a request body does not say where checkpoints live.\n")
    yaml.dump(tree, out)
    return out.getvalue()


def _set(tree: dict[Any, Any], path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def _remove(tree: Any, path: tuple[Any, ...]) -> None:
    parent = lookup(tree, path[:-1]) if len(path) > 1 else tree
    if isinstance(parent, dict):
        parent.pop(path[-1], None)


def _prune(tree: Any) -> None:
    """Drop mappings the import emptied (an annotations map all of whose keys were modelled)."""
    if isinstance(tree, dict):
        for key in list(tree):
            _prune(tree[key])
            if (
                isinstance(tree[key], dict)
                and not tree[key]
                and key in ("annotations", "environments", "engine", "resource", "metadata", "algorithm", "spec")
            ):
                del tree[key]
