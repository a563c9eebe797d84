"""A TFJob (Kubeflow Training Operator v1.9, kubeflow.org/v1) as the launcher of
kubernetes_jobs.py creates and follows it (trainer.launcher: tfjob, the default): its
manifest (tfjob_manifest.py), its replicas' pods (the operator's labels), how it ends
(its Succeeded or Failed condition) and whether Kueue holds it (spec.runPolicy.suspend).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from imgpipe.components.trainer.several_workers import kubernetes_replicas, tfjob_manifest


def pod_selector(name: str) -> str:
    return f"{tfjob_manifest.JOB_NAME_LABEL}={name}"


def pod_index(pod: Mapping[str, Any]) -> int | None:
    labels = pod["metadata"].get("labels") or {}
    if labels.get(tfjob_manifest.REPLICA_TYPE_LABEL, "").lower() != (
        tfjob_manifest.REPLICA_TYPE.lower()
    ):
        return None
    return int(labels[tfjob_manifest.REPLICA_INDEX_LABEL])


def ended(job: Mapping[str, Any]) -> tuple[bool, str] | None:
    conditions = kubernetes_replicas.true_conditions(job)
    if "Succeeded" in conditions:
        return True, conditions["Succeeded"]
    if "Failed" in conditions:
        return False, conditions["Failed"]
    return None


def suspended(job: Mapping[str, Any]) -> bool:
    return ((job.get("spec") or {}).get("runPolicy") or {}).get("suspend") is True


TFJOB = kubernetes_replicas.JobKind(
    kind=tfjob_manifest.KIND,
    group=tfjob_manifest.GROUP,
    version=tfjob_manifest.VERSION,
    plural=tfjob_manifest.PLURAL,
    container=tfjob_manifest.CONTAINER,
    manifest=tfjob_manifest.manifest,
    pod_selector=pod_selector,
    pod_index=pod_index,
    ended=ended,
    suspended=suspended,
    no_pod=(
        "the Training Operator has made no pod for it (is the operator running in "
        "this cluster? kubectl -n kubeflow get deploy training-operator)"
    ),
    missing=(
        "install the Kubeflow Training Operator v1.9, or set trainer.launcher=jobset on a "
        "cluster with JobSet, or trainer.workers=1"
    ),
)
