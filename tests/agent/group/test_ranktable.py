"""The rank table (RANK_TABLE_FILE) read as HCCL's guide writes it, versions 1.0 and 1.2, from the guide's own
examples and files that ship with Ascend's and MindSpore's code (tests/data/ranktable/README.md says where each
comes from)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from kit.paths import REPO

from hacfg.agent.group import ranktable
from hacfg.scenario.source import InputError

TABLES = REPO / "tests" / "data" / "ranktable"


def without_comments(text: str) -> str:
    """The guide's example as the guide says to use it: its // comments deleted (none stands inside a string)."""
    lines = []
    for line in text.splitlines():
        in_string, cut = False, len(line)
        for index, char in enumerate(line):
            if char == '"':
                in_string = not in_string
            elif char == "/" and line[index:index + 2] == "//" and not in_string:
                cut = index
                break
        lines.append(line[:cut].rstrip())
    return "\n".join(lines) + "\n"


def table_file(tmp_path, name: str):
    path = tmp_path / "rank_table.json"
    path.write_text(without_comments((TABLES / name).read_text()))
    return path


@pytest.mark.parametrize(("name", "version", "servers", "size"), [
    ("cann-a3-superpod-1.2.jsonc", "1.2", [("node_0", [(0, 0), (1, 1), (2, 2), (3, 3)]), ("node_1", [(4, 0), (5, 1), (6, 2), (7, 3)]),
                                            ("node_2", [(8, 0), (9, 1), (10, 2), (11, 3)]), ("node_3", [(12, 0), (13, 1), (14, 2), (15, 3)])], 16),
    ("cann-a3-typical-1.0.jsonc", "1.0", [("node_0", [(0, 0), (1, 1)]), ("node_1", [(2, 0), (3, 1)])], 4),
    ("cann-300i-duo-1.0.jsonc", "1.0", [("node_0", [(0, 0), (1, 1)]), ("node_1", [(2, 0), (3, 1)])], 4),
    ("mindspore-rank_table_2pcs.json", "1.0", [("10.*.*.*", [(0, 0), (1, 1)])], 2),
])  # fmt: skip
def test_the_guides_tables_read_as_servers_of_ranked_devices(tmp_path, name, version, servers, size):
    table = ranktable.read_table(table_file(tmp_path, name))
    assert isinstance(table, ranktable.RankTable)
    assert table.version == version and table.size == size
    assert [(server.server_id, list(server.devices)) for server in table.servers] == servers
    assert table.server_of(size - 1) == len(servers) - 1 and table.server_of(size) is None


def test_the_guides_example_with_its_comments_is_not_json_and_says_where(tmp_path):
    path = tmp_path / "rank_table.json"
    path.write_text((TABLES / "cann-a3-typical-1.0.jsonc").read_text())
    with pytest.raises(InputError) as caught:
        ranktable.read_table(path)
    assert str(caught.value) == f"{path}:2:29: rank table is not JSON: Expecting property name enclosed in double quotes"


def test_a_table_whose_ranks_are_not_the_jobs_is_refused_at_the_rank(tmp_path):
    """MindIE-PyMotor's one-server test table names ranks 0 and 7 of two devices: the guide's range is 0 to 1."""
    path = table_file(tmp_path, "mindie-hccl_a3.json")
    with pytest.raises(InputError) as caught:
        ranktable.read_table(path)
    assert str(caught.value) == f"{path}:18:32: rank table: rank_id 7 is outside the job's ranks (0 to 1)"


def broken(tmp_path, change) -> str:
    data = json.loads(without_comments((TABLES / "cann-a3-typical-1.0.jsonc").read_text()))
    change(data)
    path = tmp_path / "rank_table.json"
    path.write_text(json.dumps(data, indent=1))
    with pytest.raises(InputError) as caught:
        ranktable.read_table(path)
    assert str(caught.value).startswith(f"{path}:")
    return str(caught.value).split(": ", 1)[1]


@pytest.mark.parametrize(("change", "says"), [
    (lambda t: t.update(status="done"), "rank table: status 'done': expected 'completed' or 'initializing'"),
    (lambda t: t.update(version="2.0"), "rank table: version '2.0': hacfg reads rank tables 1.0 and 1.2"),
    (lambda t: t.pop("server_count"), "rank table: no server_count"),
    (lambda t: t.update(server_count="3"), "rank table: server_count 3 but server_list has 2"),
    (lambda t: t.update(server_list=[]), "rank table: server_list is empty: the job has no server"),
    (lambda t: t.update(server_list={"node_0": []}), "rank table: server_list is an object, expected a list"),
    (lambda t: t["server_list"][1].update(server_id="node_0"), "rank table: server_id 'node_0' appears twice"),
    (lambda t: t["server_list"][1]["device"][1].update(rank_id="2"), "rank table: rank_id '2' appears twice"),
    (lambda t: t["server_list"][0]["device"][1].update(device_id="0"), "rank table: device_id '0' appears twice"),
    (lambda t: t["server_list"][0]["device"][0].update(rank_id="-1"), "rank table: rank_id '-1' is not an integer from 0"),
    (lambda t: t["server_list"][0]["device"][0].pop("device_id"), "rank table: no device_id"),
    (lambda t: (t["server_list"][0]["device"][1].update(rank_id="3"), t["server_list"][1]["device"][1].update(rank_id="1")),
     "rank table: server 'node_0' has ranks [0, 3]: each server's ranks are one block"),
    (lambda t: t.update(server_group_list=t.pop("server_list")), "rank table: no server_list"),
])  # fmt: skip
def test_a_malformed_table_is_one_line_at_what_is_wrong(tmp_path, change, says):
    assert broken(tmp_path, change) == says


def test_a_table_still_being_written_is_waited_for(tmp_path):
    path = tmp_path / "rank_table.json"
    said = []

    def complete():  # as the platform does, once the agent waits for it
        while not said:
            time.sleep(0.01)
        path.write_text(without_comments((TABLES / "cann-300i-duo-1.0.jsonc").read_text()))

    threading.Thread(target=complete).start()
    table = ranktable.wait_for(path, 10, said.append, poll=0.05)
    assert table.size == 4 and said == [f"[hacfg] RANK_TABLE_FILE {path} is missing: waiting up to 10s for the platform to complete it"]
    path.write_text(path.read_text().replace('"completed"', '"initializing"'))
    with pytest.raises(ranktable.NotReady, match=r"is still initializing after 0.2s"):
        ranktable.wait_for(path, 0.2, said.append, poll=0.05)
