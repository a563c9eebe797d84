"""A JobSet (jobset.x-k8s.io/v1alpha2, JobSet v0.12) as the launcher of kubernetes_jobs.py
creates and follows it (trainer.launcher: jobset): its manifest (jobset_manifest.py), its
replicas' pods (JobSet's labels, and the completion index the Job controller annotates
each pod with), how it ends (its Completed or Failed condition, or its terminalState)
and whether Kueue holds it (spec.suspend).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from imgpipe.components.trainer.several_workers import jobset_manifest, kubernetes_replicas

_SUCCEEDED = "Completed"
_FAILED = "Failed"


def pod_selector(name: str) -> str:
    return f"{jobset_manifest.JOBSET_NAME_LABEL}={name}"


def pod_index(pod: Mapping[str, Any]) -> int | None:
    metadata = pod["metadata"]
    labels = metadata.get("labels") or {}
    index = (metadata.get("annotations") or {}).get(jobset_manifest.COMPLETION_INDEX_ANNOTATION)
    if labels.get(jobset_manifest.REPLICATED_JOB_LABEL) != jobset_manifest.REPLICATED_JOB:
        return None
    return int(index) if index is not None and index.isdigit() else None


def ended(job: Mapping[str, Any]) -> tuple[bool, str] | None:
    conditions = kubernetes_replicas.true_conditions(job)
    terminal = (job.get("status") or {}).get("terminalState")
    if _SUCCEEDED in conditions or (terminal == _SUCCEEDED and _FAILED not in conditions):
        return True, conditions.get(_SUCCEEDED, "")
    if _FAILED in conditions or terminal == _FAILED:
        return False, conditions.get(_FAILED) or f"its terminal state is {_FAILED}"
    return None


def suspended(job: Mapping[str, Any]) -> bool:
    return (job.get("spec") or {}).get("suspend") is True


JOBSET = kubernetes_replicas.JobKind(
    kind=jobset_manifest.KIND,
    group=jobset_manifest.GROUP,
    version=jobset_manifest.VERSION,
    plural=jobset_manifest.PLURAL,
    container=jobset_manifest.CONTAINER,
    manifest=jobset_manifest.manifest,
    pod_selector=pod_selector,
    pod_index=pod_index,
    ended=ended,
    suspended=suspended,
    no_pod=(
        "the JobSet controller has made no pod for it (is JobSet running in this cluster? "
        "kubectl -n jobset-system get deploy jobset-controller-manager)"
    ),
    missing="install JobSet v0.12.0's manifest, or set trainer.launcher=tfjob",
)
