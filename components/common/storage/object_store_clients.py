"""The object stores' own clients behind object_store.py: one small Store per scheme
(boto3 for s3://, google-cloud-storage for gs://), made once per process and per
settings, and their failures as one ObjectStoreError that names the settings to check.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

S3 = "s3://"
GCS = "gs://"
SCHEMES = (S3, GCS)
SETTINGS_HINTS = {
    S3: "set AWS_ENDPOINT_URL_S3 for an S3-compatible store, and AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY",
    GCS: "set up Application Default Credentials, or STORAGE_EMULATOR_HOST for an emulator",
}


class ObjectStoreError(OSError):
    """The store refused a request, or could not be reached; the message says which
    settings it uses."""


def is_object_store(path: str) -> bool:
    return path.startswith(SCHEMES)


@dataclass(frozen=True)
class Stat:
    """What tf.io.gfile.stat returns that the project reads."""

    length: int
    is_directory: bool
    mtime_nsec: int = 0


def split_uri(path: str) -> tuple[str, str, str]:
    """(scheme, bucket, key) of an s3:// or gs:// URI."""
    scheme = S3 if path.startswith(S3) else GCS
    bucket, _, key = path[len(scheme) :].partition("/")
    if not bucket:
        raise ValueError(f"{path}: no bucket in the URI ({scheme}BUCKET/PATH)")
    return scheme, bucket, key


def store_error(path: str, error: Exception) -> ObjectStoreError:
    scheme = S3 if path.startswith(S3) else GCS
    reason = " ".join(str(error).split()) or type(error).__name__
    return ObjectStoreError(
        f"{path}: {reason} ({scheme} uses its own settings: {SETTINGS_HINTS[scheme]})"
    )


class Store:
    """The few operations the seam needs, on one store."""

    def read_range(self, bucket: str, key: str, start: int, end: int) -> bytes:
        raise NotImplementedError

    def read(self, bucket: str, key: str) -> bytes | None:
        """The whole object in one request, so one version of it, even while another
        writer replaces it; None if there is no such object."""
        raise NotImplementedError

    def info(self, bucket: str, key: str) -> Stat | None:
        """The object's size and modification time; None if there is no such object."""
        raise NotImplementedError

    def upload(self, bucket: str, key: str, file: IO[bytes]) -> None:
        raise NotImplementedError

    def keys(self, bucket: str, prefix: str) -> Iterator[tuple[str, int]]:
        """(key, size) of every object under `prefix`, in key order."""
        raise NotImplementedError

    def delete(self, bucket: str, keys: list[str]) -> None:
        raise NotImplementedError

    def copy(self, bucket: str, key: str, target_bucket: str, target_key: str) -> None:
        raise NotImplementedError

    def create(self, bucket: str, key: str, data: bytes) -> bool:
        """Writes the object only if there is none yet; False when there was one."""
        raise NotImplementedError


class S3Store(Store):
    def __init__(self) -> None:
        import boto3  # type: ignore[import-untyped] # only for s3:// paths

        self._client = boto3.client("s3")
        self._missing = self._client.exceptions.ClientError

    def read_range(self, bucket: str, key: str, start: int, end: int) -> bytes:
        response = self._client.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}")
        return response["Body"].read()

    def read(self, bucket: str, key: str) -> bytes | None:
        try:
            return self._client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except self._client.exceptions.NoSuchKey:
            return None

    def info(self, bucket: str, key: str) -> Stat | None:
        try:
            head = self._client.head_object(Bucket=bucket, Key=key)
            modified = int(head["LastModified"].timestamp() * 1e9)
            return Stat(int(head["ContentLength"]), False, modified)
        except self._missing as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise

    def upload(self, bucket: str, key: str, file: IO[bytes]) -> None:
        self._client.upload_fileobj(file, bucket, key)

    def keys(self, bucket: str, prefix: str) -> Iterator[tuple[str, int]]:
        pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            for item in page.get("Contents", []):
                yield item["Key"], int(item["Size"])

    def delete(self, bucket: str, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):  # the API's limit a request
            objects = [{"Key": key} for key in keys[start : start + 1000]]
            self._client.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})

    def copy(self, bucket: str, key: str, target_bucket: str, target_key: str) -> None:
        source = {"Bucket": bucket, "Key": key}
        self._client.copy(source, target_bucket, target_key)

    def create(self, bucket: str, key: str, data: bytes) -> bool:
        try:  # S3's conditional write (moto 5.2.5 honours it too)
            self._client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        except self._missing as e:
            code = e.response.get("Error", {}).get("Code")
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                return False
            raise
        return True


