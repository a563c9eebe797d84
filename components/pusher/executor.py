"""ImagePusher's executor: TFX's Pusher, but a push is never seen half-written.

TFX's Pusher copies the model straight into <serving_dir>/<seconds>/; a killed copy
leaves a version folder that a model server or the next run's Evaluator would load.
Here a local push is copied to a hidden staging folder and renamed into place, and on
every filesystem PUSH_COMPLETE (served_models.py) is written last: readers take only
versions that have it. Versions always increase, even two pushes in one second, and a
retried push of the same model reuses the version it already published.
"""

from __future__ import annotations

import os
import time
from typing import Any

from absl import logging
from tfx import types
from tfx.components.pusher import executor as tfx_pusher
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils, proto_utils

from imgpipe.components.common import fileio, reference_sets, served_models

STAGING_PREFIX = ".push-"


def _complete_versions(serving_dir: str) -> list[int]:
    names = fileio.list_dir(serving_dir)
    return sorted(int(n) for n in names if n.isdigit())


def _pushed_from(version_dir: str) -> str | None:
    marker = os.path.join(version_dir, served_models.PUSH_COMPLETE_FILE)
    return fileio.read_bytes(marker).decode() if fileio.exists(marker) else None


def publish(
    model_dir: str, serving_dir: str, now: float | None = None, blessing_uri: str | None = None
) -> str:
    """Copies model_dir to a new version folder of serving_dir, completely or not at
    all; returns the version folder.

    With blessing_uri, the reference evaluation set the Evaluator left in the blessing
    goes into the push too (reference_sets.copy_into_push), before it is complete.

    A version folder whose PUSH_COMPLETE names model_dir is this model's earlier push
    (a retry): it is returned as it is.
    """
    fileio.makedirs(serving_dir)
    versions = _complete_versions(serving_dir)
    for version in reversed(versions):
        path = os.path.join(serving_dir, str(version))
        if _pushed_from(path) == model_dir:
            logging.info("%s was already pushed to %s", model_dir, path)
            return path
    for name in fileio.list_dir(serving_dir):
        if name.startswith(STAGING_PREFIX):  # left by a killed push
            fileio.remove(os.path.join(serving_dir, name))
    version = max(int(time.time() if now is None else now), (versions[-1] + 1) if versions else 0)
    final = os.path.join(serving_dir, str(version))
    if fileio.exists(final):  # an incomplete version folder: a killed remote push
        fileio.remove(final)
    local = fileio.is_local(serving_dir)
    target = os.path.join(serving_dir, f"{STAGING_PREFIX}{version}") if local else final
    # saved_model.pb last: a model server takes it as the sign that a version is whole.
    io_utils.copy_dir(model_dir, target, deny_regex_patterns=[r"saved_model\.pb"])
    # --- reference evaluation set (docs/retraining.md): the only reference-set step.
    if blessing_uri:
        reference_sets.copy_into_push(blessing_uri, target)
    # ---
    io_utils.copy_file(
        os.path.join(model_dir, "saved_model.pb"), os.path.join(target, "saved_model.pb")
    )
    fileio.write_text(os.path.join(target, served_models.PUSH_COMPLETE_FILE), model_dir)
    if local:
        os.rename(target, final)
    return final


class Executor(tfx_pusher.Executor):
    """TFX Pusher's keys and filesystem destination; see the module docstring."""

    def Do(  # noqa: N802 - TFX's executor interface
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        model_push = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.PUSHED_MODEL_KEY]
        )
        if not self.CheckBlessing(input_dict):
            self._MarkNotPushed(model_push)
            return
        destination = pusher_pb2.PushDestination()
        proto_utils.json_to_proto(
            exec_properties[standard_component_specs.PUSH_DESTINATION_KEY], destination
        )
        if destination.WhichOneof("destination") != "filesystem":
            raise ValueError("ImagePusher pushes to a filesystem destination only")
        model_dir = self.GetModelPath(input_dict)
        blessing = artifact_utils.get_single_instance(
            input_dict[standard_component_specs.MODEL_BLESSING_KEY]
        )
        pushed = publish(
            model_dir, destination.filesystem.base_directory, blessing_uri=blessing.uri
        )
        io_utils.copy_dir(model_dir, model_push.uri)
        self._MarkPushed(
            model_push, pushed_destination=pushed, pushed_version=os.path.basename(pushed)
        )
        logging.info("Model pushed to %s", pushed)
