"""The container images the compiled pipeline names: the one place their tag is set.

`make image` builds RUNTIME_IMAGE from the top-level Dockerfile. The same image carries
TensorFlow's CUDA libraries, so GPU_IMAGE is the same build: a separate tag would let
the Trainer drift from the components that wrote its inputs.

A tag can be moved to another image; a digest cannot. After `docker push`, put the
pushed digest in the pipeline config (`kubeflow.images`, `REPOSITORY@sha256:...`) and
every step runs exactly the image that was built and tested.
"""

from __future__ import annotations

import re

REGISTRY = "ghcr.io/tfx-image-pipeline"
IMAGE_NAME = "tfx-image-pipeline"
TAG = "0.1.0"

RUNTIME_IMAGE = f"{REGISTRY}/{IMAGE_NAME}:{TAG}"
GPU_IMAGE = RUNTIME_IMAGE

# The image's own user (the Dockerfile's useradd and USER): every compiled step runs as it.
RUNTIME_UID = 1000
RUNTIME_GID = 1000

# The reference grammar of the OCI distribution spec: [host[:port]/]path[:tag][@digest],
# with the one digest algorithm registries use, sha256.
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
# A first component is a registry host when it has a dot or a port, or is localhost.
_HOST = rf"(?:(?:{_LABEL}(?:\.{_LABEL})+(?::[0-9]+)?|{_LABEL}:[0-9]+|localhost)/)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_PATH = rf"{_COMPONENT}(?:/{_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
DIGEST_PATTERN = r"sha256:[0-9a-f]{64}"
_REFERENCE = re.compile(rf"{_HOST}{_PATH}(?::{_TAG})?(?:@{DIGEST_PATTERN})?")


def check_reference(reference: str, setting: str) -> None:
    """Raises ValueError, naming `setting`, unless `reference` is an image reference.

    Example:
      check_reference("ghcr.io/org/app@sha256:" + "0" * 64, "kubeflow.images.default")
    """
    _, at, digest = reference.partition("@")
    if at and not re.fullmatch(DIGEST_PATTERN, digest):
        raise ValueError(
            f"{setting}: {reference!r} has a malformed digest; a digest is "
            "'@sha256:' and 64 lowercase hex digits, as `docker push` prints it"
        )
    if not _REFERENCE.fullmatch(reference):
        raise ValueError(
            f"{setting}: {reference!r} is not an image reference; give REPOSITORY:TAG "
            "or, to run exactly one build, REPOSITORY@sha256:<64 hex digits>"
        )
