"""TFX's TFDV-based executors for local runs whose pipeline root is on an object store.

StatisticsGen, SchemaGen and ExampleValidator write through TensorFlow's filesystems,
which cannot open s3:// (nor gs:// on an emulator): these subclasses run them on local
copies (staging.ThroughLocalCopies). On Kubeflow the launcher's local copies do the same
(see pipelines/container/entrypoint.py).
"""

from __future__ import annotations

from tfx.components.example_validator import executor as example_validator
from tfx.components.schema_gen import executor as schema_gen
from tfx.components.statistics_gen import executor as statistics_gen

from imgpipe.components.common.storage.staging import ThroughLocalCopies
from imgpipe.pipelines import component_ids as ids


class StatisticsGenExecutor(ThroughLocalCopies, statistics_gen.Executor):
    pass


class SchemaGenExecutor(ThroughLocalCopies, schema_gen.Executor):
    pass


class ExampleValidatorExecutor(ThroughLocalCopies, example_validator.Executor):
    pass


EXECUTORS = {
    ids.STATISTICS_GEN: StatisticsGenExecutor,
    ids.SCHEMA_GEN: SchemaGenExecutor,
    ids.EXAMPLE_VALIDATOR: ExampleValidatorExecutor,
}
