"""The pipeline's component ids, spelled once.

pipeline.py names the components with these; the Kubeflow settings key images and
resources by them, and the local runner finds each component's results by them.
"""

from __future__ import annotations

CHAMPION = "ChampionResolver"
EXAMPLE_GEN = "ImageExampleGen"
STATISTICS_GEN = "StatisticsGen"
SCHEMA_GEN = "SchemaGen"
EXAMPLE_VALIDATOR = "ExampleValidator"
IMAGE_STATISTICS = "ImageStatistics"
TRAINER = "Trainer"
EVALUATOR = "Evaluator"
PUSHER = "Pusher"
COMPONENT_IDS = (
    CHAMPION,
    EXAMPLE_GEN,
    STATISTICS_GEN,
    SCHEMA_GEN,
    EXAMPLE_VALIDATOR,
    IMAGE_STATISTICS,
    TRAINER,
    EVALUATOR,
    PUSHER,
)
