"""Object-store emulators for the platform tier: moto's S3 server and a GCS emulator, each
a process of its own on a free loopback port, stopped when the test ends however it ends.

The settings each store reads are set in os.environ (and so reach the subprocesses and
Beam's filesystems); `settings()` gives them for a child process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

HOST = "127.0.0.1"
# From the emulator's start to its port answering (moto's server, the GCS emulator):
# measured busy, 0.2-1.3 s.
START_TIMEOUT_S = 60.0
# A stopped emulator's exit after SIGTERM, before SIGKILL ends it (no failure either way).
STOP_WAIT_S = 10.0
BUCKET = "imgpipe-test"


@dataclass(frozen=True)
class Store:
    scheme: str  # "s3://" or "gs://"
    endpoint: str
    env: dict[str, str]

    def uri(self, *parts: str) -> str:
        return self.scheme + "/".join([BUCKET, *parts])


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _wait_for(port: int, process: subprocess.Popen, name: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), 0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{name} did not listen on {HOST}:{port} within {START_TIMEOUT_S} s")


@contextlib.contextmanager
def _process(argv: list[str], port: int, name: str) -> Iterator[None]:
    if shutil.which(argv[0]) is None and not os.path.exists(argv[0]):
        raise RuntimeError(
            f"{name}: {argv[0]} is not installed; run `make env` (it is in the dev extra)"
        )
    process = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        _wait_for(port, process, name)
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def s3_server() -> Iterator[Store]:
    """moto's S3 server, with the bucket made; boto3's settings point at it."""
    port = free_port()
    endpoint = f"http://{HOST}:{port}"
    env = {
        "AWS_ENDPOINT_URL_S3": endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    argv = [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)]
    with _process(argv, port, "moto's S3 server"), _environment(env):
        import boto3

        boto3.client("s3").create_bucket(Bucket=BUCKET)
        yield Store("s3://", endpoint, env)


@contextlib.contextmanager
def gcs_server() -> Iterator[Store]:
    """gcp-storage-emulator, in memory, with the bucket made; STORAGE_EMULATOR_HOST
    points at it."""
    port = free_port()
    endpoint = f"http://{HOST}:{port}"
    env = {"STORAGE_EMULATOR_HOST": endpoint}
    binary = os.path.join(os.path.dirname(sys.executable), "gcp-storage-emulator")
    argv = [binary, "start", "--host", HOST, "--port", str(port), "--in-memory"]
    with _process(argv, port, "gcp-storage-emulator"), _environment(env):
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        storage.Client(credentials=AnonymousCredentials(), project="test").create_bucket(BUCKET)
        yield Store("gs://", endpoint, env)
