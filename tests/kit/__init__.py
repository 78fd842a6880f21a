"""Helpers the tests share, imported by name (``from kit.agents import agent``); the fixtures are in
``tests/conftest.py``. No test module imports another."""
