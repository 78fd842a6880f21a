"""Reading back what others may have written: JSON with limits, text made printable."""

from __future__ import annotations

import time

import pytest

from hacfg import untrusted


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[" * 200_000 + "]" * 200_000, "nested deeper than 32 levels"),  # a RecursionError in json.loads
        ('{"a": ' * 33 + "1" + "}" * 33, "nested deeper than 32 levels"),
        ("1" * 401, "an integer of 401 digits"),  # an OverflowError wherever it met a float
        ("[1e308, 1e400]", "a number beyond a double's range: 1e400"),  # infinite
        ('{"x": NaN}', "NaN is not JSON"),
        ("-Infinity", "-Infinity is not JSON"),
        (b'{"a": "\xff"}', "not UTF-8"),
        ("x" * 11, "larger than 10 bytes"),
        ("{", "Expecting property name"),
    ],
)
def test_what_hacfg_would_not_have_written_is_unreadable(text, why):
    with pytest.raises(untrusted.Unreadable, match=why):
        untrusted.loads(text, limit=10 if why.startswith("larger") else 1 << 20)


def test_brackets_in_strings_and_what_the_agent_writes_read_as_json():
    document = '{"stack": ["f ([[[[[[ x.py:1)"], "deep": ' + "[" * 31 + "]" * 31 + ', "n": 18446744073709551615}'
    assert untrusted.loads(document, limit=1 << 20)["n"] == 2**64 - 1
    assert untrusted.depth(r'["\"[[[", {"a": [1]}]') == 3


def test_nesting_is_measured_in_time_that_grows_with_the_text_only():
    started = time.process_time()
    assert untrusted.depth("[" * 10_000_000 + "]" * 10_000_000) == 10_000_000
    assert untrusted.depth("[]" * 1_000_000) == 1
    assert time.process_time() - started < 2


def test_control_characters_are_shown_as_escapes():
    # what a trainer's exception message can hold: set the window title, clear the screen, ring the bell
    hostile = "boom\x1b]0;pwned\x07\x1b[2J\x1b[H\r\nnext\tline\x9b31m\x7f"
    shown = untrusted.printable(hostile)
    assert shown == "boom\\e]0;pwned\\a\\e[2J\\e[H\\r\\nnext\\tline\\x9b31m\\x7f"
    assert all(ch.isprintable() for ch in shown)
    assert untrusted.printable("plain text, ünïcode ✓") == "plain text, ünïcode ✓"
