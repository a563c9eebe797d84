# The README's two commands are 'make demo' and 'make test'; each builds the environment
# on first use (bin/setup-env) and reuses it after that.
IN_ENV := bin/in-env
PYTEST_ARGS ?=
DEMO_DIR ?= /tmp/imgpipe-demo

.PHONY: env test lint demo bench lock image clean-env

env:
	bin/setup-env

lint: env
	$(IN_ENV) ruff check .

test: env
	$(IN_ENV) ruff check .
	@# pytest exits 5 when it collected nothing: a broken set-up, never a pass.
	$(IN_ENV) python -m pytest $(PYTEST_ARGS) || { rc=$$?; \
	  [ $$rc != 5 ] || echo "make test: pytest collected no tests; the test set-up is broken" >&2; exit $$rc; }

demo: env
	$(IN_ENV) imgpipe demo --workdir $(DEMO_DIR)

bench: env
	$(IN_ENV) python -m benchmarks.run $(BENCH_ARGS)

# Re-resolve pyproject.toml's pins into requirements.lock.
lock:
	bin/setup-env --relock

# The Kubeflow runtime image; needs a Docker engine (none on the project's build machines).
image:
	docker build -t $$($(IN_ENV) python -c 'from pipelines.images import RUNTIME_IMAGE; print(RUNTIME_IMAGE)') .

clean-env:
	rm -f .venv
