"""The Dockerfile installs the environment's pins and builds a small, non-root image.

These tests read the Dockerfile; tests/test_image.py (the container tier) runs the
image `make image` built.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from imgpipe.pipelines import images
from tests import waiting

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(name: str) -> str:
    with open(os.path.join(ROOT, name)) as f:
        return f.read()


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")),
    )
    result = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            result.append((keyword.upper(), " ".join(rest.split())))
    return result


def stages(text: str) -> list[list[tuple[str, str]]]:
    """The stages' instructions, each from its FROM on; the ARGs before the first FROM
    are global_args'."""
    result: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions(text):
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, rest))
    return result


def global_args(text: str) -> dict[str, str]:
    """The ARGs declared before the first FROM, with their defaults."""
    args = {}
    for keyword, rest in instructions(text):
        if keyword == "FROM":
            break
        assert keyword == "ARG", f"{keyword} before the first FROM"
        name, _, default = rest.partition("=")
        args[name] = default
    return args


DOCKERFILE = read("Dockerfile")
DEPS, PROJECT, RUNTIME = stages(DOCKERFILE)
# The two stages before the runtime's: the lock's venv (deps), then the project (build).
BUILD = DEPS + PROJECT


def test_the_bases_are_args_whose_defaults_are_debian_13_and_python_3_13_pinned_by_digest():
    bases = global_args(DOCKERFILE)
    assert DEPS[0] == ("FROM", "${BUILD_BASE} AS deps")
    assert PROJECT[0] == ("FROM", "deps AS build")
    assert RUNTIME[0] == ("FROM", "${RUNTIME_BASE}")
    assert re.fullmatch(r"python:3\.13-trixie@sha256:[0-9a-f]{64}", bases["BUILD_BASE"])
    assert re.fullmatch(r"python:3\.13-slim-trixie@sha256:[0-9a-f]{64}", bases["RUNTIME_BASE"])


def test_nothing_names_where_python_is():
    # The official images' Python is /usr/local/bin/python3, Debian's /usr/bin/python3.
    code = " ".join(f"{keyword} {rest}" for keyword, rest in instructions(DOCKERFILE))
    assert "/usr/local/bin" not in code and "/usr/bin/python" not in code
    assert ("RUN", "python3 -m venv /opt/venv") in BUILD


def test_no_buildkit_only_syntax():
    # The legacy builder (docker.io's, or a client without buildx) must build it.
    code = " ".join(f"{keyword} {rest}" for keyword, rest in instructions(DOCKERFILE))
    assert "--mount" not in code and "<<" not in code
    assert not DOCKERFILE.startswith("# syntax=")


SCOPE = "repository:library/python:pull"


