"""The replicas of a Kubernetes job of workers (trainer.workers > 1 in a compiled
Kubeflow package), made from the Trainer step's own pod, so that every worker runs as
the step would, whichever kind of job runs them (a TFJob, tfjob_manifest.py).

Each replica is a pod of the step's image that runs the same command as a worker on one
machine (`python -m imgpipe.components.trainer.several_workers.worker JOB_FOLDER`),
with the step container's resources (its GPU request), environment (the object-store
Secret's keys), security context and volume mounts, and the step pod's node selector,
tolerations, affinity, security context and image pull secrets, and the grace period
TERMINATION_GRACE_PERIOD_S between SIGTERM and SIGKILL. The replicas need no Kubernetes
API: their service account token is not mounted. The step's pod owns the job
(owner_references), so Kubernetes deletes it (and its pods) with the pod, should the
Trainer be killed before it deletes the job itself.

Pure: a dict in (the pod, as the API returns it), a dict out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from imgpipe.components.common.runtime import kueue
from imgpipe.components.trainer.several_workers import choice, indexed_tf_config

# Argo's name for a KFP step's own container (beside its `wait` sidecar).
STEP_CONTAINER = "main"
TRAINER_POD_LABEL = "imgpipe/trainer-pod"
PART_OF = {"app.kubernetes.io/part-of": "tfx-image-pipeline"}
# Seconds Kubernetes waits between a replica pod's SIGTERM and its SIGKILL; the cluster
# should give the compiled steps' pods the same, which a KFP 2.16 package cannot set
# (docs/kubeflow.md, "Between SIGTERM and SIGKILL"). A step stops within 10 s of SIGTERM
# (pipelines/termination.py), and 60 s leaves that stop six times its bound: the same
# work ran 5-10x slower on a loaded node than on a quiet one (docs/kubeflow.md), and
# Kubernetes' default, 30 s, would leave it three times. A replica does not stop on SIGTERM
# (TensorFlow's MultiWorkerMirroredStrategy takes the signal): the time lets a backup it
# has begun finish, its manifest last, before the SIGKILL.
TERMINATION_GRACE_PERIOD_S = 60
# Volume kinds a replica can mount as the step does: a shared claim, and emptyDirs
# (/tmp). Others (the service account token, KFP's own) are the step's alone.
CARRIED_VOLUMES = ("persistentVolumeClaim", "emptyDir")
# The step's variables a replica does not inherit: the launcher and the queue are the
# step's own choices, and each replica's place among the workers is its job's to give.
NOT_INHERITED_ENV = frozenset(
    {
        choice.LAUNCHER_ENV,
        kueue.QUEUE_ENV,
        indexed_tf_config.TF_CONFIG,
        indexed_tf_config.ADDRESSES_ENV,
    }
)


def job_name(pod_uid: str) -> str:
    """The job's name: one per step pod (a retried step gets a new pod and a new job),
    short enough for the operator's service names (`<name>-worker-<i>`)."""
    return f"imgpipe-train-{hashlib.sha256(pod_uid.encode()).hexdigest()[:12]}"


def step_container(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The step's own container: Argo's `main`, or the pod's only container.

    Raises:
      ValueError: neither is there, naming the pod.
    """
    containers = pod["spec"]["containers"]
    for container in containers:
        if container["name"] == STEP_CONTAINER:
            return container
    if len(containers) == 1:
        return containers[0]
    raise ValueError(
        f"pod {pod['metadata']['name']} has no container {STEP_CONTAINER!r} among "
        f"{[c['name'] for c in containers]}: the Trainer cannot tell which one it runs in"
    )


def shared_mounts(pod: Mapping[str, Any]) -> dict[str, str]:
    """Mount path -> claim name of each PersistentVolumeClaim the step's container
    mounts: the paths its workers see too."""
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod["spec"].get("volumes") or []
        if v.get("persistentVolumeClaim")
    }
    return {
        m["mountPath"]: claims[m["name"]]
        for m in step_container(pod).get("volumeMounts") or []
        if m["name"] in claims
    }


def replica_template(
    pod: Mapping[str, Any], job_folder: str, container: str, ports: list[dict[str, Any]]
) -> dict[str, Any]:
    """The pod template of each replica that trains the job in `job_folder`, made from
    the step's `pod` (camelCase, as the API serves it): one container, named `container`
    (the name the job's controller looks for), with `ports`.

    Raises:
      ValueError: the pod has no step container (step_container).
    """
    metadata = pod["metadata"]
    spec = pod["spec"]
    main = step_container(pod)
    carried = {
        v["name"]: v
        for v in spec.get("volumes") or []
        if any(kind in v for kind in CARRIED_VOLUMES)
    }
    replica = {
        "name": container,
        "image": main["image"],
        "imagePullPolicy": main.get("imagePullPolicy"),
        "command": [*choice.WORKER_COMMAND, job_folder],
        "env": [e for e in main.get("env") or [] if e["name"] not in NOT_INHERITED_ENV] or None,
        "envFrom": main.get("envFrom"),
        "resources": main.get("resources"),
        "securityContext": main.get("securityContext"),
        "volumeMounts": [m for m in main.get("volumeMounts") or [] if m["name"] in carried] or None,
        "ports": ports,
    }
    pod_spec = {
        "containers": [present(replica)],
        "automountServiceAccountToken": False,
        "nodeSelector": spec.get("nodeSelector"),
        "tolerations": spec.get("tolerations"),
        "affinity": spec.get("affinity"),
        "securityContext": spec.get("securityContext"),
        "imagePullSecrets": spec.get("imagePullSecrets"),
        "priorityClassName": spec.get("priorityClassName"),
        "terminationGracePeriodSeconds": TERMINATION_GRACE_PERIOD_S,
        "volumes": [carried[name] for name in sorted(carried)] or None,
    }
    return {
        "metadata": {
            "labels": {**PART_OF, TRAINER_POD_LABEL: metadata["name"]},
            # A mesh sidecar would keep a finished replica's pod running.
            "annotations": {"sidecar.istio.io/inject": "false"},
        },
        "spec": present(pod_spec),
    }


def owner_references(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The job's owner, the step's pod: Kubernetes deletes the job (and its pods) with
    the pod."""
    metadata = pod["metadata"]
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": metadata["name"],
            "uid": metadata["uid"],
            "blockOwnerDeletion": False,
        }
    ]


def present(fields: Mapping[str, Any]) -> dict[str, Any]:
    """`fields` without those that are None."""
    return {k: v for k, v in fields.items() if v is not None}
