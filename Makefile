# The README's two commands are 'make demo' and 'make test'; each builds the environment
# on first use (bin/setup-env) and reuses it after that.
IN_ENV := bin/in-env
PYTEST_ARGS ?=
# make test's pytest-xdist workers (tests/conftest.py: what runs one at a time); 0: none.
TEST_WORKERS ?= 2
# Empty: the demo's own default folder (imgpipe demo --help).
DEMO_DIR ?=

.PHONY: env test test-fast lint typecheck format demo bench lock image image-gpu image-for-tests \
	docker-engine k8s-images pin-images clean-env engines-fetch engines flink-image

# pytest exits 5 when it collected nothing: a broken set-up, never a pass.
define run_pytest
	$(IN_ENV) python -m pytest $(1) $(PYTEST_ARGS) || { rc=$$?; \
	  [ $$rc != 5 ] || echo "make: pytest collected no tests; the test set-up is broken" >&2; exit $$rc; }
endef

env:
	bin/setup-env
	$(IN_ENV) python -m imgpipe.components.image_statistics.strict_jpeg_build

# The linter and the formatter's check (`make format` rewrites the files).
lint: env
	$(IN_ENV) ruff check .
	$(IN_ENV) ruff format --check .

format: env
	$(IN_ENV) ruff format .

# mypy over the package; its settings are in pyproject.toml.
typecheck: env
	$(IN_ENV) mypy

# Every tier, after the static checks: what CI runs. Where a Docker engine answers, the
# production image is built in the background while everything else runs (the container
# tier runs last and waits for it: tests/containers.py); where none does, that tier is
# skipped, loudly.
test: image-for-tests lint typecheck engines-fetch flink-image
	$(call run_pytest,-n $(TEST_WORKERS))

# The unit tier alone: under half a minute once the environment exists.
test-fast: env
	$(call run_pytest,-m unit)

# The engine tier's artifacts, fetched once into the artifact cache (bin/fetch-engines).
engines-fetch: env
	bin/fetch-engines

# The container tier's Flink image, built without a registry from the engines' jars
# (bin/flink-image; docs/flink-containers.md). Without a Docker engine it only says so.
flink-image: engines-fetch
	bin/flink-image

# A Flink session cluster and the Beam worker pool on this machine, until Ctrl-C.
engines: engines-fetch
	$(IN_ENV) imgpipe engine flink

demo: env
	$(IN_ENV) imgpipe demo $(if $(DEMO_DIR),--workdir $(DEMO_DIR))

bench: env
	$(IN_ENV) python -m benchmarks.run $(BENCH_ARGS)

# Re-resolve pyproject.toml's pins into requirements.lock, with the sha256 of every file
# and the CUDA libraries of tensorflow[and-cuda] (bin/lock-hashes).
lock:
	bin/setup-env --relock

# The production image (bin/build-image; docs/image.md), tagged with its content tag
# (imgpipe.pipelines.images) and, for the CPU variant, tfx-image-pipeline:dev. Needs a
# Docker engine (make docker-engine). VARIANT=gpu: the whole lock, CUDA included.
# IMGPIPE_IMAGE_BASE=registry|debian|auto chooses the base images.
VARIANT ?= cpu
image: env
	bin/build-image --variant $(VARIANT)

image-gpu: env
	bin/build-image --variant gpu

# make test's: the CPU image, built in the background where an engine answers, else a
# loud warning and no build. IMAGE_ARGS=--drop-build-stages (CI, which builds it once)
# removes the build stages' 5 GB when it is built.
image-for-tests: env
	bin/build-image --if-engine --background $(IMAGE_ARGS)

# Debian's docker.io, installed and started when no Docker engine answers (CI).
docker-engine:
	bin/docker-engine

# Point k8s/'s manifests at this checkout's image tags (or, after a push, at digests:
# bin/k8s-images --help).
k8s-images:
	bin/k8s-images

# Pin the Dockerfile's base images, and the third-party images of k8s/ (Flink, Beam's
# job server), to the digests their tags name now (needs the registries; no Docker engine).
pin-images:
	bin/pin-base-images Dockerfile k8s/*.yaml

clean-env:
	rm -f .venv
