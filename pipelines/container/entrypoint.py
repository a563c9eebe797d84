"""Container entrypoint of every pipeline step on Kubeflow Pipelines v2.

`python -m imgpipe.pipelines.container.entrypoint <TFX's kubeflow_v2_run_executor args>`
runs TFX's own executor entrypoint after fixing what breaks it on the open-source KFP v2
backend (the Vertex AI backend needs none of this, and none of it changes Vertex runs).
The patches of TFX's private helpers (1-3) are in imgpipe/pipelines/tfx_patches.py.

1. `system.*` schema titles. The OSS driver hands input artifacts typed as they were
   recorded in its MLMD (system.Artifact, system.Dataset, system.Model, ...), which TFX
   treats as Python import paths. Input types are restored from the component's inputs
   spec (compiled in with pipeline spec 2.1); `system.*` titles also map to TFX classes
   as a fallback, then artifact metadata keys decide (split_names -> Examples).
2. A null `instance_schema`. yaml.safe_load("") is None, and TFX calls .get on it; an
   empty schema now reads as untyped and goes through (1).
3. KubeflowV2DagRunner's export with kfp >= 2. `tfx.v1.orchestration.experimental`
   drops it when its kfp-v1 imports fail; the project compiles through
   tfx.orchestration.kubeflow.v2.kubeflow_v2_dag_runner, and this module re-exports it
   for user code that imports the public name.
4. Zero-byte directory markers. TF's GCS filesystem writes "dir/" blobs that the KFP
   launcher downloads as files, so the next step fails with "not a directory". With
   artifact I/O "local" the step writes to the launcher's local paths (/gcs/, /minio/,
   /s3/) and the launcher uploads files only; with "direct" gs:// writes, the markers
   under each output are deleted after the executor. "auto" is local for the schemes
   TensorFlow cannot open (minio://, s3://) and direct otherwise.
5. A crash at interpreter exit. protobuf/ml-metadata destructors can abort after the
   executor output is written, failing a step whose outputs exist. Once the output
   metadata is written, the process ends with os._exit.

Retention (retention_step.py): each step records its run's folder in the pipeline root
before its executor, and the Pusher's step collects after it.

SIGTERM, which Kubernetes sends on eviction, stops the executor through
imgpipe/pipelines/termination.py, so that the executor removes its work folders on
the way out; a retry into the same output URI then starts from a clean folder.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from imgpipe.components.common.storage.launcher_mounts import local_path
from imgpipe.pipelines import termination, tfx_patches
from imgpipe.pipelines.container import retention_step
from imgpipe.pipelines.kfp_contract import (
    ARTIFACT_IO_ENV,
    ARTIFACT_IO_MODES,
    MODE_AUTO,
    MODE_DIRECT,
    MODE_LOCAL,
)

# Schemes TensorFlow's filesystems open without plugins.
TF_NATIVE_SCHEMES = ("gs://",)

# Metadata keys that identify a TFX type when only a system.* title is known.
METADATA_SIGNATURES = (
    ("split_names", "tfx.Examples"),
    ("pushed_destination", "tfx.PushedModel"),
    ("blessed", "tfx.ModelBlessing"),
)

_log = logging.getLogger(__name__)


# ---- 1 and 2: artifact types -------------------------------------------------------


def _is_tfx_title(title: str | None) -> bool:
    return bool(title) and not title.startswith("system.")  # type: ignore[union-attr]


def restore_input_types(executor_input, inputs_spec) -> list[str]:
    """Gives each input artifact without a TFX type the type its inputs spec declares.

    Falls back to metadata keys (METADATA_SIGNATURES) when no spec names the input.
    Returns the input keys it changed.
    """
    changed = []
    for key, artifact_list in executor_input.inputs.artifacts.items():
        declared = (
            inputs_spec.artifacts[key].artifact_type
            if (inputs_spec is not None and key in inputs_spec.artifacts)
            else None
        )
        for artifact in artifact_list.artifacts:
            if _is_tfx_title(tfx_patches.schema_title(artifact.type)):
                continue
            if declared is not None and _is_tfx_title(tfx_patches.schema_title(declared)):
                artifact.type.CopyFrom(declared)
            else:
                keys = set(artifact.metadata.keys()) | set(artifact.custom_properties.keys())
                guess = next((title for k, title in METADATA_SIGNATURES if k in keys), None)
                if guess is None:
                    continue
                artifact.type.Clear()
                artifact.type.schema_title = guess
            changed.append(key)
    return changed


# ---- 4: artifact I/O and directory markers ----------------------------------------


def uses_local_path(uri: str, mode: str) -> bool:
    if local_path(uri) is None or mode == MODE_DIRECT:
        return False
    return mode == MODE_LOCAL or not uri.startswith(TF_NATIVE_SCHEMES)


def localize_uris(executor_input, mode: str) -> dict[str, str]:
    """Points artifacts at the launcher's local paths; returns local path -> URI."""
    if mode not in ARTIFACT_IO_MODES:
        raise ValueError(
            f"{ARTIFACT_IO_ENV} must be one of {list(ARTIFACT_IO_MODES)}, got {mode!r}"
        )
    remote_of: dict[str, str] = {}
    for side in (executor_input.inputs.artifacts, executor_input.outputs.artifacts):
        for artifact_list in side.values():
            for artifact in artifact_list.artifacts:
                path = local_path(artifact.uri)
                if path is not None and uses_local_path(artifact.uri, mode):
                    remote_of[path] = artifact.uri
                    artifact.uri = path
    return remote_of


