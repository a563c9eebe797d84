"""ImagePusher's executor: TFX's Pusher, but a push is never seen half-written, carries
the proof that it is whole, and never overtakes a push it was not judged against.

TFX's Pusher copies the model straight into <serving_dir>/<seconds>/; a killed copy
leaves a version folder that a model server or the next run's Evaluator would load.
Here (served_models.py has the contract):
- A local push is copied to a hidden staging folder and renamed into place; on object
  stores, which cannot rename, the version folder is written in place.
- Every push ends with manifest.json (each file's size and CRC-32C), then PUSH_COMPLETE,
  then the model-server pointers (model_config.py: TF Serving model config files naming
  this version alone). A server pointed at a pointer loads only whole versions, on every
  filesystem; docs/serving-folder.md says how to point TF Serving and KServe.
- The push happens only if the newest complete push is still the one the Evaluator saw
  (the blessing's `serving_head`) and models.config still names the version it named
  then (`served_version`: no rollback since); otherwise it is refused in one line and
  nothing is served. The run's serving lease (serving_lock.py) is held while it copies
  and given back either way.
- Versions always increase, even two pushes in one second, and a retried push of the
  same model reuses the version it already published (and points the servers at it,
  unless the serving history records a rollback since).
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

import yaml
from absl import logging
from tfx import types
from tfx.components.pusher import executor as tfx_pusher
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils, proto_utils

from imgpipe.components.common.formats import (
    layout,
    manifest,
    model_config,
    record_holder,
    reference_sets,
    served_models,
    serving_history,
)
from imgpipe.components.common.runtime import config_loader, phases
from imgpipe.components.common.storage import disk_full, fileio, serving_lock
from imgpipe.components.pusher import decision_record, serving_files

STAGING_PREFIX = served_models.STAGING_PREFIX
# The SavedModel's graph, copied last: a model server takes it as a version's sign.
_GRAPH_FILE = "saved_model.pb"


class ServingHeadMovedError(RuntimeError):
    """Another push became the newest, or models.config was pointed at another version
    (a rollback), after the Evaluator judged; nothing was served."""


def _pushed_from(version_dir: str) -> str | None:
    marker = posixpath.join(version_dir, served_models.PUSH_COMPLETE_FILE)
    return fileio.read_bytes(marker).decode() if fileio.exists(marker) else None


def _copy_files(files: Mapping[str, str], target: str) -> None:
    """Copies {relpath: source}, the graph last."""
    order = sorted(files, key=lambda relpath: (relpath == _GRAPH_FILE, relpath))
    for count, relpath in enumerate(order):
        destination = posixpath.join(target, relpath)
        if fileio.is_local(destination):
            os.makedirs(os.path.dirname(fileio.local_path(destination)), exist_ok=True)
        fileio.copy(files[relpath], destination, overwrite=True)
        if count == 0:
            phases.reached(phases.PUBLISHING)  # the kill tests stop a push mid-copy here


def publish(
    model_dir: str,
    serving_dir: str,
    now: float | None = None,
    expected_head: int | None = None,
    expected_served: int | None = None,
    extras: Mapping[str, str] | None = None,
    generated: Callable[[int, str], Mapping[str, bytes]] | None = None,
    notes: list[str] | None = None,
) -> str:
    """Copies model_dir to a new version folder of serving_dir, completely or not at
    all; returns the version folder.

    A version folder whose PUSH_COMPLETE names model_dir is this model's earlier push
    (a retry): it is returned as it is.

    Args:
      model_dir: the serving model (a SavedModel folder).
      serving_dir: the serving directory.
      now: the version to use if it is newer than every push (tests); default the time.
      expected_head: the newest complete version the Evaluator saw (serving_lock.NO_HEAD: none);
        None pushes whatever the head.
      expected_served: the version models.config named when the Evaluator judged
        (serving_lock.NO_HEAD: none); None: the version it names when the push begins.
        It must still name it before the push starts and before the push is pointed at.
      extras: more files to publish with the push, {relpath in the version: source}.
      generated: fn(version, version folder) -> {relpath in the version: bytes}, files
        that say which version they belong to (serving_files.py), published the same way.
      notes: where what a killed push left, and this push removed, is named, one line
        each, for the run's summary (a warning in the log too).

    Raises:
      ServingHeadMovedError: the newest complete push is not `expected_head`, or
        models.config names another version than `expected_served`; a push found so
        after its copy stays complete but not served (served_models.NOT_SERVED).
    """
    fileio.makedirs(serving_dir)
    versions = served_models.complete_versions(serving_dir)
    earlier = _earlier_push(model_dir, serving_dir, versions)
    if earlier is not None:
        return earlier
    _check_head(serving_dir, versions, expected_head)
    if expected_served is None:
        expected_served = _served_or_none(serving_dir)
    _check_served(serving_dir, expected_served)
    numbered = _clear_killed_pushes(serving_dir, versions, notes if notes is not None else [])
    # Above every version folder there was: an interrupted one's number is never reused.
    version = max(int(time.time() if now is None else now), max(numbered, default=-1) + 1)
    final = posixpath.join(serving_dir, str(version))
    local = fileio.is_local(serving_dir)
    target = posixpath.join(serving_dir, f"{STAGING_PREFIX}{version}") if local else final
    files = {
        relpath: posixpath.join(model_dir, relpath) for relpath in fileio.list_files(model_dir)
    }
    files.update(extras or {})
    with tempfile.TemporaryDirectory(prefix="imgpipe-push-") as written:
        for relpath, data in (generated(version, final) if generated else {}).items():
            files[relpath] = os.path.join(written, relpath.replace("/", "_"))
            with open(files[relpath], "wb") as f:
                f.write(data)
        _write_version(files, target, model_dir)
    if local:
        fileio.rename(target, final)
    # A rollback while it copied: the operator's choice stands.
    _check_served(serving_dir, expected_served)
    model_config.write(serving_dir, version)
    return final


def _earlier_push(model_dir: str, serving_dir: str, versions: list[int]) -> str | None:
    """The version folder of an earlier push of model_dir (a retry), its pointers
    written if it was killed before them; None if it was not pushed.

    Raises:
      ServingHeadMovedError: it was pushed, then rolled back from: the rollback stands.
    """
    for version in versions:
        path = posixpath.join(serving_dir, str(version))
        if _pushed_from(path) == model_dir:
            logging.info("%s was already pushed to %s", model_dir, path)
            served = _served_or_none(serving_dir)
            if version == versions[0] and served != version:
                # Killed before the pointers were written, or rolled back from since.
                if _rolled_back_since(serving_dir, version):
                    raise ServingHeadMovedError(
                        f"not pushed: {serving_dir} was rolled back to {served} after {path} "
                        "was pushed; the next retrain will be judged against it"
                    )
                model_config.write(serving_dir, version)
            return path
    return None


def _rolled_back_since(serving_dir: str, version: int) -> bool:
    """Whether the serving history records a rollback made after `version` was pushed
    (a version is the time its push began, or later); False when it cannot be read."""
    try:
        decisions, _ = serving_history.read(serving_dir)
    except OSError:
        return False
    return any(d.kind == serving_history.ROLLBACK and d.time >= version for d in decisions)


def _check_head(serving_dir: str, versions: list[int], expected_head: int | None) -> None:
    """Raises ServingHeadMovedError if the newest complete push is not `expected_head`
    (None: any head)."""
    head = versions[0] if versions else serving_lock.NO_HEAD
    if expected_head is not None and head != expected_head:
        seen = (
            "nothing pushed"
            if expected_head == serving_lock.NO_HEAD
            else f"version {expected_head}"
        )
        raise ServingHeadMovedError(
            f"not pushed: {serving_dir}/{head} was pushed after this model was judged against "
            f"{seen}; the next retrain will be judged against it"
        )


def _served_or_none(serving_dir: str) -> int:
    """The version models.config names; serving_lock.NO_HEAD when none, or unreadable."""
    try:
        served = model_config.served_version(serving_dir)
    except (OSError, ValueError):
        return serving_lock.NO_HEAD
    return serving_lock.NO_HEAD if served is None else served


def _check_served(serving_dir: str, expected_served: int) -> None:
    """Raises ServingHeadMovedError if models.config no longer names `expected_served`
    (serving_lock.NO_HEAD: none): it was rolled back since."""
    served = _served_or_none(serving_dir)
    if served == expected_served:
        return
    seen = (
        f"the newest push (no {model_config.MODEL_CONFIG_FILE})"
        if expected_served == serving_lock.NO_HEAD
        else f"{expected_served}"
    )
    now = (
        f"{serving_dir}/{model_config.MODEL_CONFIG_FILE} was removed"
        if served == serving_lock.NO_HEAD
        else f"{serving_dir} was rolled back to {served}"
    )
    raise ServingHeadMovedError(
        f"not pushed: {now} after this model was judged against {seen}; the next retrain "
        "will be judged against it"
    )


def _clear_killed_pushes(serving_dir: str, versions: list[int], notes: list[str]) -> list[int]:
    """Removes what killed pushes left: a staging folder, or a version folder without
    PUSH_COMPLETE (on object stores), each named in `notes`. Pushes take turns
    (serving_lock), so none is being written. Returns the numbers of every version folder
    there was."""
    numbered = []
    for name in fileio.list_dir(serving_dir):
        if name.isdigit():
            numbered.append(int(name))
        if name.startswith(STAGING_PREFIX) or name.isdigit() and int(name) not in versions:
            fileio.remove(posixpath.join(serving_dir, name))
            note = f"removed {name}, left by a push that was killed or failed mid-copy"
            logging.warning("ImagePusher: %s/%s", serving_dir, note)
            notes.append(note)
    return numbered


def _write_version(files: Mapping[str, str], target: str, model_dir: str) -> None:
    """Copies `files` ({relpath: source}) into `target`, with their manifest, checks the
    copy and marks it complete; a failed copy is removed."""
    # The checksums of what is pushed, from the sources: a copy that differs is damage.
    entries = {
        relpath: manifest.describe("", [source])[source] for relpath, source in files.items()
    }
    try:
        _copy_files(files, target)
        phases.reached(phases.PUBLISHED)
        manifest.write(target, entries)
        problem = served_models.damage(target)
        if problem is not None:
            raise OSError(f"{target}: the copy differs from its source ({problem}); push again")
        fileio.write_text(posixpath.join(target, served_models.PUSH_COMPLETE_FILE), model_dir)
    except Exception:
        # A failed push (a full disk, a damaged copy) takes no room and shows nothing; a
        # killed one is cleared by the next push.
        with contextlib.suppress(OSError):
            fileio.remove(target)
        raise


def record_if_best(serving_dir: str, pushed: str, blessing: types.Artifact) -> None:
    """Records the push as the record holder when the Evaluator said it is the best
    served so far (record_holder.py); a record that cannot be written is one line, and
    the next push is held to the older record."""
    if not blessing.has_custom_property(record_holder.BLESSING_PROPERTY):
        return
    if not blessing.get_int_custom_property(record_holder.BLESSING_PROPERTY):
        return
    reason = blessing.get_string_custom_property(record_holder.BLESSING_REASON_PROPERTY)
    try:
        holder = record_holder.RecordHolder(
            int(posixpath.basename(pushed)), served_models.read_labels(pushed), time.time(), reason
        )
        record_holder.write(serving_dir, holder)
    except (OSError, ValueError) as e:
        logging.warning("ImagePusher: the record holder was not recorded: %s", e)


def extra_files(input_dict: dict[str, list[types.Artifact]]) -> dict[str, str]:
    """Files published with each push beside the model, {relpath in the version: source}:
    covered by its manifest like the model's own files. The blessing's reference
    evaluation set (docs/retraining.md) goes under assets.extra/reference/, where the
    next Evaluator judges its candidate on it too."""
    blessing = artifact_utils.get_single_instance(
        input_dict[standard_component_specs.MODEL_BLESSING_KEY]
    )
    return reference_files(blessing.uri)


def reference_files(blessing_uri: str) -> dict[str, str]:
    """The reference evaluation set the Evaluator left in a blessing, as extra files of a
    push ({relpath in the version: source}); none from an Evaluator before them."""
    source = posixpath.join(blessing_uri, reference_sets.REFERENCE_DIR)
    if not fileio.isdir(source):
        return {}
    return {
        posixpath.join(served_models.REFERENCE_ASSET, relpath): posixpath.join(source, relpath)
        for relpath in fileio.list_files(source)
    }


def serving_files_for(
    model_dir: str, blessing: types.Artifact, serving_dir: str, exec_properties: dict[str, Any]
) -> Callable[[int, str], dict[str, bytes]]:
    """fn(version, version folder) -> the files that make a push ready for serving on its own
    (serving_files.py): a KServe InferenceService, the model card, a REST request."""
    config = serving_config(exec_properties)
    name = posixpath.basename(serving_dir.rstrip("/")) or "model"
    labels = served_models.read_labels(model_dir)
    facts = _card_inputs(model_dir, blessing)

    def generate(version: int, path: str) -> dict[str, bytes]:
        card = serving_files.model_card(
            serving_files.ModelCardFacts(
                name=name, version=version, path=path, labels=labels, **facts
            )
        )
        service = serving_files.inference_service(config, name, serving_dir, version)
        extra = served_models.ASSETS_EXTRA_DIR
        return {
            f"{extra}/{serving_files.INFERENCE_SERVICE_FILE}": yaml.safe_dump(
                service, sort_keys=False
            ).encode(),
            f"{extra}/{serving_files.MODEL_CARD_JSON_FILE}": serving_files.to_json_text(
                card
            ).encode(),
            f"{extra}/{serving_files.MODEL_CARD_MARKDOWN_FILE}": serving_files.model_card_markdown(
                card
            ).encode(),
            f"{extra}/{serving_files.REST_REQUEST_FILE}": serving_files.to_json_text(
                serving_files.rest_request(_sample_jpeg())
            ).encode(),
        }

    return generate


def _sample_jpeg() -> bytes:
    """A small grey JPEG: the image of the REST request example."""
    import tensorflow as tf

    return tf.io.encode_jpeg(tf.fill([16, 16, 3], tf.constant(128, tf.uint8))).numpy()


def serving_config(exec_properties: dict[str, Any]) -> serving_files.ServingConfig:
    """The ServingConfig in the Pusher's custom_config ("serving"), or the defaults."""
    custom = exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY)
    # TFX stores an unset custom_config as the JSON text "null".
    values = (json.loads(custom) if isinstance(custom, str) else custom) or {}
    return config_loader.from_dict(
        serving_files.ServingConfig, values.get(serving_files.SERVING_CONFIG_KEY)
    )


