"""The container images the compiled pipeline names: the one place their tag is set.

`make image` builds RUNTIME_IMAGE from the top-level Dockerfile. The same image carries
TensorFlow's CUDA libraries, so GPU_IMAGE is the same build: a separate tag would let
the Trainer drift from the components that wrote its inputs.
"""

from __future__ import annotations

REGISTRY = "ghcr.io/tfx-image-pipeline"
IMAGE_NAME = "tfx-image-pipeline"
TAG = "0.1.0"

RUNTIME_IMAGE = f"{REGISTRY}/{IMAGE_NAME}:{TAG}"
GPU_IMAGE = RUNTIME_IMAGE
