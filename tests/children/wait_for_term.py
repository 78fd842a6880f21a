"""Waits for SIGTERM, SIGINT or SIGHUP, says which, exits 0 (a graceful shutdown).

The signals are blocked and taken with sigwait, not by handlers: CPython runs a handler between
bytecodes, so one that lands after the last check but before a long sleep starts waits for the
whole sleep."""
import signal
import sys

WAITED = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
signal.pthread_sigmask(signal.SIG_BLOCK, WAITED)
print("ready", flush=True)
print(f"got {signal.Signals(signal.sigwait(WAITED)).name}", flush=True)
sys.exit(0)