def _card_inputs(model_dir: str, blessing: types.Artifact) -> dict[str, Any]:
    """What the model card says beyond the model's name and version: the blessing, the
    Evaluator's scores (evaluation.json beside the blessing) and the training data's
    statistics (the model's image_stats.json)."""

    def prop(name: str, default: Any) -> Any:
        return blessing.get_custom_property(name) if blessing.has_custom_property(name) else default

    evaluation_path = posixpath.join(blessing.uri, layout.EVALUATION_FILE)
    evaluation = (
        json.loads(fileio.read_bytes(evaluation_path)) if fileio.exists(evaluation_path) else {}
    )
    statistics: dict[str, Any] = {}
    stats_path = posixpath.join(model_dir, served_models.ASSETS_EXTRA_DIR, layout.IMAGE_STATS_FILE)
    spans: list[int] = []
    if fileio.exists(stats_path):
        stats = json.loads(fileio.read_bytes(stats_path))
        statistics["examples"] = stats.get("source", {}).get("examples_uri", "")
        for split, values in sorted(stats.get("splits", {}).items()):
            statistics[f"{split} images"] = values.get("count", values.get("images", ""))
            pixels = values.get("pixels") or {}
            if pixels:
                statistics[f"{split} mean"] = ", ".join(f"{v:.2f}" for v in pixels["mean"])
                statistics[f"{split} std"] = ", ".join(f"{v:.2f}" for v in pixels["std"])
        spans = [int(s) for s in stats.get("spans", [])]
    training = served_models.training_of(model_dir)
    spans = [int(s) for s in training.get("spans", [])] or spans
    return {
        "spans": spans,
        "blessed": bool(prop("blessed", 0)),
        "reason": str(prop("reason", "")),
        "champion": str(prop("champion", "")),
        "training": {k: v for k, v in sorted(training.items()) if k != "digest"},
        "statistics": statistics,
        "evaluation": evaluation,
    }


