# The image every step of the compiled Kubeflow pipeline runs. Build it with `make image`
# (bin/build-image; docs/image.md), which stages the build context (the lock's wheels
# included) and passes the ARGs below; a bare `docker build .` has no wheels to install.
# Debian 13 and Python 3.13, like the development environment; the pins and their hashes
# are requirements.lock's, the one source of truth. Works with the legacy builder: no
# BuildKit syntax (RUN --mount, heredocs).
#
# ARGs (bin/build-image sets them all):
#   BUILD_BASE, RUNTIME_BASE  the stages' base images. The defaults are the official
#       Python images, pinned by digest (a tag can be moved, a digest cannot; `make
#       pin-images` rewrites these two lines). With no registry, bin/image-base builds
#       Debian 13 bases with debootstrap instead: Python is /usr/bin/python3 there,
#       /usr/local/bin/python3 in the official images, and nothing below names either.
#   VARIANT            cpu (the lock without its CUDA section) or gpu (the whole lock).
#   LOCK_CUDA_SECTION  the line that opens the lock's CUDA section (bin/env-common.sh).
#   IMAGE_TAG          the content tag (imgpipe.pipelines.images), baked into the package.
ARG BUILD_BASE=python:3.13-trixie@sha256:c68b61ac211bc17bda0dfabff372246fd7dbb7dceaeabdb01cd6042a197c53c2
ARG RUNTIME_BASE=python:3.13-slim-trixie@sha256:9662417aace5ae7b8e2609cce472b72a8958e134ba372808abe9cc1a0c0125e6

# ---- deps stage: the lock in a venv; compilers and wheels stay here ---------------------
FROM ${BUILD_BASE} AS deps

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# Dependencies first: these layers are rebuilt only when the lock, pyproject.toml or the
# variant changes. The wheels (and the few sdists) come from the host's cache (wheels/,
# fetched once per lock by bin/build-image), never from an index: every file is checked
# against its sha256 in the lock, and nothing outside the lock is resolved (pip check
# proves the set complete). Only the lock's share the package runs on goes in
# (bin/runtime-lock: pip resolves pyproject.toml's dependencies, with the gpu extra on
# GPU, against the lock's pins), not the development tools. The lock's setuptools and
# wheel go in first, so that an sdist builds with them (--no-build-isolation) rather than
# with tools fetched unpinned.
ARG VARIANT=cpu
ARG LOCK_CUDA_SECTION
COPY requirements.lock /tmp/requirements.lock
COPY pyproject.toml bin/runtime-lock /tmp/
COPY wheels /tmp/wheels
RUN set -e; cd /tmp; \
    grep -qxF "$LOCK_CUDA_SECTION" requirements.lock \
      || { echo "the lock has no CUDA section line '$LOCK_CUDA_SECTION'" >&2; exit 1; }; \
    case "$VARIANT" in \
      cpu) awk -v stop="$LOCK_CUDA_SECTION" '$0 == stop { exit } { print }' requirements.lock > image.lock ;; \
      gpu) cp requirements.lock image.lock ;; \
      *) echo "VARIANT must be cpu or gpu, not '$VARIANT'" >&2; exit 1 ;; \
    esac; \
    awk '/^[^ #]/ { keep = /^(setuptools|wheel)==/ } keep' image.lock > build-tools.lock; \
    pip install --require-virtualenv --no-compile --no-index --find-links /tmp/wheels --require-hashes --no-deps -r build-tools.lock; \
    python3 /tmp/runtime-lock requirements "$VARIANT" /tmp/pyproject.toml > runtime.in; \
    python3 /tmp/runtime-lock pins image.lock > pins.txt; \
    pip install --dry-run --ignore-installed --quiet --report runtime.json --no-index --find-links /tmp/wheels -c pins.txt -r runtime.in; \
    python3 /tmp/runtime-lock subset image.lock runtime.json > runtime.lock; \
    pip install --require-virtualenv --no-compile --no-index --find-links /tmp/wheels --no-build-isolation --require-hashes --no-deps -r runtime.lock; \
    pip check
