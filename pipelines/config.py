"""The one pipeline configuration, for every runner, loadable from YAML.

`PipelineConfig` composes the components' own option types, so each setting, and its
default, is defined once, by the component that reads it:

  example_gen   ImageExampleGen    components/image_example_gen/options.py
  statistics    ImageStatistics    components/image_statistics/config.py
  trainer       ImageTrainer       components/trainer/config.py
  evaluator     ImageEvaluator     components/evaluator/config.py
  serving       ImagePusher        components/pusher/serving_files.py (each push's
                                   KServe InferenceService)
  kubeflow      the KFP compiler   pipelines/kubeflow/config.py
  retention     what a run keeps   pipelines/retention.py (imgpipe gc, each local run's end)

Example YAML (every key optional; unknown keys are errors that list the allowed ones):

    pipeline_name: flowers
    data_root: gs://bucket/flowers/span-{SPAN}
    pipeline_root: gs://bucket/tfx-root
    serving_dir: gs://bucket/serving/flowers
    example_gen:
      image: {resize: 256, center_crop: true}
      output: {splits: [[train, 0.9], [eval, 0.1]], stratify: true}
    statistics: {leakage_threshold: 0.01, fail_on_anomalies: true}
    trainer: {weights: imagenet, epochs: 5, num_gpus: 1, warm_start: true}
    evaluator: {accuracy_threshold: 0.7, paired_significance: 0.05, tolerance: 0.05}
    retention: {keep_pushes: 5}
    kubeflow:
      resources: {ImageExampleGen: {cpu_request: "4", memory_request: 8Gi}}
      gpu: {node_selector: {cloud.google.com/gke-accelerator: nvidia-tesla-t4}}
      images: {default: registry/app:1.0, Trainer: registry/app-gpu:1.0}
    beam_args: [--runner=FlinkRunner, --flink_master=flink:8081]

Everything is validated when the config is loaded, before any step runs: every string
is bounded by its kind (config_loader.MAX_CHARS), and no setting may hold a credential
(pipelines/credentials.py).
"""

from __future__ import annotations

import copy
import dataclasses
import getpass
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.runtime.printable import shown
from imgpipe.components.evaluator import EvaluatorConfig
from imgpipe.components.image_example_gen import LAYOUT_SPLIT, ExampleGenConfig
from imgpipe.components.image_statistics import StatisticsConfig
from imgpipe.components.pusher import ServingConfig
from imgpipe.components.trainer import TrainerConfig
from imgpipe.pipelines import credentials
from imgpipe.pipelines.kubeflow.config import KubeflowConfig
from imgpipe.pipelines.retention import RetentionConfig

# Keys of the first release's config, and where each went.


