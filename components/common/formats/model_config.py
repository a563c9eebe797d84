"""The model-server pointers of a serving directory: which version is served.

Beside the version folders, two TF Serving model config files (ModelServerConfig, text
format) name the one version a model server loads:
  models.config         base path: the serving directory itself, for a TF Serving
                        reading it directly (`--model_config_file=`)
  kserve-models.config  base path: KSERVE_MODEL_DIR, where KServe's storage initializer
                        copies the serving directory when a predictor starts

The Pusher writes them after a push is whole (PUSH_COMPLETE), `imgpipe rollback` when it
names an older version, both through `write`: kserve-models.config first and
models.config last, each atomically (fileio.write_atomic: a local rename, a single
object write), so a process killed at any moment leaves models.config naming either the
version before or the version after, whole. models.config is the one record of what is
served: the champion a retrain is judged against is read from it (served_models.find).

The file seam (fileio) loads TensorFlow, so `write` and `served_version` import it when
called: the names and the text alone load nothing (the Pusher's serving files and the
component's front door use them).
"""

from __future__ import annotations

import posixpath

from imgpipe.components.common.runtime import phases

MODEL_CONFIG_FILE = "models.config"
KSERVE_CONFIG_FILE = "kserve-models.config"
# KServe's storage initializer copies storageUri here when a predictor pod starts.
KSERVE_MODEL_DIR = "/mnt/models"
# The field of the config that names the version (model_version_policy.specific).
VERSIONS_FIELD = "versions:"


def model_config(serving_dir: str, base_path: str, version: int) -> str:
    """A TF Serving model config file serving `version` alone, named after the folder.

    Args:
      serving_dir: the serving directory; its last path segment names the model.
      base_path: where the server finds the version folders.
      version: the one version to serve.
    """
    name = posixpath.basename(serving_dir.rstrip("/")) or "model"
    return (
        "model_config_list {\n"
        "  config {\n"
        f'    name: "{name}"\n'
        f'    base_path: "{base_path}"\n'
        '    model_platform: "tensorflow"\n'
        f"    model_version_policy {{ specific {{ versions: {version} }} }}\n"
        "  }\n"
        "}\n"
    )


def config_version(text: str) -> int | None:
    """The version a model config file written by `model_config` names; None when it
    names none.

    Raises:
      ValueError: the version field holds no integer.
    """
    if VERSIONS_FIELD not in text:
        return None
    return int(text.split(VERSIONS_FIELD, 1)[1].split("}", 1)[0].strip())


def write(serving_dir: str, version: int) -> None:
    """Points both model config files of serving_dir at `version`, models.config last.

    Raises:
      OSError: a file could not be written (kserve-models.config may have been).
    """
    from imgpipe.components.common.storage import fileio

    pointers = (
        (KSERVE_CONFIG_FILE, KSERVE_MODEL_DIR),
        (MODEL_CONFIG_FILE, serving_dir.rstrip("/")),
    )
    for name, base_path in pointers:
        if name == MODEL_CONFIG_FILE:
            phases.reached(phases.POINTING)  # the kill tests stop here
        fileio.write_atomic(
            posixpath.join(serving_dir, name),
            model_config(serving_dir, base_path, version).encode(),
        )


def served_version(serving_dir: str) -> int | None:
    """The version models.config names: the one served; None when there is no such file.

    Raises:
      OSError: the file exists but cannot be read.
      ValueError: it names no version, or not as an integer.
    """
    from imgpipe.components.common.storage import fileio

    path = posixpath.join(serving_dir, MODEL_CONFIG_FILE)
    if not fileio.exists(path):
        return None
    text = fileio.read_bytes(path).decode("utf-8", errors="replace")
    try:
        version = config_version(text)
    except ValueError as e:
        raise ValueError(f"{path}: the version is not an integer ({e})") from None
    if version is None:
        raise ValueError(f"{path} names no version ({VERSIONS_FIELD} is missing)")
    return version
