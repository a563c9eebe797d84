"""ImageEvaluator: TFX's stock Evaluator with the classifier's EvalConfig, whose executor
first verifies that the Examples and the model are complete (executor.py).

TFMA 0.52 evaluates the Keras 3 SavedModel through its `serving_examples` signature
(serialized tf.Examples in, probabilities out): accuracy overall and per true class (a
slice on the label feature), plus a blessing when overall accuracy reaches the threshold.
Its `blessing` output is the standard ModelBlessing TFX's Pusher checks.
"""

from __future__ import annotations

from tensorflow_model_analysis.proto import config_pb2
from tfx import types
from tfx.components import Evaluator
from tfx.dsl.components.base import executor_spec

from imgpipe.components.common.features import LABEL_KEY
from imgpipe.components.common.layout import EVAL_SPLIT
from imgpipe.components.common.serving import PROBABILITIES, SERVING_EXAMPLES
from imgpipe.components.evaluator.config import EvaluatorConfig
from imgpipe.components.evaluator.executor import Executor

ACCURACY_METRIC = "SparseCategoricalAccuracy"
ACCURACY_NAME = "sparse_categorical_accuracy"
EXAMPLE_COUNT_METRIC = "ExampleCount"


def eval_config(
    config: EvaluatorConfig | None = None, label_key: str = LABEL_KEY
) -> config_pb2.EvalConfig:
    """Accuracy overall and per class; blessed when overall accuracy >= the threshold.

    Args:
      config: the blessing rules.
      label_key: the label feature, also the per-class slicing key.
    """
    config = config or EvaluatorConfig()
    config.validate()
    accuracy_threshold = config.accuracy_threshold
    overall = config_pb2.SlicingSpec()
    per_class = config_pb2.SlicingSpec(feature_keys=[label_key])
    accuracy = config_pb2.MetricConfig(
        class_name=ACCURACY_METRIC,
        per_slice_thresholds=[
            config_pb2.PerSliceMetricThreshold(
                slicing_specs=[overall],
                threshold=config_pb2.MetricThreshold(
                    value_threshold=config_pb2.GenericValueThreshold(
                        lower_bound={"value": accuracy_threshold}
                    )
                ),
            )
        ],
    )
    return config_pb2.EvalConfig(
        model_specs=[
            config_pb2.ModelSpec(
                signature_name=SERVING_EXAMPLES, label_key=label_key, prediction_key=PROBABILITIES
            )
        ],
        slicing_specs=[overall, per_class],
        metrics_specs=[
            config_pb2.MetricsSpec(
                metrics=[accuracy, config_pb2.MetricConfig(class_name=EXAMPLE_COUNT_METRIC)]
            )
        ],
    )


def ImageEvaluator(  # noqa: N802 - reads as the component it builds
    examples: types.BaseChannel,
    model: types.BaseChannel,
    config: EvaluatorConfig | None = None,
    example_splits: list[str] | None = None,
) -> Evaluator:
    """TFX's Evaluator over the eval split; outputs `evaluation` and `blessing`.

    Example:
      evaluator = ImageEvaluator(gen.outputs["examples"], trainer.outputs["model"],
                                 EvaluatorConfig(accuracy_threshold=0.8))
      Pusher(model=trainer.outputs["model"], model_blessing=evaluator.outputs["blessing"],
             push_destination=...)
    """
    evaluator = Evaluator(
        examples=examples,
        model=model,
        example_splits=example_splits or [EVAL_SPLIT],
        eval_config=eval_config(config),
    )
    # Evaluator takes no executor argument; this one verifies the inputs' manifests first.
    evaluator.executor_spec = executor_spec.BeamExecutorSpec(Executor)
    return evaluator
