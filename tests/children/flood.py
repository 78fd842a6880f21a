"""Writes argv[1] MiB without a single newline, then fails with a marker at the very end."""
import os
import sys

chunk = b"x" * (1 << 20)
for _ in range(int(sys.argv[1])):
    os.write(1, chunk)
os.write(2, b"NCCL error: unhandled system error")
sys.exit(1)
