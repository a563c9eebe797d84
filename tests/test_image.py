"""The built production image (make image) under Docker: what every compiled step runs."""

from __future__ import annotations

import json
import os

import pytest

from imgpipe.pipelines import images
from tests import containers

pytestmark = pytest.mark.container

COMPILERS = ("cc", "gcc", "g++", "c++")

# The environment's development tools, and DALI, which only the GPU image carries.
DEV_ONLY = ("pytest", "ruff", "mypy", "moto", "gcp_storage_emulator", "nvidia")
# One container answers the questions that need Python inside the image.
FACTS = (
    f"compilers = {COMPILERS!r}\nDEV_ONLY = {DEV_ONLY!r}\n"
    + """
import importlib.util, json, os, shutil
import imgpipe.pipelines.container.entrypoint
from imgpipe.components.image_statistics import strict_jpeg
from imgpipe.pipelines import images
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(),
    "tag": images.TAG, "runtime_image": images.RUNTIME_IMAGE, "gpu_image": images.GPU_IMAGE,
    "checkout": images.checkout_root(),
    "strict_jpeg": strict_jpeg.library() is not None,
    "compilers": [c for c in compilers if shutil.which(c) or os.path.exists("/usr/bin/" + c)],
    "dev_tools": [m for m in DEV_ONLY if importlib.util.find_spec(m) is not None],
}))
"""
)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What a step imports before its work: the libraries, the entrypoint and every
# component's executor.
STEP_IMPORTS = (
    "tensorflow",
    "tfx.v1",
    "apache_beam",
    "tensorflow_data_validation",
    "imgpipe.pipelines.container.entrypoint",
    *sorted(
        f"imgpipe.components.{name}.executor"
        for name in os.listdir(os.path.join(ROOT, "components"))
        if os.path.isfile(os.path.join(ROOT, "components", name, "executor.py"))
    ),
)
# Times the imports of its arguments, and records every module compiled from source
# (SourceFileLoader compiles only where no valid .pyc is found) and every .pyc of the
# interpreter's prefix (the image's venv) that is not hash-based (PEP 552 flags).
IMPORT_PROBE = """
import importlib, importlib.machinery, json, sys, time
compiled = []
source_to_code = importlib.machinery.SourceFileLoader.source_to_code
def recording(self, data, path, *args, **kwargs):
    compiled.append(path)
    return source_to_code(self, data, path, *args, **kwargs)
importlib.machinery.SourceFileLoader.source_to_code = recording
start, cpu_start = time.perf_counter(), time.process_time()
for name in sys.argv[1:]:
    importlib.import_module(name)
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
in_prefix, timestamped = 0, []
for module in list(sys.modules.values()):
    spec = getattr(module, "__spec__", None)
    if spec and spec.cached and spec.origin.startswith(sys.prefix + "/"):
        in_prefix += 1
        with open(spec.cached, "rb") as f:
            if not int.from_bytes(f.read(8)[4:], "little") & 1:
                timestamped.append(spec.cached)
print(json.dumps({"seconds": seconds, "cpu": cpu, "modules": len(sys.modules),
                  "in_prefix": in_prefix, "compiled": compiled, "timestamped": timestamped}))
"""


def probe_result(output: str) -> dict:
    lines = [line for line in output.splitlines() if line.startswith('{"seconds"')]
    assert lines, output[-3000:]
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def image() -> str:
    return containers.runtime_image()


@pytest.fixture(scope="module")
def facts(image) -> dict:
    code, output = containers.run(image, ["-c", FACTS], entrypoint=["python"])
    assert code == 0, output
    return json.loads(output.strip().splitlines()[-1])


def test_the_baked_tag_is_the_tag_computed_from_the_checkout(image, facts):
    assert facts["checkout"] is None  # an installed package: the tag is the baked one
    assert facts["tag"] == images.TAG
    assert (facts["runtime_image"], facts["gpu_image"]) == (images.RUNTIME_IMAGE, images.GPU_IMAGE)
    labels = containers.docker_client().images.get(image).labels
    assert labels["org.opencontainers.image.version"] == images.TAG
    assert labels["org.opencontainers.image.base.name"]  # which base: registry's or Debian's


def test_the_runtime_has_no_compilers(facts):
    assert facts["compilers"] == []


def test_the_image_holds_what_the_package_runs_on_not_the_development_tools(facts):
    assert facts["dev_tools"] == []  # bin/runtime-lock: the lock's runtime share only


def test_it_runs_as_the_runtime_user(image, facts):
    assert (facts["uid"], facts["gid"]) == (images.RUNTIME_UID, images.RUNTIME_GID)
    config = containers.docker_client().images.get(image).attrs["Config"]
    assert config["User"] == f"{images.RUNTIME_UID}:{images.RUNTIME_GID}"