class FakeRegistry(BaseHTTPRequestHandler):
    """The OCI distribution API as a public registry serves it: an anonymous token, then
    the manifest's digest in a header. TAGS: tag -> digest."""

    TAGS: dict[str, str] = {}
    TOKEN = "anonymous-pull-token"

    def do_GET(self):  # noqa: N802 - the token endpoint
        assert (
            self.path.startswith("/token?") and "repository%3Alibrary%2Fpython%3Apull" in self.path
        )
        self._answer(
            200, {"Content-Type": "application/json"}, b'{"token": "%s"}' % self.TOKEN.encode()
        )

    def do_HEAD(self):  # noqa: N802 - the manifest
        if self.headers.get("Authorization") != f"Bearer {self.TOKEN}":
            realm = f"http://127.0.0.1:{self.server.server_port}/token"
            challenge = (
                f'Bearer realm="{realm}",service="fake",scope="repository:library/python:pull"'
            )
            return self._answer(401, {"WWW-Authenticate": challenge})
        assert "application/vnd.oci.image.index.v1+json" in self.headers["Accept"]
        tag = self.path.removeprefix("/v2/library/python/manifests/")
        self._answer(200, {"Docker-Content-Digest": self.TAGS[tag]})

    def _answer(self, code: int, headers: dict, body: bytes = b"") -> None:
        self.send_response(code)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_pin_base_images_rewrites_the_from_lines_to_what_the_tags_name(tmp_path):
    FakeRegistry.TAGS = {
        "3.13-trixie": "sha256:" + "a" * 64,
        "3.13-slim-trixie": "sha256:" + "b" * 64,
    }
    server = HTTPServer(("127.0.0.1", 0), FakeRegistry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(DOCKERFILE)

    def pin(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [os.path.join(ROOT, "bin", "pin-base-images"), *args, str(dockerfile)],
            env={**os.environ, "IMGPIPE_REGISTRY_URL": f"http://127.0.0.1:{server.server_port}"},
            capture_output=True,
            text=True,
            timeout=waiting.COMMAND_S,
        )

    try:
        assert pin("--check").returncode == 1  # the tags have "moved" to the fake digests
        assert pin().returncode == 0
        checked = pin("--check")
    finally:
        server.shutdown()
    assert (checked.returncode, checked.stdout) == (0, "")
    bases = global_args(dockerfile.read_text())
    assert bases["BUILD_BASE"] == f"python:3.13-trixie@sha256:{'a' * 64}"
    assert bases["RUNTIME_BASE"] == f"python:3.13-slim-trixie@sha256:{'b' * 64}"
    # Nothing else changed.
    old, new = DOCKERFILE.splitlines(), dockerfile.read_text().splitlines()
    changed = [line for line, was in zip(new, old, strict=True) if line != was]
    assert [line.split("=")[0] for line in changed] == ["ARG BUILD_BASE", "ARG RUNTIME_BASE"]


def test_installs_the_variants_lock_with_its_hashes_from_the_wheels_only():
    copies = [rest for keyword, rest in BUILD if keyword == "COPY"]
    assert "requirements.lock /tmp/requirements.lock" in copies
    assert "wheels /tmp/wheels" in copies  # the build context's, never the runtime's
    runs = " ".join(rest for keyword, rest in BUILD if keyword == "RUN")
    installs = re.findall(r"pip install [^;&]*", runs)
    from_lock = [i for i in installs if " -r " in i and "--dry-run" not in i]
    assert len(from_lock) == 2  # the lock's build tools, then the variant's runtime share
    for install in from_lock:
        assert "--require-hashes --no-deps" in install
        assert "--no-index --find-links /tmp/wheels" in install
    assert from_lock[-1].rstrip().endswith("-r runtime.lock")
    # The lock's share the package runs on: pip resolves pyproject.toml's dependencies
    # against the variant's lock, offline, and bin/runtime-lock keeps their entries.
    assert "runtime-lock pins image.lock > pins.txt" in runs
    assert "-c pins.txt -r runtime.in" in runs and "--dry-run" in runs
    assert "runtime-lock subset image.lock runtime.json > runtime.lock" in runs
    assert "pip check" in runs
    # CPU: the lock up to the CUDA section line, which bin/build-image passes from
    # bin/env-common.sh; GPU: the whole lock.
    assert """cpu) awk -v stop="$LOCK_CUDA_SECTION" '$0 == stop { exit } { print }'""" in runs
    assert "gpu) cp requirements.lock image.lock" in runs
    assert "$0 == stop { exit } { print }" in read("bin/env-common.sh")
    # The lock is the environment's: bin/env-common.sh keys the venv by its hash.
    assert 'LOCK_FILE="$REPO_ROOT/requirements.lock"' in read("bin/env-common.sh")


def lock_sections() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(main, CUDA) sections of the lock: 'name==version' -> its sha256 digests."""
    cuda_section = env_common('echo "$LOCK_CUDA_SECTION"')
    sections: list[dict[str, list[str]]] = [{}]
    pin = None
    for line in read("requirements.lock").splitlines():
        if line == cuda_section:
            sections.append({})
        elif line.startswith("#") or not line.strip():
            continue
        elif line.startswith(" "):
            digest = re.fullmatch(r"\s+--hash=sha256:([0-9a-f]{64})( \\)?", line)
            assert digest and pin, line
            sections[-1][pin].append(digest.group(1))
        else:
            pin = re.fullmatch(r"([A-Za-z0-9_.\-]+==[^ ]+) \\", line).group(1)
            sections[-1][pin] = []
    main, cuda = sections
    return main, cuda


def env_common(command: str) -> str:
    return subprocess.run(
        ["bash", "-c", f"source bin/env-common.sh && {command}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.rstrip("\n")


def test_every_pin_of_the_lock_carries_hashes():
    main, cuda = lock_sections()
    assert "tensorflow==2.21.0" in main and "tfx==1.21.0" in main
    for pin, digests in {**main, **cuda}.items():
        assert digests, f"{pin} has no --hash"


def test_the_environment_is_the_locks_main_section():
    from importlib import metadata

    main, cuda = lock_sections()
    # The venv's own folder: setuptools, once imported, puts its vendored copies on sys.path.
    venv = [sysconfig.get_paths()["purelib"]]
    installed = {
        canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions(path=venv)
    }
    for pin in main:
        name, version = pin.split("==")
        assert installed.get(canonicalize_name(name)) == version, pin
    # No GPU here: bin/setup-env stops before the CUDA section.
    assert not any(canonicalize_name(pin.split("==")[0]) in installed for pin in cuda)
    # DALI (the gpu extra) brings nvidia-* libraries of its own; TensorFlow's CUDA ones
    # stay out of the environment.
    without_cuda = env_common("lock_without_cuda")
    assert [pin for pin in cuda if f"\n{pin.split('==')[0]}==" in without_cuda] == []
    assert "\nnvidia-cublas-cu12==" not in without_cuda
    assert "tensorflow==2.21.0 \\" in without_cuda


def test_the_cuda_section_pins_what_tensorflow_and_cuda_requires():
    from importlib import metadata

    _, cuda = lock_sections()
    locked = {canonicalize_name(pin.split("==")[0]): pin.split("==")[1] for pin in cuda}
    required = [
        Requirement(r)
        for r in metadata.requires("tensorflow") or []
        if "and-cuda" in r and Requirement(r).marker.evaluate({"extra": "and-cuda"})
    ]
    assert len(required) > 10
    for requirement in required:
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{requirement} is not in the lock's CUDA section"
        assert requirement.specifier.contains(locked[name]), f"{name}=={locked[name]}"


def test_the_package_is_built_and_installed_with_the_locks_tools_only():
    runs = " ".join(rest for keyword, rest in BUILD if keyword == "RUN")
    assert "pip install --require-virtualenv --no-deps --no-build-isolation /src" in runs
    # The build backend comes from the lock, not from an unpinned isolated build.
    main, _ = lock_sections()
    backend = read("pyproject.toml").split('build-backend = "')[1].split(".")[0]
    assert any(pin.startswith(backend + "==") for pin in main)


def test_runtime_stage_is_small_and_non_root():
    keywords = [keyword for keyword, _ in RUNTIME]
    runs = " ".join(rest for keyword, rest in RUNTIME if keyword == "RUN")
    assert "apt-get" not in runs and "pip install" not in runs  # build tools stay behind
    assert not [rest for keyword, rest in RUNTIME if keyword == "COPY" and "wheels" in rest]
    copies = [rest for keyword, rest in RUNTIME if keyword == "COPY"]
    assert copies == ["--from=deps /opt/venv /opt/venv", "--from=build /opt/project/ /"]
    users = [rest for keyword, rest in RUNTIME if keyword == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert keywords.index("USER") > keywords.index("COPY")


# Hash-based .pyc (PEP 552): no source timestamp in the file, so the same sources give
# the same bytes at every build.
HASH_MODES = ("unchecked-hash", "checked-hash")


def compileall_commands(stage: list[tuple[str, str]]) -> list[str]:
    """The stage's `python -m compileall` commands, each up to its end (';' or '&&')."""
    runs = " ".join(rest for keyword, rest in stage if keyword == "RUN")
    return re.findall(r"python3? -m compileall [^;&]*", runs)


def invalidation_mode(command: str) -> str:
    match = re.search(r"--invalidation-mode (\S+)", command)
    assert match, f"{command!r} sets no --invalidation-mode (the default is timestamps)"
    return match.group(1)


def test_the_venv_the_package_and_the_stdlib_are_compiled_to_hash_based_bytecode():
    """The runtime user cannot write into the root-owned venv: a module without a .pyc
    would be compiled from source at every import of every step (issue 35)."""
    (venv,) = compileall_commands(DEPS)
    assert venv.split()[-1] == "/opt/venv" and " -f " in venv  # venv's and pip's too
    (package,) = compileall_commands(PROJECT)
    assert package.split()[-1] == '"$site/imgpipe"' and " -f " in package
    (stdlib,) = compileall_commands(RUNTIME)  # for a base that ships sources only
    runtime_runs = " ".join(rest for keyword, rest in RUNTIME if keyword == "RUN")
    assert """sysconfig.get_paths()["stdlib"]""" in runtime_runs
    for command in (venv, package, stdlib):
        assert invalidation_mode(command) in HASH_MODES, command
    # The venv is compiled once everything is in it; the package before it is copied out.
    deps_runs = [rest for keyword, rest in DEPS if keyword == "RUN"]
    compiled = next(i for i, run in enumerate(deps_runs) if "compileall" in run)
    assert not any("pip install" in run for run in deps_runs[compiled:])
    project_runs = " ".join(rest for keyword, rest in PROJECT if keyword == "RUN")
    install = "pip install --require-virtualenv --no-deps --no-build-isolation /src"
    copy = 'cp -a "$site/imgpipe"'
    assert project_runs.index(install) < project_runs.index(package) < project_runs.index(copy)


def test_no_step_deletes_bytecode():
    runs = " ".join(rest for keyword, rest in instructions(DOCKERFILE) if keyword == "RUN")
    assert "__pycache__" not in runs and ".pyc" not in runs


def test_the_dockerfiles_compileall_writes_the_same_bytes_whatever_the_sources_times(tmp_path):
    """Two compilations of the same sources, with other modification times and two
    worker processes, give byte-identical .pyc files: no timestamp, nothing random."""
    (command,) = compileall_commands(DEPS)
    mode = invalidation_mode(command)
    source = tmp_path / "src"
    shutil.copytree(
        os.path.join(ROOT, "components"), source, ignore=shutil.ignore_patterns("__pycache__")
    )
    trees = []
    for n, mtime in enumerate((1_000_000_000, 1_700_000_000)):
        for path in source.rglob("*.py"):
            os.utime(path, (mtime, mtime))
        prefix = tmp_path / f"pyc-{n}"
        # The variable, not -X pycache_prefix: compileall's -j workers do not inherit -X.
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", "-j", "2"]
            + ["--invalidation-mode", mode, str(source)],
            env={**os.environ, "PYTHONPYCACHEPREFIX": str(prefix)},
            check=True,
            capture_output=True,
            timeout=waiting.COMMAND_S,
        )
        trees.append({p.relative_to(prefix): p.read_bytes() for p in prefix.rglob("*.pyc")})
    assert len(trees[0]) == len(list(source.rglob("*.py"))) > 100
    assert trees[0] == trees[1]
    flags = {int.from_bytes(pyc[4:8], "little") for pyc in trees[0].values()}
    assert flags == {0b01 if mode == "unchecked-hash" else 0b11}  # PEP 552: hash-based


