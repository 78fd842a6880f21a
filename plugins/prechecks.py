"""The platform's environment pre-checks: dns, disk-size root/shm/cache, ulimit, gpu-check."""

from __future__ import annotations

import contextlib
import glob
import os
import resource
import shutil
import socket
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

from hacfg.plugin import Precheck, PrecheckContext, PrecheckResult, hookimpl, human_size


class Dns(Precheck):
    """Every host of the job resolves: Volcano's ``/etc/volcano/*.host`` files, or ``VC_WORKER_HOSTS``."""

    name = "dns"

    def run(self, ctx: PrecheckContext) -> list[PrecheckResult]:
        hosts = self.hosts(ctx)
        if not hosts:
            return [PrecheckResult(self.name, "skipped", detail="no hosts file and no VC_WORKER_HOSTS")]
        pool = ThreadPoolExecutor(max_workers=min(16, len(hosts)))
        futures = {pool.submit(socket.getaddrinfo, host, None): host for host in hosts}
        done, pending = wait(futures, timeout=ctx.settings.dns_timeout)
        pool.shutdown(wait=False, cancel_futures=True)
        failed = sorted(futures[f] for f in done if f.exception() is not None) + sorted(futures[f] for f in pending)
        value = f"{len(hosts) - len(failed)}/{len(hosts)}"
        if failed:
            return [
                PrecheckResult(self.name, "failed", value, need="all resolve", detail=f"unresolved: {','.join(failed)}")
            ]
        return [PrecheckResult(self.name, "passed", value, need="all resolve")]

    @staticmethod
    def hosts(ctx: PrecheckContext) -> list[str]:
        found: list[str] = []
        for host_file in sorted(glob.glob(str(ctx.settings.hosts_dir / "*.host"))):
            found += Path(host_file).read_text().split()
        if not found:
            found = [h.strip() for h in ctx.environ.get("VC_WORKER_HOSTS", "").split(",") if h.strip()]
        return sorted(set(found))


class DiskSize(Precheck):
    """The container root, /dev/shm and /cache are big enough (/cache is skipped when absent)."""

    name = "disk-size"

    def run(self, ctx: PrecheckContext) -> list[PrecheckResult]:
        s = ctx.settings
        return [
            self.check("root", s.root_path, s.root_min, optional=False),
            self.check("shm", s.shm_path, s.shm_min, optional=False),
            self.check("cache", s.cache_path, s.cache_min, optional=True),
        ]

    def check(self, which: str, path: Path, minimum: int, *, optional: bool) -> PrecheckResult:
        name = f"{self.name} {which}"
        need = f">{human_size(minimum)}"
        if not path.exists():
            return PrecheckResult(name, "skipped" if optional else "failed", need=need, detail=f"{path} does not exist")
        total = shutil.disk_usage(path).total
        if total > minimum:
            return PrecheckResult(name, "passed", human_size(total), need)
        detail = self.mounted(path)
        if which == "shm":  # a container runtime's 64MiB tmpfs: the pod mounts no memory volume there
            detail += "; a pod needs an emptyDir {medium: Memory} there (the Kubernetes targets write one)"
        return PrecheckResult(name, "failed", human_size(total), need, detail=detail)

    @staticmethod
    def mounted(path: Path) -> str:
        """What is mounted at ``path``, as this container's own mount table says."""
        where = os.path.realpath(path)
        found = f"no mount of its own at {where}"
        with contextlib.suppress(OSError), open("/proc/self/mountinfo") as table:
            for line in table:
                fields = line.split()
                dash = fields.index("-") if "-" in fields else -1
                if dash > 0 and fields[4].replace("\\040", " ") == where:
                    found = f"a {fields[dash + 1]} mounted at {where} ({fields[dash + 3]})"  # the last mount wins
        return found


class Ulimit(Precheck):
    """On InfiniBand: locked memory, open files, stack size and processes above the platform's minimums."""

    name = "ulimit"

    def run(self, ctx: PrecheckContext) -> list[PrecheckResult]:
        if ctx.policy.network != "infiniband":
            return [PrecheckResult(self.name, "skipped", detail=f"network is {ctx.policy.network}, not infiniband")]
        s = ctx.settings
        limits = [
            ("max locked memory", resource.RLIMIT_MEMLOCK, s.memlock_min_kb, 1024),
            ("open files", resource.RLIMIT_NOFILE, s.nofile_min, 1),
            ("stack size", resource.RLIMIT_STACK, s.stack_min_kb, 1024),
            ("max user processes", resource.RLIMIT_NPROC, s.nproc_min, 1),
        ]
        results = []
        for label, limit, minimum, unit in limits:
            soft, _ = resource.getrlimit(limit)
            unlimited = soft == resource.RLIM_INFINITY
            value = "unlimited" if unlimited else str(soft // unit)
            ok = unlimited or soft // unit > minimum
            results.append(
                PrecheckResult(
                    f"{self.name} {label.replace(' ', '-')}", "passed" if ok else "failed", value, f">{minimum}"
                )
            )
        return results


class GpuCheck(Precheck):
    """GPU jobs see the cards their node asked for (job.cards, or the flavor's; at least one when neither
    says): through NVML when nvidia-ml-py is installed, else /dev/nvidia*."""

    name = "gpu-check"

    def run(self, ctx: PrecheckContext) -> list[PrecheckResult]:
        if ctx.policy.accelerator is None:
            return [PrecheckResult(self.name, "skipped", detail="accelerator unknown without --config")]
        if ctx.policy.accelerator != "gpu":
            return [PrecheckResult(self.name, "skipped", detail=f"accelerator is {ctx.policy.accelerator}")]
        cards = ctx.policy.cards
        if cards == 0:
            return [PrecheckResult(self.name, "skipped", detail="the job asks for no cards (job.cards: 0)")]
        count, how = self.count(ctx.settings.gpu_devices)
        need = cards or 1  # all the cards the node's pod requested, else any
        if cards:
            how += f"; {cards} per node asked for (job.cards, or the flavor)"
        return [PrecheckResult(self.name, "passed" if count >= need else "failed", str(count), f">={need}", detail=how)]

    @staticmethod
    def count(pattern: str) -> tuple[int, str]:
        try:
            import pynvml
        except ImportError:
            return len(glob.glob(pattern)), f"devices {pattern}"
        try:
            pynvml.nvmlInit()
            try:
                return pynvml.nvmlDeviceGetCount(), "nvml"
            finally:
                pynvml.nvmlShutdown()
        except pynvml.NVMLError as err:
            return 0, f"nvml: {err}"


@hookimpl
def hacfg_prechecks() -> list[Precheck]:
    return [Dns(), DiskSize(), Ulimit(), GpuCheck()]
