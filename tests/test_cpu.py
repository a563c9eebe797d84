"""The cores a process may use: affinity and cgroup CPU quotas, on the kernel's own
cgroup filesystem where this machine lets a test make a cgroup, and on written ones."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from imgpipe.components.common.runtime import cpu
from tests import waiting

pytestmark = pytest.mark.unit

PRINT_CORES = "from imgpipe.components.common.runtime import cpu; print(cpu.available_cores())"


def _write(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _proc_cgroup(tmp_path, text: str) -> str:
    path = tmp_path / "proc-cgroup"
    path.write_text(text)
    return str(path)


def test_v2_quota_of_the_own_cgroup_and_its_ancestors(tmp_path):
    root = tmp_path / "cgroup"
    _write(root / "cpu.max", "max 100000\n")
    _write(root / "kubepods" / "cpu.max", "800000 100000\n")
    _write(root / "kubepods" / "pod1" / "ctr" / "cpu.max", "250000 100000\n")
    proc = _proc_cgroup(tmp_path, "0::/kubepods/pod1/ctr\n")
    assert cpu.cgroup_cpu_quota(str(root), proc) == 2.5
    assert cpu.available_cores(str(root), proc) == min(3, len(os.sched_getaffinity(0)))
    _write(root / "kubepods" / "cpu.max", "100000 100000\n")  # a tighter ancestor wins
    assert cpu.available_cores(str(root), proc) == 1


def test_v1_quota_and_no_quota(tmp_path):
    root = tmp_path / "cgroup"
    _write(root / "cpu" / "docker" / "cpu.cfs_quota_us", "150000\n")
    _write(root / "cpu" / "docker" / "cpu.cfs_period_us", "100000\n")
    _write(root / "cpu" / "cpu.cfs_quota_us", "-1\n")
    _write(root / "cpu" / "cpu.cfs_period_us", "100000\n")
    proc = _proc_cgroup(tmp_path, "4:memory:/docker\n2:cpu,cpuacct:/docker\n0::/\n")
    assert cpu.cgroup_cpu_quota(str(root), proc) == 1.5
    unlimited = _proc_cgroup(tmp_path, "2:cpu,cpuacct:/\n")
    assert cpu.cgroup_cpu_quota(str(root), unlimited) is None
    assert cpu.cgroup_cpu_quota(str(tmp_path / "none"), unlimited) is None
    assert cpu.available_cores(str(tmp_path / "none"), unlimited) == len(os.sched_getaffinity(0))


def test_affinity_caps_the_count():
    out = subprocess.run(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{0}}); {PRINT_CORES}"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == "1"


def _writable_cpu_cgroup() -> tuple[str, str, str] | None:
    """(parent folder, quota file, period-or-None) of a cgroup hierarchy with the CPU
    controller that this process may make a child in, else None."""
    v1 = os.path.join(cpu.CGROUP_ROOT, "cpu")
    if os.access(os.path.join(v1, "cpu.cfs_quota_us"), os.W_OK):
        return v1, "cpu.cfs_quota_us", "cpu.cfs_period_us"
    controllers = os.path.join(cpu.CGROUP_ROOT, "cgroup.subtree_control")
    if os.access(controllers, os.W_OK) and "cpu" in open(controllers).read().split():
        return cpu.CGROUP_ROOT, "cpu.max", ""
    return None


def test_a_real_cgroup_quota_caps_the_count():
    """A child process moved into a cgroup with a one-core quota sees one core."""
    found = _writable_cpu_cgroup()
    if found is None or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs root, a writable cgroup CPU controller and 2 or more cores")
    parent, quota_file, period_file = found
    group = os.path.join(parent, f"imgpipe-test-{uuid.uuid4().hex[:8]}")
    os.mkdir(group)
    try:
        with open(os.path.join(group, quota_file), "w") as f:
            f.write("100000 100000" if not period_file else "100000")
        if period_file:
            with open(os.path.join(group, period_file), "w") as f:
                f.write("100000")
        child = subprocess.Popen(
            [sys.executable, "-c", f"import sys; sys.stdin.readline(); {PRINT_CORES}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        with open(os.path.join(group, "cgroup.procs"), "w") as f:
            f.write(str(child.pid))
        out, _ = child.communicate("go\n", timeout=waiting.COMMAND_S)
        assert out.strip() == "1"
    finally:
        os.rmdir(group)
