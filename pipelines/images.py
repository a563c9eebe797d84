"""The container images the compiled pipeline names: the one place their tags are set.

`make image` (bin/build-image) builds RUNTIME_IMAGE from the top-level Dockerfile: the
lock without its CUDA section. `make image-gpu` builds GPU_IMAGE, the whole lock with
TensorFlow's CUDA libraries, for the Trainer. Both carry the same content tag, TAG: the
project's version and a hash of everything that goes into the image (IMAGE_INPUTS), so
an edit to any of them names a new image and a cluster never runs a stale build under a
reused tag, and the Trainer cannot drift from the components that wrote its inputs.

In a checkout the tag is computed from the files; in an installed image, where there is
no checkout, the Dockerfile bakes it into the package (`_image_build.py`).

A tag can be moved to another image; a digest cannot. After `docker push`, put the
pushed digest in the pipeline config (`kubeflow.images`, `REPOSITORY@sha256:...`) and
every step runs exactly the image that was built and tested (docs/image.md).

Standard library only: bin/build-image loads this file on the host, outside the
environment.
"""

from __future__ import annotations

import hashlib
import os
import re

REGISTRY = "ghcr.io/tfx-image-pipeline"
IMAGE_NAME = "tfx-image-pipeline"
# The variants `make image VARIANT=...` builds, and the suffix each adds to TAG.
VARIANT_SUFFIXES = {"cpu": "", "gpu": "-gpu"}
# The local name the last CPU build is also tagged with, for tests and demos on this
# machine (the container test tier runs it).
DEV_IMAGE = f"{IMAGE_NAME}:dev"

# What goes into the image, relative to the checkout: files, and folders taken whole.
# The staged build context holds exactly these (bin/build-image), so the tag hashes
# what the build reads. README.md is not among them: the Dockerfile writes its own.
IMAGE_INPUTS = (
    "Dockerfile",
    "pyproject.toml",
    "requirements.lock",
    "bin/image-base.recipe",
    "bin/runtime-lock",
    "components",
    "pipelines",
)
# Never inputs: bytecode, caches, build output, and the module the Dockerfile writes.
IGNORED_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", "build"})
IGNORED_SUFFIXES = (".pyc", ".pyo", ".so", ".partial", ".egg-info")
BAKED_MODULE = "_image_build.py"
HASH_LENGTH = 12


def image_input_files(root: str) -> list[str]:
    """The image's input files under `root`, as sorted '/'-separated relative paths.

    Raises:
      FileNotFoundError: when an input of IMAGE_INPUTS is missing.
    """
    files = []
    for entry in IMAGE_INPUTS:
        path = os.path.join(root, entry)
        if os.path.isfile(path):
            files.append(entry)
            continue
        if not os.path.isdir(path):
            raise FileNotFoundError(f"{path}: an input of the image is missing")
        for folder, dirs, names in os.walk(path):
            dirs[:] = [d for d in dirs if d not in IGNORED_DIRS and not d.endswith(".egg-info")]
            for name in names:
                if name.endswith(IGNORED_SUFFIXES) or name == BAKED_MODULE:
                    continue
                full = os.path.join(folder, name)
                if os.path.isfile(full):
                    files.append(os.path.relpath(full, root).replace(os.sep, "/"))
    return sorted(files)


def project_version(root: str) -> str:
    """pyproject.toml's [project] version."""
    with open(os.path.join(root, "pyproject.toml")) as f:
        match = re.search(r'^\[project\][^\[]*?^version\s*=\s*"([^"]+)"', f.read(), re.M | re.S)
    if not match:
        raise ValueError(f"{root}/pyproject.toml has no [project] version")
    return match.group(1)


def content_tag(root: str) -> str:
    """'<version>-<12 hex>': the version and a hash of the image's inputs' contents.

    Deterministic: the sorted relative paths and each file's bytes, nothing else (no
    modes, times or owners), so every checkout of one commit gives one tag.

    Example:
      content_tag("/work/tfx-image-pipeline") -> "0.1.0-3f2a9c0d81b7"
    """
    digest = hashlib.sha256()
    for relative in image_input_files(root):
        with open(os.path.join(root, relative), "rb") as f:
            content = hashlib.sha256(f.read()).hexdigest()
        digest.update(f"{relative}\0{content}\n".encode())
    return f"{project_version(root)}-{digest.hexdigest()[:HASH_LENGTH]}"


def checkout_root() -> str | None:
    """The checkout this module is in, or None in an installed package."""
    root = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    markers = ("pyproject.toml", "Dockerfile", "requirements.lock")
    return root if all(os.path.isfile(os.path.join(root, m)) for m in markers) else None


def _current_tag() -> str:
    root = checkout_root()
    if root is not None:
        return content_tag(root)
    try:  # an installed image: the Dockerfile baked the tag in
        from imgpipe.pipelines import _image_build  # type: ignore[attr-defined]
    except ImportError:
        # Installed outside the image (pip install): there is no image to name; the
        # version alone says which release the config was written for.
        from importlib import metadata

        return metadata.version(IMAGE_NAME)
    return str(_image_build.TAG)


def image_tag(variant: str = "cpu") -> str:
    """TAG with the variant's suffix."""
    if variant not in VARIANT_SUFFIXES:
        raise ValueError(f"the image variant is one of {sorted(VARIANT_SUFFIXES)}, not {variant!r}")
    return TAG + VARIANT_SUFFIXES[variant]


def build_lock_file(variant: str) -> str:
    """The lock a build of `variant` holds (flock) while it runs, relative to the
    checkout: bin/build-image takes it, and the container tests wait on it for a build
    `make test` started in the background (tests/containers.py)."""
    return os.path.join("build", f"image-build-{variant}.lock")


def background_log_file(variant: str) -> str:
    """Where a background build of `variant` writes its output, relative to the checkout."""
    return os.path.join("build", "image-logs", f"background-{variant}.log")


TAG = _current_tag()
RUNTIME_IMAGE = f"{REGISTRY}/{IMAGE_NAME}:{image_tag('cpu')}"
GPU_IMAGE = f"{REGISTRY}/{IMAGE_NAME}:{image_tag('gpu')}"

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
