"""The one pipeline definition every runner uses.

ImageExampleGen -> StatisticsGen -> SchemaGen -> ExampleValidator -> ChampionResolver ->
ImageStatistics -> Trainer -> Evaluator -> Pusher. The ChampionResolver reads the serving
directory once, before the first step that needs it, and takes the run's serving lease
until the push: drift, the label audit, the warm start and the evaluation all see that
one champion (open-source KFP v2 cannot run TFX resolver nodes, so it is a small
component). The CLI checks the serving directory can be written before any step runs.
ImageStatistics reads ExampleValidator's anomalies, so a bad data set stops the run
before any GPU time is spent, and ImagePusher publishes each push whole.

Compiled for Kubeflow (parameterized=True), the data root, the epochs, the window of
spans, the blessing margin and the one span whose drift (and the one whose label audit)
is accepted are the pipeline's root parameters (RUNTIME_PARAMETERS), each with the
config's value as its default, so one compiled package serves every run. Its output
`pushed_model` (the Pusher's) says whether the run pushed (docs/retraining.md).
"""

from __future__ import annotations

from typing import Any

from tfx import types
from tfx.dsl.components.base import base_node
from tfx.orchestration import pipeline as tfx_pipeline
from tfx.types import standard_component_specs as keys

from imgpipe.components.common.images.model_input import DEFAULT_CROP_FRACTION
from imgpipe.pipelines import component_ids as ids
from imgpipe.pipelines.config import PipelineConfig

# The ChampionResolver's output channel.
CHAMPION_KEY = "champion"
# Steps that read state outside the pipeline, so never served from a cache: the image
# folder (a new span, new files) and the serving folder (a newer champion, the lease).
NEVER_CACHED = (ids.CHAMPION, ids.EXAMPLE_GEN)

# The root parameters of a compiled pipeline: name -> (type, where its default is in
# the config).
DATA_ROOT_PARAMETER = "data_root"
EPOCHS_PARAMETER = "epochs"
SPANS_PARAMETER = "spans"
TOLERANCE_PARAMETER = "tolerance"
ACCEPT_DRIFT_SPAN_PARAMETER = "accept_drift_span"  # -1 (NO_SPAN): none
ACCEPT_LABEL_ISSUES_SPAN_PARAMETER = "accept_label_issues_span"  # -1 (NO_SPAN): none
LAUNCHER_PARAMETER = "launcher"  # trainer.launcher: tfjob or jobset
RUNTIME_PARAMETERS: dict[str, tuple[type, str]] = {
    DATA_ROOT_PARAMETER: (str, "data_root"),
    EPOCHS_PARAMETER: (int, "trainer.epochs"),
    SPANS_PARAMETER: (int, "trainer.spans"),
    TOLERANCE_PARAMETER: (float, "evaluator.tolerance"),
    ACCEPT_DRIFT_SPAN_PARAMETER: (int, "statistics.accept_drift_span"),
    ACCEPT_LABEL_ISSUES_SPAN_PARAMETER: (int, "statistics.accept_label_issues_span"),
    LAUNCHER_PARAMETER: (str, "trainer.launcher"),
}
# A root parameter's value for a setting that is None (a parameter cannot be None).
NONE_VALUES: dict[str, Any] = {
    ACCEPT_DRIFT_SPAN_PARAMETER: -1,
    ACCEPT_LABEL_ISSUES_SPAN_PARAMETER: -1,
}


def _config_value(config: PipelineConfig, dotted: str) -> Any:
    value: Any = config
    for name in dotted.split("."):
        value = getattr(value, name)
    return value


def runtime_parameters(config: PipelineConfig) -> dict[str, Any]:
    """RUNTIME_PARAMETERS as TFX RuntimeParameters, the config's values as defaults."""
    from tfx.orchestration import data_types

    def default(name: str, ptype: type, dotted: str) -> Any:
        value = _config_value(config, dotted)
        return ptype(NONE_VALUES[name] if value is None else value)

    return {
        name: data_types.RuntimeParameter(
            name=name, ptype=ptype, default=default(name, ptype, dotted)
        )
        for name, (ptype, dotted) in RUNTIME_PARAMETERS.items()
    }


def create_components(
    config: PipelineConfig, parameterized: bool = False
) -> list[base_node.BaseNode]:
    """The pipeline's components in topological order, each named by its component id.

    Args:
      config: the validated configuration.
      parameterized: make RUNTIME_PARAMETERS settable per run (Kubeflow).
    """
    from imgpipe.components.champion import ChampionResolver
    from imgpipe.components.image_statistics import ImageStatistics

    parameters = runtime_parameters(config) if parameterized else {}
    resolver = ChampionResolver(serving_dir=config.serving_dir).with_id(ids.CHAMPION)
    champion = resolver.outputs[CHAMPION_KEY]
    data_steps = _data_steps(config, parameters)
    example_gen, _, _, example_validator = data_steps
    examples = example_gen.outputs[keys.EXAMPLES_KEY]
    # The run's serving lease is held from here to the push: after the data steps that
    # are not ours (a failure there leaves no lease behind), before every step that needs
    # the champion.
    resolver.add_upstream_node(example_validator)
    image_statistics = ImageStatistics(
        examples=examples,
        anomalies=example_validator.outputs[keys.ANOMALIES_KEY],
        image_size=config.trainer.input_size,
        crop_fraction=config.trainer.crop_fraction or DEFAULT_CROP_FRACTION,
        config=config.statistics,
        champion=champion,
        accept_drift_span=parameters.get(ACCEPT_DRIFT_SPAN_PARAMETER),
        accept_label_issues_span=parameters.get(ACCEPT_LABEL_ISSUES_SPAN_PARAMETER),
    ).with_id(ids.IMAGE_STATISTICS)
    model_steps = _model_steps(
        config, parameters, examples, image_statistics.outputs[keys.STATISTICS_KEY], champion
    )
    return [*data_steps, resolver, image_statistics, *model_steps]


