"""hacfg: fault tolerance for ML training jobs, from one small scenario file."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # `from hacfg import hookimpl` without importing pluggy for code that only wants the heartbeat.
    if name == "hookimpl":
        from hacfg.hookspecs import hookimpl

        return hookimpl
    raise AttributeError(f"module 'hacfg' has no attribute {name!r}")
