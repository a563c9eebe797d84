"""The JobSet (jobset.x-k8s.io/v1alpha2, JobSet v0.12) that trains on several workers from
a Kubeflow Trainer step with trainer.launcher: jobset: the TFJob's workers
(tfjob_manifest.py), made the same way from the step's own pod (step_pod.py), as one
Indexed Job that JobSet runs (kubernetes_jobset.py launches it).

What a TFJob's operator does for its replicas, the manifest asks of JobSet and of
Kubernetes' Job controller:
- the replicas: one replicated job (REPLICATED_JOB) of one Indexed Job whose
  parallelism and completions are the workers, each pod numbered by its completion index;
- their names: `network.enableDNSHostnames` makes JobSet create a headless service named
  after the JobSet, and every pod is `<jobset>-worker-0-<index>.<jobset>` on it (its
  address resolves before the pod is ready: publishNotReadyAddresses);
- TF_CONFIG: the pod template lists every worker's address (worker_addresses, in
  indexed_tf_config.ADDRESSES_ENV) and Kubernetes gives each pod its index
  (JOB_COMPLETION_INDEX); the worker's entrypoint makes its TF_CONFIG from the two
  (indexed_tf_config.tf_config_from_env, in worker.py);
- the policies: a failed pod fails its Job (backoffLimit 0), a failed Job the JobSet
  (failurePolicy maxRestarts 0: the Trainer's rerun resumes from the backups), and the
  JobSet succeeds when every worker has exited 0 (successPolicy All).
Each pod is the TFJob's replica: the step's image running the worker's command, its
resources (GPU request), environment (the object-store Secret's keys), security
contexts, claim and emptyDir mounts, node selector, tolerations, affinity, pull secrets,
no service account token, TERMINATION_GRACE_PERIOD_S. The step's pod owns the JobSet,
so Kubernetes deletes it, its Jobs, pods and service with the pod.

A queue (Kueue) is the caller's: common.runtime.kueue.with_queue labels either manifest.

Pure: a dict in (the pod, as the API returns it), a dict out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from imgpipe.components.trainer.several_workers import indexed_tf_config, step_pod, tfjob_manifest

GROUP = "jobset.x-k8s.io"
VERSION = "v1alpha2"
PLURAL = "jobsets"
KIND = "JobSet"
# The one replicated job, and so the middle of every pod's host name.
REPLICATED_JOB = "worker"
# The TFJob's container name and port, so that the launcher reads either kind's logs
# alike; the port's name is the JobSet's own (nothing looks it up).
CONTAINER = tfjob_manifest.CONTAINER
PORT = tfjob_manifest.PORT
PORT_NAME = "tf-worker"
# The labels and annotation JobSet and the Job controller put on each pod.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


def job_name(pod_uid: str) -> str:
    """The JobSet's name: the TFJob's (one per step pod). With the replicated job's
    name and two indexes, every pod's host name stays within 63 characters."""
    return step_pod.job_name(pod_uid)


def worker_addresses(name: str, workers: int) -> tuple[str, ...]:
    """Each worker's host:port, in index order: `<jobset>-<replicated job>-<job index>-
    <pod index>.<subdomain>`, the subdomain being the JobSet's headless service, named
    after it. A pod resolves it in its own namespace (the resolver's search path)."""
    return tuple(f"{name}-{REPLICATED_JOB}-0-{index}.{name}:{PORT}" for index in range(workers))


def manifest(pod: Mapping[str, Any], workers: int, job_folder: str) -> dict[str, Any]:
    """The JobSet of `workers` pods that train the job in `job_folder`, made from the
    step's `pod` (camelCase, as the API serves it).

    Raises:
      ValueError: the pod has no step container (step_pod.step_container).
    """
    # The replicas' pod template is the TFJob's, so both launchers run the same pods.
    template = tfjob_manifest.replica_template(pod, job_folder)
    metadata = pod["metadata"]
    name = job_name(metadata["uid"])
    spec = template["spec"]
    spec["restartPolicy"] = "Never"  # a Job's pods' own (the TFJob's is the replica's)
    (container,) = spec["containers"]
    container["ports"] = [{"name": PORT_NAME, "containerPort": PORT, "protocol": "TCP"}]
    addresses = ",".join(worker_addresses(name, workers))
    container["env"] = [
        *(container.get("env") or []),
        {"name": indexed_tf_config.ADDRESSES_ENV, "value": addresses},
    ]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": metadata["namespace"],
            "labels": dict(template["metadata"]["labels"]),
            # The step's pod, as the TFJob's; not its `controller`: Kueue would count a
            # JobSet whose controller is a pod it manages as part of that pod's workload.
            "ownerReferences": step_pod.owner_references(pod),
        },
        "spec": {
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [REPLICATED_JOB]},
            # A failed Job fails the JobSet: no restart (the Trainer's rerun resumes from
            # the backups); finished pods stay until the JobSet is deleted, so the
            # Trainer can read a failed worker's log.
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [
                {
                    "name": REPLICATED_JOB,
                    "replicas": 1,
                    "template": {
                        "metadata": {"labels": dict(template["metadata"]["labels"])},
                        "spec": {
                            "parallelism": workers,
                            "completions": workers,
                            "completionMode": "Indexed",
                            # A failed pod fails its Job at once.
                            "backoffLimit": 0,
                            "template": template,
                        },
                    },
                }
            ],
        },
    }
