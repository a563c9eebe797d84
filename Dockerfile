# The image every step of the compiled Kubeflow pipeline runs (pipelines/images.py names
# it; `make image` builds and tags it from there). Debian 13 and Python 3.13, like the
# development environment; the pins and their hashes are requirements.lock's, the one
# source of truth. TensorFlow comes with its CUDA libraries (the lock's
# tensorflow[and-cuda] section), so the same image trains on GPU nodes and runs the CPU
# steps.

# Base images are pinned by digest: a tag can be moved to another image, a digest cannot.
# `make pin-images` (bin/pin-base-images) asks the registry what the tags name now and
# rewrites these lines; review and commit the change like any other.

# ---- build stage: compilers and pip caches stay here ---------------------------------
FROM python:3.13-trixie@sha256:c68b61ac211bc17bda0dfabff372246fd7dbb7dceaeabdb01cd6042a197c53c2 AS build

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# Dependencies first: this layer is rebuilt only when the lock changes. The whole lock,
# its CUDA section included: every file is checked against its sha256 in the lock, and
# nothing outside the lock is resolved (pip check proves the set complete).
COPY requirements.lock /tmp/requirements.lock
RUN pip install --require-virtualenv --require-hashes --no-deps -r /tmp/requirements.lock \
 && pip check

# The project itself, built with the lock's setuptools: nothing fetched unpinned.
COPY pyproject.toml README.md /src/
COPY components /src/components
COPY pipelines /src/pipelines
# The statistics' strict JPEG decoder, built into the package (strict_jpeg_build.py)
# with the libjpeg it links beside it, so the runtime stage needs no system package.
RUN apt-get update && apt-get install -y --no-install-recommends libjpeg62-turbo-dev \
 && rm -rf /var/lib/apt/lists/* \
 && python /src/components/image_statistics/strict_jpeg_build.py --bundle-libjpeg \
      --out /src/components/image_statistics
RUN pip install --require-virtualenv --no-deps --no-build-isolation /src \
 && find /opt/venv -name '__pycache__' -prune -exec rm -rf {} +

# ---- runtime stage -------------------------------------------------------------------
FROM python:3.13-slim-trixie@sha256:9662417aace5ae7b8e2609cce472b72a8958e134ba372808abe9cc1a0c0125e6

RUN groupadd --gid 1000 imgpipe \
 && useradd --uid 1000 --gid imgpipe --create-home --shell /usr/sbin/nologin imgpipe
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    TF_CPP_MIN_LOG_LEVEL=1

USER 1000:1000
WORKDIR /home/imgpipe
# The compiled pipeline sets the command (python -m imgpipe.pipelines.container.entrypoint);
# this default serves interactive use.
ENTRYPOINT ["imgpipe"]
CMD ["--help"]
