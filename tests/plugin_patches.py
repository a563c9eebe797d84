"""Every private name of a pytest plugin the tests use, with its reason: the tests'
sibling of pipelines/tfx_patches.py (test_architecture holds that no other module of the
package or the tests names a private name of TFX, KFP, Beam or a pytest plugin).

  one_at_a_time_scheduler  xdist.scheduler.LoadScopeScheduling._split_scope (checked
                           against pytest-xdist 3.8.0): the scope a test id belongs to,
                           overridden so that some modules are one unit of work. xdist's
                           public --dist loadgroup marks are lost on pytest 9, which no
                           longer reads the node id xdist rewrites.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def one_at_a_time_scheduler(config: Any, log: Any, together: Callable[[str], str | None]) -> Any:
    """xdist's load-scope scheduler where each test is its own unit of work, except the
    tests `together(nodeid)` names a group for: each group is one unit, so one worker
    runs its tests in turn."""
    from xdist.scheduler import LoadScopeScheduling

    class OneAtATimeScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return together(nodeid) or nodeid

    return OneAtATimeScheduling(config, log)


def cache_hit(metadata_path: str, execution_id: int) -> Any:
    """What TFX's cache lookup returns for a cache key whose one execution is
    `execution_id` (None: the step runs again)."""
    from ml_metadata.proto import metadata_store_pb2
    from tfx.orchestration import metadata
    from tfx.orchestration.portable import cache_utils
    from tfx.orchestration.portable.mlmd import context_lib

    with metadata.Metadata(metadata.sqlite_metadata_connection_config(metadata_path)) as handle:
        key = context_lib.register_context_if_not_exists(
            handle, context_lib.CONTEXT_TYPE_EXECUTION_CACHE, f"execution {execution_id}"
        )
        association = metadata_store_pb2.Association(context_id=key.id, execution_id=execution_id)
        handle.store.put_attributions_and_associations([], [association])
        return cache_utils.get_cached_outputs(handle, key)
