"""A module beside the probe: imported by each attempt itself, never by a warm interpreter."""

print("helper imported", flush=True)


def square(x: int) -> int:
    return x * x
