"""ImageExampleGen -> ImageTrainer -> ImageEvaluator (TFX Evaluator, TFMA) -> Pusher on
LocalDagRunner, plus the EvalConfig on its own."""

from __future__ import annotations

import glob
import os

import pytest
import tensorflow as tf
from tensorflow_model_analysis.proto import config_pb2
from tfx import types
from tfx import v1 as tfx
from tfx.orchestration import metadata
from tfx.proto import pusher_pb2

from imgpipe.components.common.artifact_types import ImageStatisticsArtifact
from imgpipe.components.evaluator.component import ACCURACY_NAME, ImageEvaluator, eval_config
from imgpipe.components.evaluator.config import EvaluatorConfig
from imgpipe.components.image_example_gen.component import ImageExampleGen
from imgpipe.components.image_example_gen.options import OutputOptions
from imgpipe.components.trainer.component import ImageTrainer
from imgpipe.components.trainer.config import TrainerConfig
from tests import trainer_helpers as th

SIZE = 32


@pytest.mark.unit
def test_eval_config_blesses_on_overall_accuracy_and_slices_per_class():
    config = eval_config(EvaluatorConfig(accuracy_threshold=0.8))
    assert config.model_specs[0].signature_name == "serving_examples"
    assert [list(s.feature_keys) for s in config.slicing_specs] == [[], ["image/class/label"]]
    threshold = config.metrics_specs[0].metrics[0].per_slice_thresholds[0]
    assert threshold.slicing_specs == [config_pb2.SlicingSpec()]
    assert threshold.threshold.value_threshold.lower_bound.value == 0.8
    with pytest.raises(ValueError, match="accuracy_threshold"):
        eval_config(EvaluatorConfig(accuracy_threshold=1.5))


@pytest.mark.unit
def test_image_trainer_rejects_a_bad_config_and_a_wrong_wiring():
    examples = types.Channel(type=tfx.types.standard_artifacts.Examples)
    with pytest.raises(ValueError, match="batch_size"):
        ImageTrainer(examples=examples, config=TrainerConfig(batch_size=0))
    # StatisticsGen's ExampleStatistics where ImageStatistics belongs fails at build time.
    tfdv_statistics = types.Channel(type=tfx.types.standard_artifacts.ExampleStatistics)
    with pytest.raises(TypeError, match="ImageStatistics"):
        ImageTrainer(examples=examples, image_statistics=tfdv_statistics)


def _artifacts(store: metadata.Metadata, type_name: str) -> list:
    return list(store.store.get_artifacts_by_type(type_name))


