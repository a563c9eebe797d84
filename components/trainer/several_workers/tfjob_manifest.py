"""The TFJob (Kubeflow Training Operator v1.9, kubeflow.org/v1) that trains on several
workers from a Kubeflow Trainer step: `workers` replicas of type Worker, each a pod made
from the step's own pod (step_pod.replica_template), so that every worker runs as the
step would. The operator gives each its TF_CONFIG. The step's pod owns the TFJob.

Pure: a dict in (the pod, as the API returns it), a dict out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from imgpipe.components.trainer.several_workers import step_pod

GROUP = "kubeflow.org"
VERSION = "v1"
PLURAL = "tfjobs"
KIND = "TFJob"
REPLICA_TYPE = "Worker"
# The container and port names the Training Operator looks for in a TFJob's pods.
CONTAINER = "tensorflow"
PORT_NAME = "tfjob-port"
PORT = 2222
# The labels the operator puts on each replica's pod.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"


def replica_template(pod: Mapping[str, Any], job_folder: str) -> dict[str, Any]:
    """Each replica's pod template (step_pod.replica_template), its container and port
    named as the operator looks for them; the JobSet's pods are made from it too
    (jobset_manifest.py).

    Raises:
      ValueError: the pod has no step container (step_pod.step_container).
    """
    return step_pod.replica_template(
        pod, job_folder, CONTAINER, [{"name": PORT_NAME, "containerPort": PORT, "protocol": "TCP"}]
    )


def manifest(pod: Mapping[str, Any], workers: int, job_folder: str) -> dict[str, Any]:
    """The TFJob of `workers` replicas that train the job in `job_folder`, made from the
    step's `pod` (camelCase, as the API serves it).

    Raises:
      ValueError: the pod has no step container (step_pod.step_container).
    """
    metadata = pod["metadata"]
    template = replica_template(pod, job_folder)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": step_pod.job_name(metadata["uid"]),
            "namespace": metadata["namespace"],
            "labels": template["metadata"]["labels"],
            "ownerReferences": step_pod.owner_references(pod),
        },
        "spec": {
            "runPolicy": {
                # A failed worker fails the job: no restart (the Trainer's rerun resumes
                # from the backups); finished pods stay until the job is deleted, so
                # the Trainer can read a failed replica's log.
                "backoffLimit": 0,
                "cleanPodPolicy": "Running",
            },
            # Done only when every worker has exited 0, not when worker 0 has.
            "successPolicy": "AllWorkers",
            "tfReplicaSpecs": {
                REPLICA_TYPE: {
                    "replicas": workers,
                    "restartPolicy": "Never",
                    "template": template,
                }
            },
        },
    }