def restore_output_uris(output_file: str, remote_of: dict[str, str]) -> None:
    """Rewrites the executor output so that KFP records the remote URIs."""
    if not remote_of:
        return
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2
    from tfx.dsl.io import fileio

    output = pipeline_spec_pb2.ExecutorOutput()
    with fileio.open(output_file, "rb") as f:
        json_format.Parse(f.read(), output, ignore_unknown_fields=True)
    for artifact_list in output.artifacts.values():
        for artifact in artifact_list.artifacts:
            artifact.uri = remote_of.get(artifact.uri, artifact.uri)
    with fileio.open(output_file, "wb") as f:
        f.write(json_format.MessageToJson(output))


def directory_markers(blobs: Iterable[Any]) -> list[Any]:
    """The zero-byte blobs named like folders ("a/b/") among GCS blobs."""
    return [b for b in blobs if b.name.endswith("/") and not b.size]


def delete_gcs_directory_markers(
    uris: Iterable[str], make_client: Callable[[], Any] | None = None
) -> int:
    """Deletes zero-byte "dir/" blobs under each gs:// URI; returns how many."""
    uris = [u for u in uris if u.startswith("gs://")]
    if not uris:
        return 0
    if make_client is None:
        from google.cloud import storage

        make_client = storage.Client
    client = make_client()
    deleted = 0
    for uri in uris:
        bucket_name, _, prefix = uri[len("gs://") :].partition("/")
        prefix = prefix.rstrip("/") + "/" if prefix else ""
        bucket = client.bucket(bucket_name)
        for blob in directory_markers(bucket.list_blobs(prefix=prefix)):
            blob.delete()
            deleted += 1
    if deleted:
        _log.info("deleted %d zero-byte directory marker(s) under %s", deleted, uris)
    return deleted


# ---- the entrypoint ------------------------------------------------------------------


def prepare(args, mode: str) -> tuple[Any, dict[str, str]]:
    """Fixes the serialized executor input in args in place; returns it and the URI map."""
    from google.protobuf import json_format

    executor_input, inputs_spec = tfx_patches.parsed_invocation(args)
    changed = restore_input_types(executor_input, inputs_spec)
    if changed:
        _log.info("restored the TFX types of inputs %s", sorted(set(changed)))
    remote_of = localize_uris(executor_input, mode)
    args.json_serialized_invocation_args = json_format.MessageToJson(executor_input)
    return executor_input, remote_of


def load_executor(executor_class_path: str) -> type:
    """Everything a step loads before its executor's first line of work: TFX's patched
    entrypoint helpers and the executor's modules (with them its custom artifact
    classes). benchmarks/step_startup.py times this in the image."""
    from tfx.utils import import_utils

    tfx_patches.defer_heavy_packages()
    executor_class = import_utils.import_class_by_path(executor_class_path)
    tfx_patches.patch_tfx_entrypoint()
    tfx_patches.import_run_executor_modules()
    return executor_class


def run(parsed: tuple[Any, list[str]]) -> None:
    """Runs one TFX executor the way kubeflow_v2_run_executor does, with the fixes."""
    args, beam_args = parsed
    mode = os.environ.get(ARTIFACT_IO_ENV, MODE_AUTO)
    load_executor(args.executor_class_path)
    executor_input, remote_of = prepare(args, mode)
    retention = retention_step.settings(os.environ)
    folder = retention_step.run_folder(executor_input, remote_of) if retention else ""
    if retention:
        retention_step.record(retention, folder)
    tfx_patches.run_executor(args, beam_args)
    restore_output_uris(executor_input.outputs.output_file, remote_of)
    outputs = [a.uri for al in executor_input.outputs.artifacts.values() for a in al.artifacts]
    delete_gcs_directory_markers([u for u in outputs if u.startswith("gs://")])
    if retention:
        retention_step.collect(retention, folder)


def _exit_now(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    logging.shutdown()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> None:
    """Parses TFX's arguments, runs the executor, and ends the process at once (5)."""
    termination.install()  # first: a stop during the imports ends the step too
    from absl import app

    def guarded(parsed: tuple[Any, list[str]]) -> None:
        try:
            with termination.stop_on_signals():
                run(parsed)
        except termination.Terminated as e:  # eviction or preemption: cleaned up on the way
            _log.error("stopped by %s before finishing; KFP may retry the step", e.signal_name)
            _exit_now(e.exit_code)
        except BaseException:  # noqa: B036 - reported here, then the process ends
            traceback.print_exc()
            _exit_now(1)
        _exit_now(0)

    try:
        tfx_patches.defer_heavy_packages()  # before anything imports TFX
        app.run(
            guarded,
            argv=list(argv) if argv is not None else None,
            flags_parser=tfx_patches.parse_flags,
        )
    except termination.Terminated as e:  # before guarded began
        _log.error("stopped by %s before the step began; KFP may retry the step", e.signal_name)
        _exit_now(e.exit_code)


if __name__ == "__main__":
    main()
