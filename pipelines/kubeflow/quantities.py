"""Kubernetes resource quantities, parsed as kfp's own compiler stores them."""

from __future__ import annotations

import re

_CPU = re.compile(r"^(\d+(?:\.\d+)?)(m?)$")
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)([EPTGMK]i?|)$")
_MEMORY_FACTORS = {
    "": 1,
    "K": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def cpu_cores(quantity: str, name: str = "CPU quantity") -> float:
    """A Kubernetes CPU quantity ("2", "1.5", "500m") in cores.

    Raises:
      ValueError: naming `name` and the value.
    """
    match = _CPU.match(quantity.strip())
    if not match:
        raise ValueError(f"{name} must look like 2, 1.5 or 500m, got {quantity!r}")
    value = float(match.group(1))
    return value / 1000 if match.group(2) else value


def memory_gb(quantity: str, name: str = "memory quantity") -> float:
    """A Kubernetes memory quantity ("8Gi", "512M") in GB (10^9 bytes), as kfp stores it.

    Raises:
      ValueError: naming `name` and the value.
    """
    match = _MEMORY.match(quantity.strip())
    if not match:
        raise ValueError(f"{name} must look like 8Gi, 512Mi or 4G, got {quantity!r}")
    return float(match.group(1)) * _MEMORY_FACTORS[match.group(2)] / 1e9
