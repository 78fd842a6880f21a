"""Saves step STEP under ROOT through hacfg.checkpoint.save_step as writer NAME: its model, then,
once every file named by --wait exists, its optimizer, each file holding NAME. Touches
ROOT/../NAME.model and ROOT/../NAME.optimizer after writing each, so another writer can wait on them.
With --die-publishing, it SIGKILLs itself at the worst moment: the rename that publishes step_STEP
while no step_STEP is there."""
import argparse
import os
import signal
import sys
import time
from pathlib import Path

from hacfg.checkpoint import save_step

parser = argparse.ArgumentParser()
parser.add_argument("root", type=Path)
parser.add_argument("step", type=int)
parser.add_argument("name")
parser.add_argument("--wait", type=Path, action="append", default=[])
parser.add_argument("--die-publishing", action="store_true")
args = parser.parse_args()
flags = args.root.parent


def wait(paths):
    deadline = time.monotonic() + 60
    while not all(path.exists() for path in paths) and time.monotonic() < deadline:
        time.sleep(0.01)


def write(folder):
    (folder / "model.pt").write_text(args.name)
    (flags / f"{args.name}.model").touch()
    wait(args.wait)
    (folder / "optimizer.pt").write_text(args.name)
    (flags / f"{args.name}.optimizer").touch()


if args.die_publishing:
    final = os.fspath(args.root / f"step_{args.step}")

    def die(event, arguments):
        if event == "os.rename" and os.fspath(arguments[1]) == final and not os.path.exists(final):
            os.kill(os.getpid(), signal.SIGKILL)

    sys.addaudithook(die)

save_step(args.root, args.step, write)
