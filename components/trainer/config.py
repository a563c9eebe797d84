"""The Trainer's configuration: every setting of training, documented once, in TrainerConfig.

`ImageTrainer(config=TrainerConfig(...))` stores it as JSON in TFX's `custom_config`
exec property; run_fn reads it back with `from_custom_config`, through the one loader
(components/common/runtime/config_loader.py), which rejects unknown keys.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from imgpipe.components.common.formats import features
from imgpipe.components.common.runtime import config_loader, printable
from imgpipe.components.trainer import backbones

# Set by the ImageTrainer executor, not by users: the ImageStatistics artifact's URI.
IMAGE_STATISTICS_URI_KEY = "image_statistics_uri"

CACHE_AUTO = "auto"
CACHE_ON = "on"
CACHE_OFF = "off"

PRECISION_AUTO = "auto"
PRECISION_ON = "on"
PRECISION_OFF = "off"

# Backbones: the table in components/trainer/backbones.py builds and describes each. AUTO
# is MobileNetV3Small when weights are given and tiny_cnn, which learns from scratch on a
# CPU in minutes, when they are not.
AUTO = "auto"
MOBILENET_V3_SMALL = backbones.MOBILENET_V3_SMALL
TINY_CNN = backbones.TINY_CNN
RESNET50 = backbones.RESNET50
BACKBONE_NAMES = tuple(backbones.BACKBONES)
PRETRAINED_BACKBONE = backbones.PRETRAINED_BACKBONE
SCRATCH_BACKBONE = backbones.SCRATCH_BACKBONE
# The input side of AUTO image_size for tiny_cnn, whose three blocks see no more at 224
# pixels and train 3x slower there; the other backbones use their native size.
SCRATCH_IMAGE_SIZE = backbones.BACKBONES[TINY_CNN].native_size

# `weights: imagenet` lets keras.applications download the ImageNet weights.
IMAGENET = "imagenet"

# What the Trainer step of a compiled Kubeflow package launches its workers as
# (trainer.workers > 1; docs/distributed-training.md, "Which launcher for which cluster"):
# a TFJob of the Kubeflow Training Operator v1 (kubeflow.org/v1), or a JobSet
# (jobset.x-k8s.io/v1alpha2). TFJOB is the default: a cluster that runs today's packages
# has the TFJob resource, and keeps running them unchanged.
TFJOB_LAUNCHER = "tfjob"
JOBSET_LAUNCHER = "jobset"
CLUSTER_LAUNCHERS = (TFJOB_LAUNCHER, JOBSET_LAUNCHER)

# Set by the ImageTrainer executor, not by users: the resolved champion's artifact
# (components/common/formats/champion.py), for a warm start.
CHAMPION_URI_KEY = "champion_uri"
# ... and the span of the Examples it trains on, for the window of spans (window.py).
SPAN_KEY = "span"
# ... and whether that span passed its gates only by an acceptance (ImageStatistics').
SPAN_ACCEPTED_KEY = "span_accepted"
EXECUTOR_KEYS = (IMAGE_STATISTICS_URI_KEY, CHAMPION_URI_KEY, SPAN_KEY, SPAN_ACCEPTED_KEY)


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """Everything the Trainer can be told.

    Attributes:
      backbone: `auto` or one of BACKBONE_NAMES (mobilenet_v3_small,
        efficientnet_v2_b0, efficientnet_v2_s, resnet50, tiny_cnn). `auto` is
        mobilenet_v3_small with weights and tiny_cnn without.
      weights: the backbone's starting weights: `imagenet` (downloaded by Keras; needs
        network access), a local or gs:// notop weights file, or None to train from
        scratch. With weights, training fine-tunes: frozen_epochs on a frozen backbone,
        then the whole model at learning_rate x fine_tune_rate.
      frozen_epochs: with weights, epochs that train the head alone first.
      fine_tune_rate: with weights, the factor on learning_rate once the backbone is
        unfrozen.
      warm_start: start from the served champion's weights (the newest push in the
        serving directory) when its labels and architecture match; with other labels
        the backbone is kept and the head starts afresh.
      width_multiplier: MobileNet's alpha.
      image_size: the model's input side in pixels; None is the backbone's own
        (224, or SCRATCH_IMAGE_SIZE for tiny_cnn).
      batch_size: batch size per replica (the global batch is this x replicas).
      epochs: epochs of fit(); train_steps, when set, is spread over them.
      min_train_steps: without train_steps, epochs are added until training takes at
        least this many steps, so a small data set still trains long enough to learn.
      train_steps: TFX TrainArgs.num_steps, the total training steps; None lets the
        epochs and the split's size decide.
      eval_steps: TFX EvalArgs.num_steps; None evaluates the whole eval split.
      learning_rate: peak learning rate of the warm-up + cosine schedule.
      warmup_fraction: fraction of the steps spent warming up linearly.
      weight_decay: AdamW weight decay.
      label_smoothing: for the cross-entropy loss.
      dropout: before the classification head.
      early_stopping_patience: epochs without val_loss improvement before stopping;
        0 disables early stopping.
      num_gpus: GPUs to use: 0 for none, n for the first n, None for all visible. On
        Kubeflow, n > 0 also requests n GPUs for the Trainer's pod. With workers > 1,
        GPUs per worker (each worker process gets its own; docs/distributed-training.md).
      workers: worker processes that train together (MultiWorkerMirroredStrategy):
        1 trains in the Trainer's own process; n > 1 starts n processes on this
        machine, each reading its share of the train split, over the devices it sees;
        in a compiled Kubeflow package, n pods like the Trainer's (see launcher).
      launcher: on Kubeflow with workers > 1, what the Trainer step launches its workers
        as: `tfjob` (the Kubeflow Training Operator v1's TFJob, the default) or `jobset`
        (a JobSet, jobset.x-k8s.io/v1alpha2: JobSet clusters, with or without Kueue).
        Elsewhere the workers are processes or containers and it is not read.
      mixed_precision: `auto` (mixed_float16 exactly when training on GPUs), `on`, `off`.
      cache: `auto` caches the encoded split in RAM when it fits the budget; `on`, `off`.
      ram_budget_mb: RAM the input pipeline may use (cache + shuffle buffer + tf.data
        autotuned buffers); None is half the memory available to this process.
      shuffle_buffer: shuffle buffer in images; None sizes it from the RAM budget.
      key_map: feature layout of the shards: a key of common.formats.features.KEY_MAPS.
      normalize_on_host: normalize in the input_fn (float32 batches) instead of in the
        model's first layer (uint8 batches, a quarter of the host memory traffic).
      tune_malloc: raise glibc malloc's mmap/trim thresholds so per-image buffers are
        reused instead of page-faulted afresh (see components/common/runtime/allocator.py).
      seed: seeds shard order, shuffling and weight initialization.
      tensorboard_images: augmented training images written to TensorBoard.
      checkpoint_dir: where preemption backups live, one folder per training
        fingerprint (docs/preemption.md); None is `.backups` beside the Trainer's
        executions (with LocalDagRunner <pipeline_root>/Trainer/.backups), where a
        retried Trainer finds the backup of the attempt that was killed.
      backup_every_steps: besides at each epoch's end, back up every this many
        optimizer steps, so a preempted run resumes mid-epoch; None: epoch ends only.
      mean: per-channel normalization mean (0..255); overrides ImageStatistics.
      std: per-channel normalization std (0..255); overrides ImageStatistics.
      crop_fraction: center-crop fraction at eval and serving; None takes the value the
        statistics were computed with.
      spans: train on the train splits of this many spans: this run's and the newest
        earlier ones that passed the data gates (components/trainer/window.py); 1 this
        run's alone, 0 every span admitted so far.
    """

    backbone: str = AUTO
    weights: str | None = None
    frozen_epochs: int = 2
    fine_tune_rate: float = 0.1
    warm_start: bool = False
    spans: int = 4
    width_multiplier: float = 1.0
    image_size: int | None = None
    batch_size: int = 32
    epochs: int = 5
    min_train_steps: int = 300
    train_steps: int | None = None
    eval_steps: int | None = None
    learning_rate: float = 1e-3
    warmup_fraction: float = 0.05
    weight_decay: float = 1e-4
    label_smoothing: float = 0.0
    dropout: float = 0.2
    early_stopping_patience: int = 3
    num_gpus: int | None = 0
    workers: int = 1
    launcher: str = TFJOB_LAUNCHER
    mixed_precision: str = PRECISION_AUTO
    cache: str = CACHE_AUTO
    ram_budget_mb: float | None = None
    shuffle_buffer: int | None = None
    key_map: str = features.DEFAULT_KEY_MAP_NAME
    normalize_on_host: bool = False
    tune_malloc: bool = True
    seed: int = 0
    tensorboard_images: int = 8
    checkpoint_dir: str | None = None
    backup_every_steps: int | None = None
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    crop_fraction: float | None = None

    def validate(self) -> None:
        """Raises ValueError naming the first bad setting."""
        if self.spans < 0:
            raise ValueError(
                f"spans must be 0 (every admitted span) or a count of spans, got {self.spans}"
            )
        self._validate_backbone()
        self._validate_training()
        self._validate_resources()
        self._validate_input()

    def _validate_backbone(self) -> None:
        """The backbone, its weights and the options that apply to it."""
        if self.backbone != AUTO and self.backbone not in BACKBONE_NAMES:
            raise ValueError(
                f"backbone {self.backbone!r} is unknown; choose auto or one of "
                f"{sorted(BACKBONE_NAMES)}"
            )
        backbone = backbones.BACKBONES[self.resolved_backbone]
        if self.weights == IMAGENET and not backbone.imagenet:
            with_weights = sorted(b.name for b in backbones.BACKBONES.values() if b.imagenet)
            raise ValueError(
                f"weights: imagenet needs a backbone with ImageNet weights; {backbone.name} "
                f"has none (set backbone: auto or one of {with_weights})"
            )
        for option in backbones.option_defaults_hold(backbone, self):
            users = sorted(b.name for b in backbones.BACKBONES.values() if option in b.options)
            raise ValueError(
                f"{option} does not change {backbone.name}; it applies to {', '.join(users)} "
                f"(remove it, or choose that backbone)"
            )
        if self.weights and self.normalize_on_host:
            raise ValueError(
                "normalize_on_host applies to training from scratch: with weights, the "
                f"model's first layer gives {backbone.name} the pixels its weights expect; "
                "remove normalize_on_host"
            )

    def _validate_training(self) -> None:
        """The batch, the epochs, the steps and the schedule."""
        for name in ("batch_size", "epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.image_size is not None and self.image_size < 32:
            raise ValueError(
                f"image_size must be None (auto) or at least 32, got {self.image_size}"
            )
        if self.min_train_steps < 0:
            raise ValueError(f"min_train_steps must be 0 or more, got {self.min_train_steps}")
        if self.frozen_epochs < 0:
            raise ValueError(f"frozen_epochs must be 0 or more, got {self.frozen_epochs}")
        if not 0.0 < self.fine_tune_rate <= 1.0:
            raise ValueError(f"fine_tune_rate must be in (0, 1], got {self.fine_tune_rate}")
        if self.backup_every_steps is not None and self.backup_every_steps < 1:
            raise ValueError(
                "backup_every_steps must be None (at epoch ends only) or at least 1, got "
                f"{self.backup_every_steps}"
            )
        for name in ("train_steps", "eval_steps"):
            steps = getattr(self, name)
            if steps is not None and steps < 1:
                raise ValueError(
                    f"{name} must be None (decided by the data) or at least 1, got {steps}"
                )
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ValueError(f"warmup_fraction must be in [0, 1), got {self.warmup_fraction}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    def _validate_resources(self) -> None:
        """The GPUs, the workers, the precision and the memory the training uses."""
        if self.num_gpus is not None and self.num_gpus < 0:
            raise ValueError(f"num_gpus must be None (all), 0 or more, got {self.num_gpus}")
        if self.workers < 1:
            raise ValueError(
                f"workers must be 1 (train in the Trainer's process) or more (worker "
                f"processes that train together), got {self.workers}; set trainer.workers=1"
            )
        checked_launcher(self.launcher)
        if self.mixed_precision not in (PRECISION_AUTO, PRECISION_ON, PRECISION_OFF):
            raise ValueError(
                f"mixed_precision must be auto, on or off, got {self.mixed_precision!r}"
            )
        if self.cache not in (CACHE_AUTO, CACHE_ON, CACHE_OFF):
            raise ValueError(f"cache must be auto, on or off, got {self.cache!r}")
        if self.ram_budget_mb is not None and self.ram_budget_mb <= 0:
            raise ValueError(f"ram_budget_mb must be positive, got {self.ram_budget_mb}")
        if self.shuffle_buffer is not None and self.shuffle_buffer < 1:
            raise ValueError(f"shuffle_buffer must be at least 1, got {self.shuffle_buffer}")

    def _validate_input(self) -> None:
        """How the examples are read and normalized."""
        if self.key_map not in features.KEY_MAPS:
            raise ValueError(
                f"key_map {self.key_map!r} is unknown; choose one of {sorted(features.KEY_MAPS)}"
            )
        for name in ("mean", "std"):
            value = getattr(self, name)
            if value is not None and len(value) != 3:
                raise ValueError(f"{name} needs 3 values (R, G, B), got {value}")
        if self.std is not None and min(self.std) <= 0:
            raise ValueError(f"std values must be positive, got {self.std}")
        if self.crop_fraction is not None and not 0.0 < self.crop_fraction <= 1.0:
            raise ValueError(f"crop_fraction must be in (0, 1], got {self.crop_fraction}")

    @property
    def feature_key_map(self) -> features.FeatureKeyMap:
        return features.KEY_MAPS[self.key_map]

    def resolved(self, auto_image_size: int | None = None) -> TrainerConfig:
        """The config with `auto` backbone and image size made concrete: an `auto` side
        is `auto_image_size` when given (the Trainer's, from the statistics), else the
        backbone's own."""
        backbone = self.resolved_backbone
        image_size = self.image_size or auto_image_size
        if image_size is None:
            image_size = backbones.BACKBONES[backbone].native_size
        return dataclasses.replace(self, backbone=backbone, image_size=image_size)

    @property
    def weights_file(self) -> str | None:
        """The backbone weights' local path (file:// removed) when they are a local file;
        None for none, `imagenet` or an object store's file."""
        from imgpipe.components.common.storage import fileio  # loads TensorFlow

        if not self.weights or self.weights == IMAGENET or not fileio.is_local(self.weights):
            return None
        return fileio.local_path(self.weights)

    @property
    def resolved_backbone(self) -> str:
        """The backbone's name, `auto` made concrete."""
        if self.backbone == AUTO:
            return PRETRAINED_BACKBONE if self.weights else SCRATCH_BACKBONE
        return self.backbone

    @property
    def input_size(self) -> int:
        """The model's input side in pixels, `auto` resolved."""
        size = self.resolved().image_size
        assert size is not None
        return size


def checked_launcher(launcher: str) -> str:
    """`launcher`, if it names one of CLUSTER_LAUNCHERS.

    Raises:
      ValueError: it does not, in one line naming them.
    """
    if launcher not in CLUSTER_LAUNCHERS:
        raise ValueError(
            f"launcher {printable.shown(launcher)} is unknown; choose one of "
            f"{', '.join(CLUSTER_LAUNCHERS)}"
        )
    return launcher


def to_custom_config(config: TrainerConfig) -> dict[str, Any]:
    """The config as TFX's custom_config dict (JSON types)."""
    return config_loader.to_dict(config)


def from_custom_config(custom_config: dict[str, Any] | None) -> TrainerConfig:
    """The config from a Trainer's custom_config dict (JSON types), validated.

    Raises:
      ValueError: an unknown key or an invalid value.
    """
    values = {k: v for k, v in (custom_config or {}).items() if k not in EXECUTOR_KEYS}
    return config_loader.from_dict(TrainerConfig, values)