def serving_dir_of(exec_properties: dict[str, Any]) -> str:
    """The serving directory the push destination names.

    Raises:
      ValueError: a destination other than a filesystem.
    """
    destination = pusher_pb2.PushDestination()
    proto_utils.json_to_proto(
        exec_properties[standard_component_specs.PUSH_DESTINATION_KEY], destination
    )
    if destination.WhichOneof("destination") != "filesystem":
        raise ValueError("ImagePusher pushes to a filesystem destination only")
    return destination.filesystem.base_directory


class Executor(tfx_pusher.Executor):
    """TFX Pusher's keys and filesystem destination; see the module docstring."""

    @disk_full.explained(
        "Pusher",
        lambda inputs, outputs, properties: serving_dir_of(properties),
        "--serving-dir (serving_dir)",
    )
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
        serving_dir = serving_dir_of(exec_properties)
        blessing = artifact_utils.get_single_instance(
            input_dict[standard_component_specs.MODEL_BLESSING_KEY]
        )
        token = ""
        if blessing.has_custom_property(serving_lock.LEASE_PROPERTY):
            token = blessing.get_string_custom_property(serving_lock.LEASE_PROPERTY)
        try:
            # Heartbeats while it copies: a push killed here frees the lease at once.
            with serving_lock.hold(serving_dir, token):
                self._push(input_dict, model_push, blessing, serving_dir, exec_properties)
                # What this run decided, in the folder's history (serving_history.py).
                run_id = getattr(self._context, "pipeline_run_id", None) or ""
                decision_record.write(serving_dir, blessing, model_push, run_id)
        finally:
            if token:
                serving_lock.release(serving_dir, token)

    def _push(
        self,
        input_dict: dict[str, list[types.Artifact]],
        model_push: types.Artifact,
        blessing: types.Artifact,
        serving_dir: str,
        exec_properties: dict[str, Any],
    ) -> None:
        if not self.CheckBlessing(input_dict):
            self._MarkNotPushed(model_push)
            return
        expected_head = expected_served = None
        if blessing.has_custom_property(serving_lock.SERVING_HEAD_PROPERTY):
            expected_head = blessing.get_int_custom_property(serving_lock.SERVING_HEAD_PROPERTY)
        if blessing.has_custom_property(serving_lock.SERVED_PROPERTY):
            expected_served = blessing.get_int_custom_property(serving_lock.SERVED_PROPERTY)
        model_dir = self.GetModelPath(input_dict)
        cleared: list[str] = []
        try:
            pushed = publish(
                model_dir,
                serving_dir,
                expected_head=expected_head,
                expected_served=expected_served,
                extras=extra_files(input_dict),
                generated=serving_files_for(model_dir, blessing, serving_dir, exec_properties),
                notes=cleared,
            )
        except ServingHeadMovedError as e:
            logging.warning("ImagePusher: %s", e)
            self._MarkNotPushed(model_push)
            model_push.set_string_custom_property(serving_lock.REFUSED_PROPERTY, str(e))
            return
        if cleared:
            model_push.set_string_custom_property(serving_lock.CLEARED_PROPERTY, "; ".join(cleared))
        io_utils.copy_dir(model_dir, model_push.uri)
        self._MarkPushed(
            model_push, pushed_destination=pushed, pushed_version=os.path.basename(pushed)
        )
        logging.info("Model pushed to %s", pushed)
        record_if_best(serving_dir, pushed, blessing)