def _data_steps(config: PipelineConfig, parameters: dict[str, Any]) -> list[base_node.BaseNode]:
    """ImageExampleGen, StatisticsGen, SchemaGen and ExampleValidator, in that order."""
    from tfx import v1 as tfx

    from imgpipe.components.image_example_gen import ImageExampleGen
    from imgpipe.components.image_statistics import image_stats_options

    example_gen = ImageExampleGen(
        input_base=parameters.get(DATA_ROOT_PARAMETER, config.data_root),
        image_options=config.example_gen.image,
        output_options=config.example_gen.output,
        range_config=None if config.span is None else static_span(config.span),
    ).with_id(ids.EXAMPLE_GEN)
    statistics_gen = tfx.components.StatisticsGen(
        examples=example_gen.outputs[keys.EXAMPLES_KEY],
        stats_options=image_stats_options(),
    ).with_id(ids.STATISTICS_GEN)
    schema_gen = tfx.components.SchemaGen(
        statistics=statistics_gen.outputs[keys.STATISTICS_KEY],
        infer_feature_shape=True,
    ).with_id(ids.SCHEMA_GEN)
    example_validator = tfx.components.ExampleValidator(
        statistics=statistics_gen.outputs[keys.STATISTICS_KEY],
        schema=schema_gen.outputs[keys.SCHEMA_KEY],
    ).with_id(ids.EXAMPLE_VALIDATOR)
    return [example_gen, statistics_gen, schema_gen, example_validator]


def _model_steps(
    config: PipelineConfig,
    parameters: dict[str, Any],
    examples: types.BaseChannel,
    image_statistics: types.BaseChannel,
    champion: types.BaseChannel,
) -> list[base_node.BaseNode]:
    """The Trainer, the Evaluator and the Pusher, in that order, on the channels of the
    examples, their image statistics and the champion."""
    from tfx.proto import pusher_pb2

    from imgpipe.components.common.runtime import config_loader
    from imgpipe.components.evaluator import ImageEvaluator
    from imgpipe.components.pusher import SERVING_CONFIG_KEY, ImagePusher
    from imgpipe.components.trainer import ImageTrainer

    output = config.example_gen.output
    trainer = ImageTrainer(
        examples=examples,
        image_statistics=image_statistics,
        config=config.trainer,
        champion=champion,
        epochs=parameters.get(EPOCHS_PARAMETER),
        spans=parameters.get(SPANS_PARAMETER),
        launcher=parameters.get(LAUNCHER_PARAMETER),
        train_split=output.train_split,
        eval_split=output.eval_split,
    ).with_id(ids.TRAINER)
    evaluator = ImageEvaluator(
        examples=examples,
        model=trainer.outputs[keys.MODEL_KEY],
        config=config.evaluator,
        champion=champion,
        eval_split=output.eval_split,
        tolerance=parameters.get(TOLERANCE_PARAMETER),
    ).with_id(ids.EVALUATOR)
    pusher = ImagePusher(
        model=trainer.outputs[keys.MODEL_KEY],
        model_blessing=evaluator.outputs[keys.BLESSING_KEY],
        push_destination=pusher_pb2.PushDestination(
            filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=config.serving_dir)
        ),
        custom_config={SERVING_CONFIG_KEY: config_loader.to_dict(config.serving)},
    ).with_id(ids.PUSHER)
    return [trainer, evaluator, pusher]


def static_span(span: int) -> Any:
    """TFX's RangeConfig that reads `span` alone."""
    from tfx.proto import range_config_pb2

    return range_config_pb2.RangeConfig(
        static_range=range_config_pb2.StaticRange(start_span_number=span, end_span_number=span)
    )


def create_pipeline(
    config: PipelineConfig,
    *,
    metadata_connection_config: Any = None,
    beam_pipeline_args: list[str] | None = None,
    components: list[base_node.BaseNode] | None = None,
) -> tfx_pipeline.Pipeline:
    """Builds the TFX pipeline from a config.

    Args:
      config: the validated configuration.
      metadata_connection_config: the MLMD connection (local runs); None on Kubeflow,
        where the cluster's MLMD is used.
      beam_pipeline_args: Beam args for every Beam component; default config.beam_args.
      components: create_components(config), already configured by a runner.

    Raises:
      ValueError: data_root is not set.

    Example:
      pipeline = create_pipeline(config.load("pipeline.yaml"))
      tfx.orchestration.LocalDagRunner().run(pipeline)
    """
    config.validate()
    if not config.data_root:
        raise ValueError("data_root must be set: the image folder to train on")
    return tfx_pipeline.Pipeline(
        pipeline_name=config.pipeline_name,
        pipeline_root=config.pipeline_root,
        components=components if components is not None else create_components(config),
        enable_cache=config.enable_cache,
        metadata_connection_config=metadata_connection_config,
        beam_pipeline_args=(
            list(config.beam_args) if beam_pipeline_args is None else beam_pipeline_args
        ),
    )
