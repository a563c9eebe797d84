"""The KFP launcher's local copies of object stores, and the store URI behind each.

A KFP v2 step may read and write its artifacts at the launcher's local paths (/gcs/,
/minio/, /s3/; kfp.dsl.types.artifact_types), which exist in that step's pod only. A
URI that outlives the step (a span record a later run reads, a run folder a later run
deletes) is the store's own: /gcs/ is gs://, /s3/ is s3://, and /minio/ is s3:// too,
which the file seam opens with AWS_ENDPOINT_URL_S3 pointing at MinIO (fileio refuses
KFP's own minio:// scheme).
"""

from __future__ import annotations

# The launcher's scheme -> its local mount.
MOUNTS = {"gs://": "/gcs/", "minio://": "/minio/", "s3://": "/s3/"}
# The mount -> the scheme the file seam opens it by.
_STORE_SCHEME = {"/gcs/": "gs://", "/minio/": "s3://", "/s3/": "s3://"}


def local_path(uri: str) -> str | None:
    """The launcher's local path of a remote URI; None for other URIs."""
    for scheme, mount in MOUNTS.items():
        if uri.startswith(scheme):
            return mount + uri[len(scheme) :]
    return None


def store_uri(path: str) -> str:
    """The object store URI of a path below a launcher mount, or minio://; any other
    path or URI unchanged."""
    for mount, scheme in _STORE_SCHEME.items():
        if path.startswith(mount):
            return scheme + path[len(mount) :]
    if path.startswith("minio://"):
        return "s3://" + path[len("minio://") :]
    return path
