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