@pytest.mark.pipeline
def test_pipeline_trains_evaluates_and_pushes(tmp_path):
    images = th.make_class_folder(str(tmp_path / "images"), per_class=24)
    stats_dir = th.write_stats(str(tmp_path / "stats"), SIZE)
    serving_dir = str(tmp_path / "serving")
    gen = ImageExampleGen(
        input_base=images,
        output_options=OutputOptions(
            splits=(("train", 0.75), ("eval", 0.25)), stratify=True, num_shards=2
        ),
    )
    stats = tfx.dsl.Importer(source_uri=stats_dir, artifact_type=ImageStatisticsArtifact).with_id(
        "stats_importer"
    )
    trainer = ImageTrainer(
        examples=gen.outputs["examples"],
        image_statistics=stats.outputs["result"],
        config=TrainerConfig(
            backbone="tiny_cnn",
            epochs=2,
            batch_size=16,
            image_size=SIZE,
            train_steps=30,
            learning_rate=0.01,
            tensorboard_images=0,
        ),
    )
    evaluator = ImageEvaluator(
        examples=gen.outputs["examples"],
        model=trainer.outputs["model"],
        config=EvaluatorConfig(accuracy_threshold=0.8),
    )
    pusher = tfx.components.Pusher(
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        push_destination=pusher_pb2.PushDestination(
            filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=serving_dir)
        ),
    )
    db = str(tmp_path / "mlmd.sqlite")
    pipeline = tfx.dsl.Pipeline(
        pipeline_name="trainer-evaluator",
        pipeline_root=str(tmp_path / "root"),
        components=[gen, stats, trainer, evaluator, pusher],
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(db),
        beam_pipeline_args=["--direct_num_workers=1"],
    )
    tfx.orchestration.LocalDagRunner().run(pipeline)

    with metadata.Metadata(
        tfx.orchestration.metadata.sqlite_metadata_connection_config(db)
    ) as store:
        blessing = _artifacts(store, "ModelBlessing")[0]
        evaluation = _artifacts(store, "ModelEvaluation")[0]
        model = _artifacts(store, "Model")[0]
    assert blessing.custom_properties["blessed"].int_value == 1

    # run_fn fails without normalization constants, and the config sets none: the
    # executor handed it the ImageStatistics URI.
    assert glob.glob(os.path.join(model.uri, "Format-Serving", "saved_model.pb"))

    import tensorflow_model_analysis as tfma

    result = tfma.load_eval_result(evaluation.uri)
    by_slice = {tuple(key): metrics[""][""] for key, metrics in result.slicing_metrics}
    overall = by_slice[()][ACCURACY_NAME]["doubleValue"]
    assert overall >= 0.8
    per_class = {key[0][1]: m[ACCURACY_NAME]["doubleValue"] for key, m in by_slice.items() if key}
    assert sorted(per_class) == [0, 1, 2]
    assert all(0.0 <= v <= 1.0 for v in per_class.values())
    pushed = glob.glob(os.path.join(serving_dir, "*", "saved_model.pb"))
    assert len(pushed) == 1
    loaded = tf.saved_model.load(os.path.dirname(pushed[0]))
    assert set(loaded.signatures) == {"serving_default", "serving_examples"}


@pytest.mark.component
def test_evaluator_withholds_the_blessing_below_the_threshold(tmp_path):
    """TFX's Evaluator executor on an untrained model: accuracy far below 0.99."""
    from tfx.components.evaluator.executor import Executor
    from tfx.components.util import examples_utils
    from tfx.proto import example_gen_pb2
    from tfx.types import artifact_utils, standard_artifacts

    from imgpipe.components.trainer import export
    from imgpipe.components.trainer import model as model_lib
    from imgpipe.components.trainer.config import TrainerConfig

    images = th.make_class_folder(str(tmp_path / "images"), per_class=12)
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / "examples")
    th.convert(images, examples.uri)
    examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
    examples_utils.set_payload_format(examples, example_gen_pb2.FORMAT_TF_EXAMPLE)
    examples_utils.set_file_format(examples, "tfrecords_gzip")
    model = standard_artifacts.Model()
    model.uri = str(tmp_path / "model")
    untrained = model_lib.build_model(
        TrainerConfig(backbone="tiny_cnn", image_size=SIZE),
        3,
        ((110.0, 80.0, 110.0), (70.0, 60.0, 70.0)),
    )
    export.export_serving_model(
        untrained, os.path.join(model.uri, "Format-Serving"), th.CLASSES, SIZE, 0.875
    )
    evaluation, blessing = standard_artifacts.ModelEvaluation(), standard_artifacts.ModelBlessing()
    evaluation.uri, blessing.uri = str(tmp_path / "evaluation"), str(tmp_path / "blessing")
    component = ImageEvaluator(
        types.Channel(type=standard_artifacts.Examples),
        types.Channel(type=standard_artifacts.Model),
        EvaluatorConfig(accuracy_threshold=0.99),
    )
    Executor().Do(
        {"examples": [examples], "model": [model]},
        {"evaluation": [evaluation], "blessing": [blessing]},
        component.exec_properties,
    )
    assert blessing.get_int_custom_property("blessed") == 0
    assert os.path.exists(os.path.join(blessing.uri, "NOT_BLESSED"))
