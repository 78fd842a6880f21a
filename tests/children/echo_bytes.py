"""Writes every byte value, on stdout and stderr, without newlines, then succeeds."""
import os

data = bytes(range(256)) * 64
os.write(1, data)
os.write(2, data[::-1])