def test_the_runtime_user_is_the_one_the_compiled_steps_run_as():
    runs = " ".join(rest for keyword, rest in RUNTIME if keyword == "RUN")
    assert f"groupadd --gid {images.RUNTIME_GID} " in runs
    assert f"useradd --uid {images.RUNTIME_UID} " in runs
    users = [rest for keyword, rest in RUNTIME if keyword == "USER"]
    assert users[-1] == f"{images.RUNTIME_UID}:{images.RUNTIME_GID}"  # numeric: kubelet checks


def test_a_bare_docker_build_of_the_checkout_sends_nothing():
    # make image stages its own context (bin/build-image): exactly images.IMAGE_INPUTS.
    lines = [
        line for line in read(".dockerignore").splitlines() if line and not line.startswith("#")
    ]
    assert lines == ["*"]


def test_every_file_the_build_copies_is_an_input_of_the_tag():
    copied = set()
    for keyword, rest in BUILD:
        if keyword == "COPY":
            copied.update(rest.split()[:-1])
    copied.discard("wheels")  # keyed by the lock's hash, which is an input
    inputs = images.IMAGE_INPUTS
    assert all(any(c == i or c.startswith(i + "/") for i in inputs) for c in copied), copied


def test_the_image_tag_is_set_in_one_place():
    assert images.RUNTIME_IMAGE.endswith(":" + images.TAG)
    assert images.GPU_IMAGE == images.RUNTIME_IMAGE + "-gpu"
    assert images.TAG not in DOCKERFILE
    assert "IMAGE_TAG" in DOCKERFILE
    assert 'os.path.join(ROOT, "pipelines", "images.py")' in read("bin/build-image")
    assert "bin/build-image" in read("Makefile")


