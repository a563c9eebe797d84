"""Writing an output folder so that no reader ever accepts a mix of two runs.

An output is complete when its manifest exists (manifest.py). A run into a folder that
already holds something (a retried step: KFP retries into the same URI; or a rerun)
first removes the old manifest, so that readers refuse the folder from then on, then
removes the rest. It writes its own files, and its manifest last.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Collection

from imgpipe.components.common.formats import manifest
from imgpipe.components.common.formats.layout import MANIFEST_FILE, WORK_DIR_PREFIX
from imgpipe.components.common.storage import fileio


def clear(folder: str, keep: Collection[str] = ()) -> None:
    """Empties `folder`, its manifest first, and makes it if needed; names in `keep` stay."""
    fileio.remove(os.path.join(folder, MANIFEST_FILE))
    for name in fileio.list_dir(folder):
        if name not in keep:
            fileio.remove(os.path.join(folder, name))
    fileio.makedirs(folder)


def publish_folder(artifact_dir: str, relpath: str, write: Callable[[str], object]) -> None:
    """Makes artifact_dir/relpath the artifact's one content, whole or not at all.

    `write(folder)` fills a hidden work folder inside `artifact_dir`. Only when it has
    returned is what an earlier run left in `artifact_dir` removed, the work folder
    moved to `relpath`, and the manifest written. If `write` fails, the work folder is
    removed and the artifact is left as it was.
    """
    staging = os.path.join(artifact_dir, WORK_DIR_PREFIX + uuid.uuid4().hex)
    target = os.path.join(artifact_dir, relpath)
    try:
        write(staging)
        clear(artifact_dir, keep={os.path.basename(staging)})
        fileio.rename(staging, target)
    finally:
        fileio.remove(staging)
    files = manifest.describe(target, fileio.list_files(target))
    manifest.write(artifact_dir, {f"{relpath}/{name}": entry for name, entry in files.items()})