class GCSStore(Store):
    def __init__(self) -> None:
        from google.api_core import exceptions
        from google.cloud import storage

        if os.environ.get("STORAGE_EMULATOR_HOST"):
            from google.auth.credentials import AnonymousCredentials

            self._client = storage.Client(credentials=AnonymousCredentials(), project="emulator")
        else:
            self._client = storage.Client()
        self._not_found = exceptions.NotFound

    def read_range(self, bucket: str, key: str, start: int, end: int) -> bytes:
        blob = self._client.bucket(bucket).blob(key)
        return blob.download_as_bytes(start=start, end=end - 1, checksum=None)

    def read(self, bucket: str, key: str) -> bytes | None:
        try:
            return self._client.bucket(bucket).blob(key).download_as_bytes()
        except self._not_found:
            return None

    def info(self, bucket: str, key: str) -> Stat | None:
        blob = self._client.bucket(bucket).get_blob(key)
        if blob is None:
            return None
        modified = int(blob.updated.timestamp() * 1e9) if blob.updated else 0
        return Stat(int(blob.size or 0), False, modified)

    def upload(self, bucket: str, key: str, file: IO[bytes]) -> None:
        self._client.bucket(bucket).blob(key).upload_from_file(file, rewind=True)

    def keys(self, bucket: str, prefix: str) -> Iterator[tuple[str, int]]:
        for blob in self._client.list_blobs(bucket, prefix=prefix):
            yield blob.name, int(blob.size or 0)

    def delete(self, bucket: str, keys: list[str]) -> None:
        handle = self._client.bucket(bucket)
        for key in keys:
            try:
                handle.delete_blob(key)
            except self._not_found:
                pass

    def copy(self, bucket: str, key: str, target_bucket: str, target_key: str) -> None:
        source = self._client.bucket(bucket)
        source.copy_blob(source.blob(key), self._client.bucket(target_bucket), target_key)

    def create(self, bucket: str, key: str, data: bytes) -> bool:
        from google.api_core import exceptions

        # Generation 0: only if there is no live object (gcp-storage-emulator ignores it).
        try:
            self._client.bucket(bucket).blob(key).upload_from_string(data, if_generation_match=0)
        except exceptions.PreconditionFailed:
            return False
        return True


# What a client is made from: a client is made again when they change.
CLIENT_SETTINGS = {
    S3: ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_PROFILE"),
    GCS: ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS"),
}


@functools.cache
def _store_for(scheme: str, pid: int, settings: tuple[str | None, ...]) -> Store:
    del pid, settings  # clients are not shared across a fork, nor across settings
    return S3Store() if scheme == S3 else GCSStore()


def store_for_path(path: str) -> tuple[Store, str, str]:
    scheme, bucket, key = split_uri(path)
    settings = tuple(os.environ.get(name) for name in CLIENT_SETTINGS[scheme])
    try:
        return _store_for(scheme, os.getpid(), settings), bucket, key
    except Exception as e:  # noqa: BLE001 - a client that cannot be made is a settings error
        raise store_error(path, e) from e


def calling(path: str, call: Any, *args: Any) -> Any:
    """Runs a store call, its failures as one ObjectStoreError naming the path."""
    try:
        return call(*args)
    except (ObjectStoreError, FileNotFoundError, FileExistsError):
        raise
    except Exception as e:  # noqa: BLE001 - boto3 and google-cloud raise their own types
        raise store_error(path, e) from e