def test_the_entrypoint_module_imports_and_the_strict_jpeg_library_loads(facts):
    assert facts["strict_jpeg"] is True


def test_pip_check_passes(image):
    code, output = containers.run(image, ["check"], entrypoint=["pip"])
    assert code == 0, output
    assert "No broken requirements found" in output


def test_the_default_command_is_the_cli_help(image):
    code, output = containers.run(image, [])
    assert code == 0, output
    assert "usage: imgpipe" in output


@pytest.mark.parametrize("signal_name, code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_to_the_containers_pid_1_stops_the_work_and_publishes_nothing(
    image, tmp_path, signal_name, code
):
    """In a pod the step is PID 1, which ignores a signal it has no handler for: the CLI
    converts SIGTERM (the kubelet's) and SIGINT into a clean stop, exit 128+n, within the
    stop's bound, and the output holds no manifest that a reader would accept. The signal
    lands at several moments (during the imports, once PID 1 has its handlers, as the
    output appears, and at seeded moments of the conversion) while the machine is busy; a
    container that had finished first exits 0 with its whole output. CI once caught the
    imports' moment inside importlib's module-lock callback, which discards what it raises:
    the conversion ran on and published (termination.py, stop_request.py)."""
    import time

    import docker

    from imgpipe.components.common.formats import layout
    from tests import imagegen, procfs, stopping, waiting

    src = tmp_path / "src"
    imagegen.make_image_folder(str(src), {"a": 300, "b": 300}, size=(160, 160))
    os.chmod(tmp_path, 0o777)
    client = containers.docker_client()
    took = {}
    moments = [None, *stopping.moments(code, 2)]  # None: during the imports
    try:
        with stopping.busy_machine():
            for index, moment in enumerate(moments):
                out = tmp_path / f"out-{index}"
                container = client.containers.create(
                    image,
                    ["convert", "/data/src", f"/data/{out.name}", "--resize", "96"]
                    + ["--verify", "decode"],
                    network_mode="none",
                    volumes={str(tmp_path): {"bind": "/data", "mode": "rw"}},
                )
                try:
                    container.start()
                    if moment is None:  # as soon as it has its handlers: the imports follow
                        container.reload()
                        pid = container.attrs["State"]["Pid"]
                        waiting.until(
                            lambda pid=pid: (
                                stopping.has_stop_handlers(pid) or not procfs.living([pid])
                            ),
                            "PID 1's stop handlers",
                            containers.RUN_TIMEOUT_S,
                        )
                    else:
                        deadline = time.monotonic() + containers.RUN_TIMEOUT_S
                        while not out.exists() and time.monotonic() < deadline:
                            time.sleep(0.02)
                        assert out.exists(), container.logs().decode(errors="replace")
                        time.sleep(moment)
                    sent = time.monotonic()
                    try:
                        container.kill(signal=signal_name)
                        signalled = True
                    except docker.errors.APIError as e:
                        if e.status_code != 409:  # 409: it is not running, it has finished
                            raise
                        signalled = False
                    status = container.wait(timeout=containers.RUN_TIMEOUT_S)["StatusCode"]
                    if signalled:
                        took[moment] = time.monotonic() - sent
                    logs = container.logs().decode(errors="replace")
                finally:
                    container.remove(force=True)
                published = (out / layout.MANIFEST_FILE).exists()
                if status == 0 and moment is not None:  # it had finished
                    assert published, logs
                    continue
                assert status == code, logs
                assert f"stopped by {signal_name}" in logs
                assert not published
    finally:
        client.close()
    assert took and max(took.values()) <= stopping.STOP_BOUND_S, took


def test_a_steps_imports_load_from_hash_based_bytecode_compiled_at_build_time(image):
    """Every module a step imports comes from a hash-based .pyc compiled at build time
    (the runtime user cannot write one), so no step compiles its imports from source.

    What that saves is measured, not asserted here: a wall-time ratio against the
    development environment swung with the machine's load (5.9 s, then 11.5 s, for the
    same imports) and failed CI on a busy machine; `make bench BENCH_ARGS="--only
    startup"` times each step's start in the image beside its baseline."""
    code, output = containers.run(image, ["-c", IMPORT_PROBE, *STEP_IMPORTS], entrypoint=["python"])
    assert code == 0, output[-3000:]
    result = probe_result(output)
    assert result["compiled"] == [], f"compiled from source at import: {result['compiled']}"
    assert result["timestamped"] == []
    assert result["in_prefix"] > 1000  # TensorFlow's, TFX's, Beam's, ... modules