def _user_work_dir() -> str:
    """A temporary folder of this user's own: on a shared machine, one user's runs never
    land in, or are refused by, another's folders."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # a container's uid with no passwd entry
        user = str(os.getuid())
    return os.path.join(tempfile.gettempdir(), "imgpipe-" + re.sub(r"[^\w.-]", "_", user))


# Where local runs and the demo work unless told otherwise.
DEFAULT_WORK_DIR = _user_work_dir()

MOVED_KEYS = {
    "model": "trainer (backbone, image_size, epochs, batch_size, train_steps, eval_steps, "
    "mixed_precision) and evaluator (accuracy_threshold)",
    "data": "example_gen.image (resize, center_crop) and example_gen.output (splits, "
    "stratify, num_shards, on_error)",
    "num_gpus": "trainer.num_gpus",
    "resources": "kubeflow.resources",
    "gpu": "kubeflow.gpu",
    "images": "kubeflow.images",
}


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """Everything `create_pipeline` and the runners need, for every runner.

    Attributes:
      pipeline_name: the TFX pipeline (and KFP pipeline) name.
      data_root: the image folder; may hold {SPAN}/{VERSION} patterns.
      pipeline_root: where TFX writes artifacts.
      serving_dir: where Pusher copies a blessed model.
      metadata_path: the local runner's SQLite MLMD file; default under pipeline_root.
      enable_cache: reuse results of unchanged inputs.
      span: the one span of a {SPAN} pattern this run reads (TFX's static range); None
        reads the newest (`imgpipe run local` runs each span landed since the last run
        it saw in turn, docs/retraining.md).
      beam_args: Beam pipeline args (e.g. Dataflow or Flink); empty runs Beam locally.
      example_gen: ImageExampleGen's image and output options.
      statistics: ImageStatistics' report settings, thresholds and gate.
      trainer: the Trainer's settings; its image_size and crop_fraction are also the
        geometry ImageStatistics computes the pixel statistics at.
      evaluator: the blessing rules.
      serving: how a pushed model is served: the InferenceService each push carries.
      kubeflow: images, resources, GPU scheduling and volumes on Kubeflow.
      retention: what the serving folder and the pipeline root keep.
      run_deadline_hours: `imgpipe run local` stops a span's run that takes longer, as
        SIGTERM does (it publishes nothing and gives back the serving folder): a run
        that long is taken for hung, and would hold every later run of the schedule.
        0 sets no deadline.
    """

    pipeline_name: str = dataclasses.field(
        default="image-classifier", metadata=config_loader.flag(kind=config_loader.NAME)
    )
    data_root: str = ""
    pipeline_root: str = os.path.join(DEFAULT_WORK_DIR, "pipeline-root")
    serving_dir: str = os.path.join(DEFAULT_WORK_DIR, "serving")
    metadata_path: str | None = None
    enable_cache: bool = True
    span: int | None = None
    beam_args: tuple[str, ...] = dataclasses.field(
        default=(), metadata=config_loader.flag(kind=config_loader.TEXT)
    )
    example_gen: ExampleGenConfig = dataclasses.field(default_factory=ExampleGenConfig)
    statistics: StatisticsConfig = dataclasses.field(default_factory=StatisticsConfig)
    trainer: TrainerConfig = dataclasses.field(default_factory=TrainerConfig)
    evaluator: EvaluatorConfig = dataclasses.field(default_factory=EvaluatorConfig)
    serving: ServingConfig = dataclasses.field(default_factory=ServingConfig)
    kubeflow: KubeflowConfig = dataclasses.field(default_factory=KubeflowConfig)
    retention: RetentionConfig = dataclasses.field(default_factory=RetentionConfig)
    run_deadline_hours: float = 24.0

    def validate(self) -> None:
        """Raises ValueError naming the first bad setting, in any section.

        The loader validates each section as it builds it; this also checks a config
        built in Python (ImageExampleGen's options validate themselves when built), and
        what the sections must agree on.
        """
        config_loader.check_lengths(self)
        credentials.refuse_in_settings(config_loader.to_dict(self))
        if not self.pipeline_name or not all(c.isalnum() or c in "-_" for c in self.pipeline_name):
            raise ValueError(
                "pipeline_name must be letters, digits, '-' or '_', got "
                + shown(self.pipeline_name)
            )
        for name in ("pipeline_root", "serving_dir"):
            if not getattr(self, name):
                raise ValueError(f"{name} must be set")
        if not self.run_deadline_hours >= 0:
            raise ValueError(
                f"run_deadline_hours must be 0 (no deadline) or more, got {self.run_deadline_hours}"
            )
        for name, section in (
            ("statistics", self.statistics),
            ("trainer", self.trainer),
            ("evaluator", self.evaluator),
            ("serving", self.serving),
            ("kubeflow", self.kubeflow),
            ("retention", self.retention),
        ):
            try:
                section.validate()
            except ValueError as e:
                raise ValueError(f"{name}: {e}") from None
        # The Trainer trains on train_split and the Evaluator evaluates eval_split. A
        # split layout's folders are checked when they are listed.
        output = self.example_gen.output
        names = [name for name, _ in output.splits]
        if output.layout != LAYOUT_SPLIT and not {output.train_split, output.eval_split} <= set(
            names
        ):
            raise ValueError(
                f"example_gen.output.splits must include {output.train_split!r} and "
                f"{output.eval_split!r}, which the Trainer and the Evaluator read "
                f"(example_gen.output.train_split and eval_split); got {names}"
            )

    @property
    def local_metadata_path(self) -> str:
        return self.metadata_path or os.path.join(self.pipeline_root, "metadata.sqlite")


def from_dict(values: Mapping[str, Any], source: str = "config") -> PipelineConfig:
    """Builds a validated PipelineConfig from plain data (e.g. parsed YAML).

    Raises:
      ValueError: an unknown key or a bad value, naming `source` and the key; a setting
        that holds a credential, naming the setting and not the value.
    """
    # Before anything is built, so that no message or log can echo the credential.
    credentials.refuse_in_settings(values)
    moved = sorted(set(values) & set(MOVED_KEYS))
    if moved:
        raise ValueError(
            f"{source}: key {moved[0]!r} has moved to {MOVED_KEYS[moved[0]]}; "
            "see the README's configuration section"
        )
    try:
        return config_loader.from_dict(PipelineConfig, values)
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None


def apply_settings(values: dict[str, Any], settings: Sequence[str]) -> dict[str, Any]:
    """Applies `section.key=value` settings (the CLI's --set) to a config's plain data.

    Values are YAML, so `trainer.epochs=3`, `statistics.accept_drift_span=6` and
    `example_gen.output.splits=[[train, 0.8], [eval, 0.2]]` have their types.

    Raises:
      ValueError: a setting that is not KEY=VALUE, or a value that is not YAML.
    """
    from imgpipe.pipelines import bounded_yaml

    merged = copy.deepcopy(values)
    for setting in settings:
        key, sep, text = setting.partition("=")
        if not sep or not key or any(not part for part in key.split(".")):
            raise ValueError(f"--set takes section.key=VALUE, got {shown(setting)}")
        config_loader.check_length(key, config_loader.PATH, "--set: the key")
        config_loader.check_length(text, config_loader.TEXT, f"--set {key}: the value")
        value = bounded_yaml.load(text, f"--set {key}")
        *parents, last = key.split(".")
        node = merged
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"--set {key}: {part} is a value, not a section")
            node = child
        node[last] = value
    return merged


def load(path: str | None, settings: Sequence[str] = (), **overrides: Any) -> PipelineConfig:
    """Loads a YAML file (None: the defaults), then applies `settings` (section.key=VALUE,
    see apply_settings) and top-level overrides.

    Raises:
      ValueError: the file is missing, is not YAML, or holds a bad setting.

    Example:
      load("pipeline.yaml", ["evaluator.tolerance=0.02"], data_root="/data/flowers")
    """
    from imgpipe.pipelines import bounded_yaml

    values: dict[str, Any] = {}
    if path:
        loaded = bounded_yaml.load(_read_text(path, bounded_yaml.MAX_CHARS + 1), path)
        if loaded is not None and not isinstance(loaded, dict):
            raise ValueError(
                f"{path}: the top level must be a mapping, got {type(loaded).__name__}"
            )
        values = loaded or {}
    values = apply_settings(values, settings)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return from_dict(values, source=path or "config")


def _read_text(path: str, limit: int) -> str:
    """At most `limit` characters of a config file. A local file is read without the file
    seam, which loads TensorFlow (seconds): a command checks its config first.

    Raises:
      ValueError: there is no such file.
    """
    if "://" not in path:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read(limit)
        except (FileNotFoundError, NotADirectoryError):
            raise ValueError(f"config file {path} does not exist") from None
        except IsADirectoryError:
            raise ValueError(f"config file {path} is a folder; give the YAML file") from None
    from imgpipe.components.common.storage import fileio

    if not fileio.exists(path):
        raise ValueError(f"config file {path} does not exist")
    with fileio.open_file(path, "r") as f:
        return f.read(limit)


def yaml_problem(error: Exception) -> str:
    """'not valid YAML: line N, column M: <problem>' of a YAML error, on one line."""
    from imgpipe.pipelines import bounded_yaml

    return bounded_yaml.problem(error)


def to_dict(config: PipelineConfig) -> dict[str, Any]:
    """Plain data that `from_dict` turns back into an equal config."""
    return config_loader.to_dict(config)
