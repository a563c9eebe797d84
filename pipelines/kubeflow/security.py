"""How every step of the pipeline runs, and where its object-store credentials come from:
the one definition that the compiler, `imgpipe kfp run-local`, the container tests and
the k8s/ manifests' test read.

The steps run as the image's own user, never as root, with no privilege escalation, no
Linux capabilities and a read-only root filesystem; /tmp is the one writable place
outside the volumes (an emptyDir on Kubernetes, a tmpfs under Docker), and HOME and
TMPDIR point there, because TensorFlow, Keras and Beam write caches and temporary files
under them. The k8s/ manifests and the DockerRunner options carry every one of these
settings; a compiled KFP 2.16 package can carry only the user (STEP_SECURITY_SOURCES
says who adds each of the others).

Object-store credentials never enter a compiled package: every step reads them from the
Kubernetes Secret OBJECT_STORE_SECRET, whose keys are the environment variables boto3
and Beam's S3 filesystem read (SECRET_ENV). The Secret is optional, so a step on a
cluster with workload identity (GCS) or a local volume runs without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from imgpipe.pipelines import credentials
from imgpipe.pipelines.credentials import OBJECT_STORE_SECRET, SECRET_ENV
from imgpipe.pipelines.images import RUNTIME_GID, RUNTIME_UID

# ---- the user and the container's restrictions --------------------------------------

# Pod level: the fields the restricted Pod Security Standard checks on the pod.
POD_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": RUNTIME_UID,
    "runAsGroup": RUNTIME_GID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
# Container level, for every container that runs the project image.
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
}

# ---- who puts each setting on a compiled step's pod, under KFP 2.16 -------------------
#
# PACKAGE: the compiled YAML carries it. Its platform spec is the only place a package
#   can name a security setting, and kfp-kubernetes 2.16's SecurityContext message has
#   exactly three fields (run_as_user, run_as_group, run_as_non_root;
#   kfp.kubernetes.set_security_context); the PipelineSpec's container has none.
# BACKEND: the package cannot carry it; KFP 2.16's Argo compiler puts it on every step
#   it compiles (backend/src/v2/compiler/argocompiler/security_context.go,
#   applySecurityContextToExecutorTemplate, kubeflow/pipelines #12782): the pod's
#   RuntimeDefault seccomp profile, and allowPrivilegeEscalation: false and drop ALL on
#   the step's container. The restricted Pod Security Standard of k8s/namespace.yaml
#   refuses a pod without them, so a backend that leaves them out fails loudly.
# POLICY: neither the package nor the backend: the backend leaves readOnlyRootFilesystem
#   to the user, and no package field reaches it. A mutating admission policy of the
#   cluster (Kyverno, Gatekeeper's Assign) must add it to the step's `main` container,
#   and nothing refuses a step without it (the restricted standard does not check it).
#   The steps work under it: they write only to /tmp (the package's emptyDir), the
#   volumes, and the backend's own emptyDirs (/kfp-launcher, /gcs, /minio, /s3,
#   /.local, /.cache, /.config); the DockerRunner tier runs every step so.
PACKAGE, BACKEND, POLICY = "package", "backend", "policy"
STEP_SECURITY_SOURCES: dict[str, str] = {
    "runAsNonRoot": PACKAGE,
    "runAsUser": PACKAGE,
    "runAsGroup": PACKAGE,
    "seccompProfile": BACKEND,
    "allowPrivilegeEscalation": BACKEND,
    "capabilities": BACKEND,
    "readOnlyRootFilesystem": POLICY,
}
# What the compiler writes into every step's platform spec (compiler.security_context).
STEP_SECURITY_CONTEXT: dict[str, Any] = {
    key: {**POD_SECURITY_CONTEXT, **CONTAINER_SECURITY_CONTEXT}[key]
    for key, source in STEP_SECURITY_SOURCES.items()
    if source == PACKAGE
}

# The one writable path outside the volumes, and the variables that send writes there.
WRITABLE_TMP = "/tmp"
TMP_VOLUME = "imgpipe-tmp"
STEP_ENV: dict[str, str] = {"TMPDIR": WRITABLE_TMP, "HOME": WRITABLE_TMP}

# ---- object-store credentials ------------------------------------------------------
# The Secret and the rule that spots a credential are defined once, in
# pipelines/credentials.py; the compiler refuses a package that would carry one.


def refuse_credentials(beam_args: Sequence[str]) -> None:
    """Raises ValueError when beam_args would write a credential into a compiled package.

    Refused rather than moved: the value would still sit in the config file, and the
    steps already read the same credentials from the Secret's environment variables.
    """
    found = credentials.option_problems(beam_args)
    if found:
        raise ValueError(
            f"beam_args {', '.join(found)}: a compiled package must not carry credentials; "
            f"remove them and put the keys in the Kubernetes Secret {OBJECT_STORE_SECRET} "
            f"({', '.join(SECRET_ENV)}), which every step reads as environment variables "
            "(docs/kubeflow.md)"
        )
