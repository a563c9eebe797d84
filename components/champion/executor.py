"""ChampionResolver's executor: checks the serving directory can be used, takes the
run's serving lease, reads the champion once, and hands the lease on to the next step.

The lease (components/common/storage/serving_lock.py) is what makes two retrains on one
serving directory take turns: the second waits here, before it reads anything, until the
first has pushed or stopped, so every step of it sees the first one's push. The checks
come first, in seconds, so that a serving directory that cannot be written is found
before any training, not at the push.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from absl import logging
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils

from imgpipe.components.champion import spec
from imgpipe.components.common.formats import champion
from imgpipe.components.common.storage import serving_lock


class Executor(base_executor.BaseExecutor):
    """Keys: parameter `serving_dir`; output `champion` (ServedChampion)."""

    def Do(  # noqa: N802 - TFX's executor interface
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        del input_dict
        serving_dir = str(exec_properties.get(spec.SERVING_DIR_KEY) or "")
        output = artifact_utils.get_single_instance(output_dict[spec.CHAMPION_KEY])
        token = ""
        taken_over: list[str] = []
        if serving_dir:
            serving_lock.check_writable(serving_dir)
            # A retried resolver of this run has the same output: it takes its lease back.
            token = serving_lock.acquire(serving_dir, output.uri, notes=taken_over).token
        try:
            resolved = champion.resolve(serving_dir, lease_token=token)
            if taken_over:  # a dead run's lease, named in the run's summary
                resolved = dataclasses.replace(
                    resolved, records_note=(*taken_over, *resolved.records_note)
                )
            champion.write(output.uri, resolved)
        except BaseException:
            if token:
                serving_lock.release(serving_dir, token)
            raise
        output.set_string_custom_property(spec.STATUS_PROPERTY, resolved.status)
        output.set_int_custom_property(
            spec.VERSION_PROPERTY,
            spec.NO_VERSION if resolved.champion_version is None else resolved.champion_version,
        )
        output.set_int_custom_property(
            spec.HEAD_PROPERTY, serving_lock.NO_HEAD if resolved.head is None else resolved.head
        )
        logging.info("ChampionResolver: champion %s", resolved.describe())
        if token:
            serving_lock.hand_on(serving_dir, token)
