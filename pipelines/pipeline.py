"""The one pipeline definition every runner uses.

ImageExampleGen -> StatisticsGen -> SchemaGen -> ExampleValidator -> ImageStatistics
-> Trainer -> Evaluator -> Pusher. ImageStatistics reads ExampleValidator's anomalies,
so a bad data set stops the run before any GPU time is spent. There is no resolver
node: open-source KFP v2 cannot run TFX resolvers, and the Evaluator blesses by an
absolute accuracy threshold instead of against a baseline model.
"""

from __future__ import annotations

from tfx import v1 as tfx
from tfx.dsl.components.base import base_node
from tfx.orchestration import pipeline as tfx_pipeline

from pipelines import config as cfg

# Output channel keys of the components wired here, spelled once.
EXAMPLES = "examples"
STATISTICS = "statistics"
SCHEMA = "schema"
ANOMALIES = "anomalies"
MODEL = "model"
MODEL_RUN = "model_run"
EVALUATION = "evaluation"
BLESSING = "blessing"
PUSHED_MODEL = "pushed_model"


def create_components(config: cfg.PipelineConfig) -> list[base_node.BaseNode]:
    """The pipeline's components in topological order, each named by its config id."""
    from tfx.proto import pusher_pb2, trainer_pb2

    from components.evaluator.component import ImageEvaluator
    from components.image_example_gen.component import ImageExampleGen
    from components.image_example_gen.options import ImageOptions, OutputOptions
    from components.image_statistics.component import ImageStatistics
    from components.image_statistics.tfdv_options import image_stats_options
    from components.trainer.component import ImageTrainer

    data, model = config.data, config.model
    example_gen = ImageExampleGen(
        input_base=config.data_root,
        image_options=ImageOptions(resize=data.resize, center_crop=data.center_crop),
        output_options=OutputOptions(
            splits=(("train", 1 - data.eval_fraction), ("eval", data.eval_fraction)),
            stratify=data.stratify, num_shards=data.num_shards, on_error=data.on_error),
    ).with_id(cfg.EXAMPLE_GEN)
    examples = example_gen.outputs[EXAMPLES]
    statistics_gen = tfx.components.StatisticsGen(
        examples=examples, stats_options=image_stats_options(),
    ).with_id(cfg.STATISTICS_GEN)
    schema_gen = tfx.components.SchemaGen(
        statistics=statistics_gen.outputs[STATISTICS], infer_feature_shape=True,
    ).with_id(cfg.SCHEMA_GEN)
    example_validator = tfx.components.ExampleValidator(
        statistics=statistics_gen.outputs[STATISTICS], schema=schema_gen.outputs[SCHEMA],
    ).with_id(cfg.EXAMPLE_VALIDATOR)
    image_statistics = ImageStatistics(
        examples=examples, image_size=model.image_size,
        anomalies=example_validator.outputs[ANOMALIES], fail_on_anomalies=True,
    ).with_id(cfg.IMAGE_STATISTICS)
    trainer = ImageTrainer(
        examples=examples,
        image_statistics=image_statistics.outputs[STATISTICS],
        train_args=trainer_pb2.TrainArgs(num_steps=model.train_steps),
        eval_args=trainer_pb2.EvalArgs(num_steps=model.eval_steps),
        custom_config={
            "backbone": model.backbone, "epochs": model.epochs,
            "batch_size": model.batch_size, "image_size": model.image_size,
            "num_gpus": config.num_gpus, "mixed_precision": model.mixed_precision,
        },
    ).with_id(cfg.TRAINER)
    evaluator = ImageEvaluator(
        examples=examples, model=trainer.outputs[MODEL],
        accuracy_threshold=model.accuracy_threshold,
    ).with_id(cfg.EVALUATOR)
    pusher = tfx.components.Pusher(
        model=trainer.outputs[MODEL], model_blessing=evaluator.outputs[BLESSING],
        push_destination=pusher_pb2.PushDestination(
            filesystem=pusher_pb2.PushDestination.Filesystem(
                base_directory=config.serving_dir)),
    ).with_id(cfg.PUSHER)
    return [example_gen, statistics_gen, schema_gen, example_validator, image_statistics,
            trainer, evaluator, pusher]


def create_pipeline(config: cfg.PipelineConfig, *,
                    metadata_connection_config=None,
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
        beam_pipeline_args=(list(config.beam_args) if beam_pipeline_args is None
                            else beam_pipeline_args),
    )
