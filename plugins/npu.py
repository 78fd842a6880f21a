"""The NPU pre-check of an Ascend job (``accelerator: npu``): the cards are there, and each is healthy.

The devices are the container's ``/dev/davinci<N>`` and the driver's ``/dev/davinci_manager``. Health
is what ``npu-smi info -t health -i <id>`` prints for each NPU ID that ``npu-smi info -l`` lists:
one of OK, Warning (minor alarm), Alarm (major alarm), Critical (critical alarm) and UNKNOWN (the
device does not exist or is not started), with an error code to look up in the product's black-box
error code list (the Ascend npu-smi reference, "查询所有芯片健康状态" and "查询指定芯片健康状态").

A Critical or UNKNOWN device fails the check: the job moves to other hardware (exit 138). Warning and
Alarm are logged with their error code, and the job starts. An ``npu-smi`` that is missing, does not
answer, or prints no health fails too: a device whose health cannot be read is not trusted.
"""

from __future__ import annotations

import glob
import re
import shutil
import subprocess
from typing import TYPE_CHECKING, NamedTuple

from hacfg.plugin import Precheck, PrecheckContext, PrecheckResult, hookimpl

if TYPE_CHECKING:
    from hacfg.plugin import Status

NAME = "npu-check"
# npu-smi's health states, mildest first.
HEALTHY, LOGGED, FAULTY = ("OK",), ("Warning", "Alarm"), ("Critical", "UNKNOWN")
MEANING = {"Warning": "minor alarm", "Alarm": "major alarm", "Critical": "critical alarm",
           "UNKNOWN": "the device does not exist or is not started"}  # fmt: skip
_FIELD = re.compile(r"^\s*([A-Za-z][A-Za-z ()]*?)\s*:\s*(.*?)\s*$")  # "        Health                         : OK"
_NOT_GIVEN = ("", "NA")


class Unreadable(Exception):
    """npu-smi could not be run, or did not print what its reference describes."""


class Health(NamedTuple):
    """One device as ``npu-smi info -t health -i <id>`` describes it: its worst chip's state, and the error codes."""

    state: str
    codes: tuple[str, ...]
    information: tuple[str, ...]

    def detail(self) -> str:
        found = [f"error code {' '.join(self.codes)}" if self.codes else "", "; ".join(self.information)]
        return ": ".join(part for part in [MEANING.get(self.state, ""), *found] if part)


class NpuCheck(Precheck):
    """Ascend jobs see their cards and the driver's manager device, and no card is Critical or UNKNOWN."""

    name = NAME

    def run(self, ctx: PrecheckContext) -> list[PrecheckResult]:
        if ctx.policy.accelerator != "npu":
            accelerator = ctx.policy.accelerator or "unknown without --config"
            return [PrecheckResult(self.name, "skipped", detail=f"accelerator is {accelerator}")]
        settings = ctx.settings
        devices = sorted(glob.glob(settings.npu_devices))
        need = ctx.policy.cards or 1  # every card the node asked for (job.cards, or its flavor's), else any
        count = str(len(devices))
        found = PrecheckResult(f"{self.name} devices", "passed", count, f">={need}", detail=settings.npu_devices)
        if not devices:
            return [found._replace(status="failed", detail=f"no {settings.npu_devices}: the container has no NPU")]
        if len(devices) < need:
            return [found._replace(status="failed", detail=f"{settings.npu_devices}: {need} per node asked for")]
        if not settings.npu_manager.exists():
            detail = f"{settings.npu_manager} does not exist: the NPU driver's manager device is not in the container"
            return [found._replace(status="failed", detail=detail)]
        smi = shutil.which(settings.npu_smi)
        if smi is None:
            detail = f"{settings.npu_smi} not found: cannot read the NPUs' health (HACFG_PRECHECK_NPU_SMI names it)"
            return [found, PrecheckResult(f"{self.name} health", "failed", detail=detail)]
        try:
            ids = npu_ids(_npu_smi(smi, ["info", "-l"], settings.npu_smi_timeout))
            return [found, *(self.health(smi, npu, settings.npu_smi_timeout) for npu in ids)]
        except Unreadable as err:
            return [found, PrecheckResult(f"{self.name} health", "failed", detail=str(err))]

    def health(self, smi: str, npu: int, timeout: float) -> PrecheckResult:
        item = f"{self.name} npu {npu}"
        try:
            health = read_health(_npu_smi(smi, ["info", "-t", "health", "-i", str(npu)], timeout))
        except Unreadable as err:
            return PrecheckResult(item, "failed", detail=str(err))
        status: Status = "failed" if health.state in FAULTY else "passed"
        return PrecheckResult(item, status, health.state, "not Critical or UNKNOWN", health.detail())


def _npu_smi(smi: str, arguments: list[str], timeout: float) -> str:
    command = f"npu-smi {' '.join(arguments)}"
    try:
        done = subprocess.run([smi, *arguments], capture_output=True, text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Unreadable(f"{command} did not answer within {timeout:g}s") from None
    except OSError as err:
        raise Unreadable(f"cannot run {smi}: {err.strerror or err}") from None
    if done.returncode != 0:
        said = _last_line(done.stdout + done.stderr) or "nothing"
        raise Unreadable(f"{command} exited {done.returncode}: {said}")
    return done.stdout


def npu_ids(listing: str) -> list[int]:
    """The NPU IDs ``npu-smi info -l`` lists (``NPU ID : 0``)."""
    ids = [int(value) for key, value in _fields(listing) if key == "NPU ID" and value.isdigit()]
    if not ids:
        raise Unreadable(f"npu-smi info -l listed no NPU ID: {_last_line(listing) or 'nothing'}")
    return ids


def read_health(text: str) -> Health:
    """A device's health: the worst state of its chips (``Health``, or ``Health Status`` for one chip) and
    every error code and information given."""
    fields = _fields(text)
    states = [value for key, value in fields if key in ("Health", "Health Status")]
    order = (*HEALTHY, *LOGGED, *FAULTY)
    unknown = [state for state in states if state not in order]
    if not states or unknown:
        said = f"health {unknown[0]!r}" if unknown else repr(_last_line(text) or "nothing")
        raise Unreadable(f"npu-smi printed {said}, not one of {', '.join(order)}")

    def given(name: str) -> tuple[str, ...]:
        return tuple(value for key, value in fields if key == name and value not in _NOT_GIVEN)

    return Health(max(states, key=order.index), given("Error Code"), given("Error Information"))


def _fields(text: str) -> list[tuple[str, str]]:
    return [(match[1], match[2]) for line in text.splitlines() if (match := _FIELD.match(line))]


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


@hookimpl
def hacfg_prechecks() -> list[Precheck]:
    return [NpuCheck()]