def load_lock_hashes():
    loader = importlib.machinery.SourceFileLoader(
        "lock_hashes", os.path.join(ROOT, "bin/lock-hashes")
    )
    spec = importlib.util.spec_from_loader("lock_hashes", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_lock_hashes_keeps_the_files_a_linux_x86_64_cpython_can_install():
    lock_hashes = load_lock_hashes()
    files = [
        ("numpy-2.4.6-cp313-cp313-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", True),
        ("numpy-2.4.6-cp310-cp310-manylinux_2_17_x86_64.whl", True),
        ("numpy-2.4.6-cp313-cp313-manylinux_2_28_aarch64.whl", False),
        ("numpy-2.4.6-cp313-cp313-musllinux_1_2_x86_64.whl", False),
        ("numpy-2.4.6-cp313-cp313-macosx_14_0_x86_64.whl", False),
        ("numpy-2.4.6-cp313-cp313-win_amd64.whl", False),
        ("numpy-2.4.6.tar.gz", True),
        ("numpy-2.4.5-cp313-cp313-manylinux_2_28_x86_64.whl", False),
        ("numpy-2.4.6-py3-none-any.whl", True),
        ("numpy-2.4.6.exe", False),
    ]
    index = [
        {"filename": name, "hashes": {"sha256": f"{i:064x}"}} for i, (name, _) in enumerate(files)
    ]
    kept = lock_hashes.file_hashes(index, lock_hashes.Version("2.4.6"))
    assert kept == sorted(f"{i:064x}" for i, (_, keep) in enumerate(files) if keep)
    assert lock_hashes.format_pin("numpy", "2.4.6", ["a" * 64]) == (
        "numpy==2.4.6 \\\n    --hash=sha256:" + "a" * 64
    )


def test_the_image_builds_the_strict_jpeg_decoder_with_the_libjpeg_it_links():
    build_runs = " ".join(rest for keyword, rest in BUILD if keyword == "RUN")
    build_step = (
        "python /src/components/image_statistics/strict_jpeg_build.py --bundle-libjpeg"
        " --out /tmp/strict-jpeg"
    )
    assert "libjpeg62-turbo-dev" in build_runs and build_step in build_runs
    assert "cp /tmp/strict-jpeg/* /src/components/image_statistics/" in build_runs
    install = "pip install --require-virtualenv --no-deps --no-build-isolation /src"
    assert build_runs.index(build_step) < build_runs.index(install)
    recipe = read("bin/image-base.recipe")
    assert "libjpeg62-turbo-dev" in recipe and ",g++," in recipe  # the Debian build base


def test_the_tag_is_baked_into_the_package_before_it_is_installed():
    build_runs = " ".join(rest for keyword, rest in BUILD if keyword == "RUN")
    bake = build_runs.index(f"> /src/pipelines/{images.BAKED_MODULE}")
    assert bake < build_runs.index(
        "pip install --require-virtualenv --no-deps --no-build-isolation /src"
    )
    assert 'TAG = "%s"' in DOCKERFILE and images.BAKED_MODULE in read(".gitignore")


def test_runtime_lock_keeps_the_locks_entries_of_what_the_package_needs(tmp_path):
    script = os.path.join(ROOT, "bin", "runtime-lock")

    def run(*args: str) -> str:
        return subprocess.run(
            [sys.executable, script, *args], check=True, capture_output=True, text=True
        ).stdout

    wanted = run("requirements", "cpu", os.path.join(ROOT, "pyproject.toml")).split("\n")
    assert any(line.startswith("tfx==") for line in wanted)
    assert not any(line.startswith(("pytest", "moto", "nvidia-dali")) for line in wanted)
    gpu = run("requirements", "gpu", os.path.join(ROOT, "pyproject.toml")).split("\n")
    assert "tensorflow[and-cuda]" in gpu and any(line.startswith("nvidia-dali") for line in gpu)
    report = tmp_path / "runtime.json"
    report.write_text(json.dumps({"install": [{"metadata": {"name": "Absl_Py"}}]}))
    kept = run("subset", os.path.join(ROOT, "requirements.lock"), str(report))
    main, _ = lock_sections()
    pins = [line.split(" ")[0] for line in kept.splitlines() if not line.startswith(" ")]
    assert sorted(pins) == sorted(
        pin for pin in main if pin.split("==")[0] in ("absl-py", "setuptools", "wheel")
    )
    assert kept.count("--hash=sha256:") == sum(
        len(main[pin]) for pin in pins
    )  # every hash of each kept pin