# Bytecode for the whole venv, compiled here once: the runtime user (uid 1000) cannot
# write into the root-owned venv, so a module without a .pyc would be compiled from
# source at every import of every step (TensorFlow, TFX, Beam and TFDV: minutes). The
# .pyc files are hash-based, not timestamp-based: they record the source's hash, so the
# same inputs give the same bytes whenever they are built. `unchecked-hash`: Python
# trusts them without reading the source again, as nothing in an image edits its files.
# -f rewrites the few timestamp-based ones that venv and pip wrote (pip itself is told
# --no-compile above).
RUN python3 -m compileall -q -f -j 0 --invalidation-mode unchecked-hash /opt/venv

# ---- build stage: the project, installed into that venv --------------------------------
FROM deps AS build

# The statistics' strict JPEG decoder, built into the package (strict_jpeg_build.py)
# with the libjpeg it links beside it, so the runtime stage needs no system package. The
# official image and the debootstrapped base both carry the headers; apt-get is the
# fallback for another base.
COPY components/image_statistics/strict_jpeg.c components/image_statistics/strict_jpeg_build.py /src/components/image_statistics/
RUN [ -e /usr/include/jpeglib.h ] || { apt-get update \
      && apt-get install -y --no-install-recommends libjpeg62-turbo-dev \
      && rm -rf /var/lib/apt/lists/*; }; \
    python /src/components/image_statistics/strict_jpeg_build.py --bundle-libjpeg \
      --out /tmp/strict-jpeg

# The project itself, built with the lock's setuptools: nothing fetched unpinned.
# README.md is not an input of the image (a documentation edit must not retag it): the
# package's metadata gets a one-line description instead.
COPY pyproject.toml /src/
COPY components /src/components
COPY pipelines /src/pipelines
ARG VARIANT=cpu
ARG IMAGE_TAG
RUN set -e; test -n "$IMAGE_TAG" || { echo "IMAGE_TAG is not set: build with make image" >&2; exit 1; }; \
    cp /tmp/strict-jpeg/* /src/components/image_statistics/; \
    echo "tfx-image-pipeline $IMAGE_TAG ($VARIANT): see the project's README." > /src/README.md; \
    printf '"""Written by the Dockerfile: the tag and variant of the image this package is in."""\n\nTAG = "%s"\nVARIANT = "%s"\n' \
      "$IMAGE_TAG" "$VARIANT" > /src/pipelines/_image_build.py; \
    pip install --require-virtualenv --no-deps --no-build-isolation /src; \
    site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"; \
    python -m compileall -q -f --invalidation-mode unchecked-hash "$site/imgpipe"; \
    mkdir -p "/opt/project$site" /opt/project/opt/venv/bin; \
    cp -a "$site/imgpipe" "$site"/tfx_image_pipeline-*.dist-info "/opt/project$site/"; \
    cp -a /opt/venv/bin/imgpipe /opt/project/opt/venv/bin/
# The legacy builder keeps this stage as an untagged image (5 GB): labelled, a build that
# will not build again (CI) removes it and its parents by this label.
LABEL io.github.tfx-image-pipeline.stage="build"

# ---- runtime stage: the base, the venv and a non-root user; no compilers -------------
FROM ${RUNTIME_BASE}

RUN groupadd --gid 1000 imgpipe \
 && useradd --uid 1000 --gid imgpipe --create-home --shell /usr/sbin/nologin imgpipe
# The base's standard library, compiled where it has no bytecode yet (Debian's package
# compiles it when installed; this catches a base that ships sources only), for the same
# reason as the venv's.
RUN python3 -m compileall -q -j 0 --invalidation-mode unchecked-hash \
      "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')"
# The lock's venv, then the project's files in it (/opt/project mirrors their paths): a
# source edit adds a small layer, not another copy of the whole venv.
COPY --from=deps /opt/venv /opt/venv
COPY --from=build /opt/project/ /
ENV PATH=/opt/venv/bin:$PATH \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    TF_CPP_MIN_LOG_LEVEL=1
ARG IMAGE_TAG
ARG VARIANT=cpu
ARG RUNTIME_BASE
LABEL org.opencontainers.image.title="tfx-image-pipeline" \
      org.opencontainers.image.version="$IMAGE_TAG" \
      org.opencontainers.image.base.name="$RUNTIME_BASE" \
      io.github.tfx-image-pipeline.variant="$VARIANT"

USER 1000:1000
WORKDIR /home/imgpipe
# The compiled pipeline sets the command (python -m imgpipe.pipelines.container.entrypoint);
# this default serves interactive use. PID 1 is Python itself (no shell in between), so
# SIGTERM reaches it.
ENTRYPOINT ["imgpipe"]
CMD ["--help"]
