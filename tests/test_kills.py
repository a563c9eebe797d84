"""Hard stops and retries, on real processes.

A conversion killed in any phase leaves an output that every reader refuses, saying
why, and a rerun into the same folder gives byte-identical output. SIGTERM and SIGINT
clean up and exit non-zero. The executor, retried into a dirty URI as KFP retries,
gives the clean result.

Each stop is a real process, `imgpipe convert` or the Kubeflow entrypoint running the
executor, that signals itself at a named phase (IMGPIPE_STOP_AT,
components/common/runtime/phases.py): one process per case, as each one imports TensorFlow.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from tfx.components.trainer.fn_args_utils import FnArgs
from tfx.types import artifact_utils, standard_artifacts

from imgpipe.components.common.formats import layout, manifest
from imgpipe.components.common.formats.artifact_types import ImageStatisticsArtifact
from imgpipe.components.common.runtime import phases
from imgpipe.components.evaluator import spec as evaluator_spec
from imgpipe.components.evaluator.executor import Executor as EvaluatorExecutor
from imgpipe.components.image_example_gen import spec as example_gen_spec
from imgpipe.components.image_example_gen.component import ImageExampleGen
from imgpipe.components.image_example_gen.executor import Executor as ExampleGenExecutor
from imgpipe.components.image_example_gen.options import OutputOptions
from imgpipe.components.image_statistics import spec as statistics_spec
from imgpipe.components.image_statistics.executor import Executor as StatisticsExecutor
from imgpipe.components.trainer import task
from imgpipe.pipelines import cli
from tests import imagegen, waiting
from tests.outputs import tree

pytestmark = pytest.mark.component

IN_PROCESS = ["--runner=DirectRunner", "--direct_num_workers=1"]
SHARDS = 2
CONVERT_FLAGS = ["--shards", str(SHARDS), *IN_PROCESS]
NO_MANIFEST = "is incomplete: it has no manifest.json"


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> str:
    """Enough images for several task batches, one to skip and one to ignore."""
    root = str(tmp_path_factory.mktemp("images"))
    imagegen.make_image_folder(root, {"cat": 40, "dog": 40}, size=(24, 32))
    imagegen.write(os.path.join(root, "dog", "empty.jpg"), b"")
    imagegen.write(os.path.join(root, "notes.txt"), b"not an image")
    return root


@pytest.fixture(scope="module")
def reference(images, tmp_path_factory) -> dict[str, bytes]:
    """What an undisturbed run writes."""
    out = str(tmp_path_factory.mktemp("reference") / "out")
    assert cli.main(["convert", images, out, "--no-progress", *CONVERT_FLAGS]) == 0
    return tree(out)


def convert_in_a_process(
    images: str, out: str, stop_at: str, *flags: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "imgpipe.pipelines.cli", "convert", images, out, *flags],
        env={**os.environ, phases.STOP_AT_ENV: stop_at, **(env or {})},
        capture_output=True,
        text=True,
        timeout=waiting.JOB_S,
    )


def assert_every_reader_refuses(examples_uri: str, work: str, why: str) -> None:
    """`imgpipe stats`, ImageStatistics, the Trainer and the Evaluator refuse the folder
    before reading it, saying `why`."""
    stats_json = os.path.join(work, "stats.json")
    assert cli.main(["stats", examples_uri, "--json", stats_json, *IN_PROCESS]) == 1
    assert not os.path.exists(stats_json)

    examples = standard_artifacts.Examples()
    examples.uri = examples_uri
    examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
    statistics = ImageStatisticsArtifact()
    statistics.uri = os.path.join(work, "statistics")
    with pytest.raises(manifest.IncompleteOutputError, match=why):
        StatisticsExecutor().Do(
            {statistics_spec.EXAMPLES_KEY: [examples]},
            {statistics_spec.STATISTICS_KEY: [statistics]},
            {
                statistics_spec.IMAGE_SIZE_KEY: 32,
                statistics_spec.CROP_FRACTION_KEY: 0.875,
                statistics_spec.STATISTICS_CONFIG_KEY: "{}",
            },
        )

    with pytest.raises(manifest.IncompleteOutputError, match=why):
        task.run_fn(
            FnArgs(
                train_files=[os.path.join(examples_uri, "Split-train", "*")],
                eval_files=[os.path.join(examples_uri, "Split-eval", "*")],
                serving_model_dir=os.path.join(work, "model", "Format-Serving"),
                model_run_dir=os.path.join(work, "model_run"),
                custom_config={"backbone": "tiny_cnn", "mean": [0.0] * 3, "std": [1.0] * 3},
            )
        )
    assert not os.path.exists(os.path.join(work, "model"))

    model = standard_artifacts.Model()
    model.uri = os.path.join(work, "model")
    evaluator_properties = {
        evaluator_spec.EVALUATOR_CONFIG_KEY: "{}",
        evaluator_spec.EVAL_SPLIT_KEY: "eval",
    }
    with pytest.raises(manifest.IncompleteOutputError, match=why):
        EvaluatorExecutor().Do({"examples": [examples], "model": [model]}, {}, evaluator_properties)


@pytest.mark.parametrize("phase", phases.PHASES)
def test_a_conversion_killed_in_any_phase_is_refused_then_rerun_byte_identical(
    images, reference, tmp_path, capsys, phase
):
    out = str(tmp_path / "out")

    killed = convert_in_a_process(images, out, phase, "--no-progress", *CONVERT_FLAGS)

    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert_every_reader_refuses(out, str(tmp_path), f"{out} {NO_MANIFEST}")
    assert f"{out} {NO_MANIFEST}" in capsys.readouterr().err  # imgpipe stats' one line
    # Rerun as the user would: the unfinished output is replaced.
    assert cli.main(["convert", images, out, "--no-progress", *CONVERT_FLAGS]) == 0
    assert tree(out) == reference


@pytest.mark.parametrize(
    "phase, signal_name", [(phases.WRITING, "TERM"), (phases.PUBLISHED, "INT")]
)
def test_sigterm_and_sigint_clean_up_and_exit_non_zero(images, tmp_path, phase, signal_name):
    out, temp = str(tmp_path / "out"), tmp_path / "temp"
    temp.mkdir()

    # With the progress bar, which keeps its files in the temporary folder.
    stopped = convert_in_a_process(
        images, out, f"{phase}:{signal_name}", *CONVERT_FLAGS, env={"TMPDIR": str(temp)}
    )

    signum = signal.Signals[f"SIG{signal_name}"]
    assert stopped.returncode == 128 + signum, stopped.stderr[-3000:]
    assert stopped.stderr.strip().endswith(
        f"imgpipe: error: stopped by SIG{signal_name} before finishing; run the command "
        "again to finish"
    )
    assert "Traceback" not in stopped.stderr
    assert os.listdir(out) == []  # no work folder, spill file or staged shard is left
    assert [name for name in os.listdir(temp) if name.startswith("imgpipe")] == []


def test_sigterm_in_a_kubeflow_step_cleans_up_and_exits_non_zero(images, tmp_path):
    """The pod's entrypoint runs the executor as a KFP step does, and is stopped."""
    uri = str(tmp_path / "examples")
    component = ImageExampleGen(input_base=images, output_options=OutputOptions(num_shards=SHARDS))
    parameters = {k: v for k, v in component.exec_properties.items() if v is not None}
    executor_input = {
        "inputs": {"parameterValues": parameters},
        "outputs": {
            "artifacts": {
                example_gen_spec.EXAMPLES_KEY: {
                    "artifacts": [{"type": {"schemaTitle": "tfx.Examples"}, "uri": uri}]
                }
            },
            "outputFile": str(tmp_path / "executor_output.json"),
        },
    }

    stopped = subprocess.run(
        [
            sys.executable,
            "-m",
            "imgpipe.pipelines.container.entrypoint",
            "--executor_class_path",
            f"{ExampleGenExecutor.__module__}.{ExampleGenExecutor.__name__}",
            "--json_serialized_invocation_args",
            json.dumps(executor_input),
            "--json_serialized_inputs_spec_args",
            json.dumps({"parameters": {key: {"parameterType": "STRING"} for key in parameters}}),
            *IN_PROCESS,
        ],
        env={**os.environ, phases.STOP_AT_ENV: f"{phases.WRITING}:TERM"},
        capture_output=True,
        text=True,
        timeout=waiting.JOB_S,
    )

    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
    assert "stopped by SIGTERM before finishing; KFP may retry the step" in stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert os.listdir(uri) == []
    assert not os.path.exists(tmp_path / "executor_output.json")


