"""ChampionResolver: reads the serving directory once, at the head of a run.

Open-source KFP v2 cannot run TFX resolver nodes, and a champion read by each step on
its own can change between reads (another run pushes), so this small component reads it
once, takes the serving lease for the run, and hands the result on as a typed artifact
to ImageStatistics, the Trainer and the Evaluator (components/common/formats/champion.py).
"""

from __future__ import annotations

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec

from imgpipe.components.champion import spec
from imgpipe.components.champion.executor import Executor
from imgpipe.components.common.formats.artifact_types import ChampionArtifact


class ChampionResolver(base_component.BaseComponent):
    """The served champion, resolved once.

    Example:
      champion = ChampionResolver(serving_dir="/srv/models/flowers")
      ImageEvaluator(examples, model, champion=champion.outputs["champion"])
    """

    SPEC_CLASS = spec.ChampionResolverSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, serving_dir: str = ""):
        """Args:
        serving_dir: where the Pusher pushes; "" for none (every run is a first run).
        """
        super().__init__(
            spec=spec.ChampionResolverSpec(
                **{
                    spec.SERVING_DIR_KEY: serving_dir,
                    spec.CHAMPION_KEY: types.Channel(type=ChampionArtifact),
                }
            )
        )
