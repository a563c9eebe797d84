"""How many cores this process may use: the fewest of the CPUs it may run on and the CPU
quotas of its cgroup and the cgroup's ancestors.

A Kubernetes pod with `limits.cpu: 4` on a 96-core node sees 96 from os.cpu_count();
sizing thread pools by that runs 96 threads in a 4-core quota, which the kernel then
throttles. Quotas are read from cgroup v2 (`cpu.max`) or v1 (`cpu.cfs_quota_us` over
`cpu.cfs_period_us`), at the process's own cgroup (/proc/self/cgroup) and every
ancestor below the mount; no quota anywhere means no limit.
"""

from __future__ import annotations

import math
import os

CGROUP_ROOT = "/sys/fs/cgroup"


def available_cores(cgroup_root: str = CGROUP_ROOT, proc_cgroup: str = "/proc/self/cgroup") -> int:
    """At least 1: the CPUs this process may run on, capped by its cgroup's quota
    (rounded up: a 2.5-core quota keeps 3 threads busy)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    cores = cores or os.cpu_count() or 1
    quota = cgroup_cpu_quota(cgroup_root, proc_cgroup)
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return cores


def cgroup_cpu_quota(
    cgroup_root: str = CGROUP_ROOT, proc_cgroup: str = "/proc/self/cgroup"
) -> float | None:
    """The smallest CPU quota, in cores, over the process's cgroup and its ancestors;
    None when there is none (or no cgroup filesystem)."""
    quotas = [q for q in (_quota(d) for d in cgroup_dirs(cgroup_root, proc_cgroup)) if q]
    return min(quotas) if quotas else None


def cgroup_dirs(cgroup_root: str, proc_cgroup: str) -> list[str]:
    """The folders that may hold this process's CPU quota: its own cgroup's, then each
    ancestor's, for v2 (the unified hierarchy at the root) and v1 (the `cpu` controller)."""
    own = {"": "/", "cpu": "/"}  # in a cgroup namespace the process sits at the root
    for line in (_read(proc_cgroup) or "").splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(","):
            if name in own:
                own[name] = path or "/"
    dirs = []
    for base, path in ((cgroup_root, own[""]), (os.path.join(cgroup_root, "cpu"), own["cpu"])):
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), -1, -1):
            folder = os.path.join(base, *parts[:depth])
            if os.path.isdir(folder) and folder not in dirs:
                dirs.append(folder)
    return dirs


def _quota(folder: str) -> float | None:
    v2 = _read(os.path.join(folder, "cpu.max"))
    if v2 is not None:
        fields = v2.split()
        return _ratio(fields[0], fields[1]) if len(fields) == 2 and fields[0] != "max" else None
    quota = _read(os.path.join(folder, "cpu.cfs_quota_us"))
    period = _read(os.path.join(folder, "cpu.cfs_period_us"))
    if quota is None or period is None:
        return None
    return _ratio(quota, period)


def _ratio(quota: str, period: str) -> float | None:
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None