def test_the_executor_retried_into_a_dirty_uri_gives_the_clean_result(images, reference, tmp_path):
    uri = str(tmp_path / "examples")
    # A killed earlier attempt, with another shard count, stopped while publishing: no
    # manifest, a shard missing, its work folder still there.
    assert cli.main(["convert", images, uri, "--no-progress", "--shards", "3", *IN_PROCESS]) == 0
    os.remove(os.path.join(uri, layout.MANIFEST_FILE))
    os.remove(os.path.join(uri, "Split-eval", "data_tfrecord-00002-of-00003"))
    imagegen.write(os.path.join(uri, layout.WORK_DIR_PREFIX + "0", "spill", "a.spill"), b"x")
    component = ImageExampleGen(input_base=images, output_options=OutputOptions(num_shards=SHARDS))
    examples = standard_artifacts.Examples()
    examples.uri = uri

    executor = ExampleGenExecutor(ExampleGenExecutor.Context(beam_pipeline_args=IN_PROCESS))
    executor.Do({}, {example_gen_spec.EXAMPLES_KEY: [examples]}, component.exec_properties)

    assert tree(uri) == reference
    manifest.verify(uri, checksums=True)


def test_a_run_that_hangs_is_stopped_at_its_deadline_and_publishes_nothing(tmp_path):
    """A step that never returns (a read from a store that does not answer) would hold
    the serving folder, and every later run of the schedule, for good: the run's deadline
    stops it as SIGTERM does, with one line, and the serving folder is free and empty."""
    from imgpipe.components.common.formats import served_models, serving_history
    from imgpipe.components.common.storage import serving_lock
    from imgpipe.pipelines import component_ids as ids

    data, serving = str(tmp_path / "images"), str(tmp_path / "serving")
    imagegen.make_image_folder(data, {"cat": 12, "dog": 12}, size=(24, 32))
    hours = 0.002  # 7.2 s
    flags = ["--data", data, "--serving-dir", serving, "--no-progress"]
    flags += ["--pipeline-root", str(tmp_path / "root"), "--set", f"run_deadline_hours={hours}"]
    result = subprocess.run(
        [sys.executable, "-m", "imgpipe.pipelines.cli", "run", "local", *flags],
        env={**os.environ, phases.STOP_AT_ENV: f"{phases.PUBLISHING}:{phases.HANG}"},
        capture_output=True,
        text=True,
        timeout=waiting.JOB_S,
    )
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    # "before finishing; ...", or, when the clean-up outlasts its bound (a loaded
    # machine), "; the clean-up took over 8 s and was cut short: ...".
    last = result.stderr.splitlines()[-1]
    assert last.startswith(
        f"imgpipe: error: the run passed its deadline of {hours:g} h (run_deadline_hours: a "
        "run that long is taken for hung; 0 sets none)"
    ), result.stderr
    assert last.endswith("run the command again to finish"), result.stderr
    assert served_models.complete_versions(serving) == []
    assert serving_lock.current(serving) is None
    # The history says so, unless the clean-up was cut short before it could be written.
    decisions, _ = serving_history.read(serving)
    if "before finishing" in last:
        (failed,) = decisions
        assert failed.kind == serving_history.FAILED and failed.span is None
        assert failed.reason.startswith(
            f"{ids.EXAMPLE_GEN} failed: the run passed its deadline of {hours:g} h"
        ), failed.reason
