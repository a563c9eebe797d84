"""One configuration: the pipeline YAML reaches every component setting, one loader
rejects unknown keys everywhere, defaults live in the components' types, and bad values
fail when the config is loaded."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
import yaml

from imgpipe.components.common.runtime import config_loader
from imgpipe.components.evaluator.config import EvaluatorConfig
from imgpipe.components.image_example_gen.options import (
    ExampleGenConfig,
    ImageOptions,
    OutputOptions,
)
from imgpipe.components.image_statistics.config import StatisticsConfig
from imgpipe.components.trainer.config import TrainerConfig
from imgpipe.pipelines import config as cfg
from imgpipe.pipelines.kubeflow.config import KubeflowConfig

pytestmark = pytest.mark.unit

# A non-default value for settings of every section.
CHANGED = {
    "data_root": "/data/images",
    "example_gen": {
        "image": {"resize": 128, "center_crop": True, "verify": "decode"},
        "output": {
            "splits": [["fit", 0.7], ["holdout", 0.3]],
            "train_split": "fit",
            "eval_split": "holdout",
            "split_by": "path",
            "on_label_conflict": "keep",
            "stratify": False,
            "on_error": "fail",
            "num_shards": 3,
        },
    },
    "statistics": {
        "fail_on_anomalies": False,
        "leakage_threshold": 0.05,
        "min_supported_fraction": 0.9,
        "sample_thumbnails": 2,
    },
    "trainer": {
        "backbone": "tiny_cnn",
        "learning_rate": 0.01,
        "weights": "/w/notop.h5",
        "dropout": 0.3,
        "image_size": 96,
        "crop_fraction": 0.9,
        "train_steps": 40,
    },
    "evaluator": {"accuracy_threshold": 0.6, "tolerance": 0.03, "min_class_examples": 7},
}


def _components(config: cfg.PipelineConfig) -> dict:
    from imgpipe.pipelines import pipeline

    return {component.id: component for component in pipeline.create_components(config)}


def test_every_setting_of_every_section_reaches_its_component():
    from imgpipe.components.evaluator import spec as evaluator_spec
    from imgpipe.components.image_example_gen import spec as gen_spec
    from imgpipe.components.image_statistics import spec as stats_spec
    from imgpipe.components.trainer import spec as trainer_spec
    from imgpipe.pipelines import component_ids as ids

    config = cfg.from_dict(CHANGED)
    components = _components(config)
    gen = components[ids.EXAMPLE_GEN].exec_properties
    assert json.loads(gen[gen_spec.IMAGE_OPTIONS_KEY]) == config_loader.to_dict(
        config.example_gen.image
    )
    assert json.loads(gen[gen_spec.OUTPUT_OPTIONS_KEY]) == config_loader.to_dict(
        config.example_gen.output
    )
    stats = components[ids.IMAGE_STATISTICS].exec_properties
    assert json.loads(stats[stats_spec.STATISTICS_CONFIG_KEY]) == config_loader.to_dict(
        config.statistics
    )
    # The statistics are computed at the Trainer's geometry, which is set once.
    assert stats[stats_spec.IMAGE_SIZE_KEY] == 96 and stats[stats_spec.CROP_FRACTION_KEY] == 0.9
    trainer = components[ids.TRAINER].exec_properties
    assert json.loads(trainer[trainer_spec.CUSTOM_CONFIG_KEY]) == config_loader.to_dict(
        config.trainer
    )
    # The Trainer and the Evaluator read the splits ImageExampleGen is told to write.
    assert json.loads(trainer[trainer_spec.TRAIN_ARGS_KEY]) == {"num_steps": 40, "splits": ["fit"]}
    assert json.loads(trainer[trainer_spec.EVAL_ARGS_KEY]) == {"splits": ["holdout"]}
    # The serving folder is read once, by the ChampionResolver, for every step.
    resolver = components[ids.CHAMPION].exec_properties
    assert resolver["serving_dir"] == config.serving_dir
    evaluator = components[ids.EVALUATOR].exec_properties
    assert json.loads(evaluator[evaluator_spec.EVALUATOR_CONFIG_KEY]) == config_loader.to_dict(
        config.evaluator
    )
    assert evaluator[evaluator_spec.EVAL_SPLIT_KEY] == "holdout"
    assert evaluator[evaluator_spec.TOLERANCE_KEY] == 0.03
    # ...and each changed value is in the config the loader built.
    assert config.statistics.fail_on_anomalies is False
    assert config.trainer.weights == "/w/notop.h5"
    assert config.example_gen.output.splits == (("fit", 0.7), ("holdout", 0.3))
    assert config.example_gen.output.split_by == "path"


@pytest.mark.parametrize(
    "section, key, meant",
    [
        ("statistics", "leakage", "'leakage_threshold'"),
        ("trainer", "epoch", "'epochs' or 'frozen_epochs'"),
        ("evaluator", "threshold", "'accuracy_threshold'"),
        ("kubeflow", "image", "'images'"),
    ],
)
def test_unknown_keys_are_named_with_the_closest_and_the_allowed_ones_in_every_section(
    section, key, meant
):
    with pytest.raises(ValueError) as raised:
        cfg.from_dict({section: {key: 1}})
    message = str(raised.value)
    assert message.startswith(
        f"config: unknown key(s) ['{key}'] in {section} (did you mean {meant}?); allowed: ["
    ), message
    # Every allowed key is listed after the closest ones.
    allowed = sorted(f.name for f in dataclasses.fields(getattr(cfg.PipelineConfig(), section)))
    assert message.endswith(f"; allowed: {allowed}")
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['resize'\] in example_gen; "):
        cfg.from_dict({"example_gen": {"resize": 256}})


@pytest.mark.parametrize(
    "moved, where",
    [
        ("model", "trainer"),
        ("data", "example_gen"),
        ("num_gpus", "trainer.num_gpus"),
        ("images", "kubeflow.images"),
    ],
)
def test_keys_of_the_first_release_say_where_they_went(moved, where):
    with pytest.raises(ValueError, match=f"'{moved}' has moved to {where}"):
        cfg.from_dict({moved: {}})


@pytest.mark.parametrize(
    "values, message",
    [
        ({"statistics": {"leakage_threshold": 2.0}}, r"statistics\.leakage_threshold must be"),
        ({"trainer": {"epochs": "five"}}, r"trainer\.epochs must be int, got 'five'"),
        ({"trainer": {"backbone": "vgg"}}, r"trainer\.backbone 'vgg' is unknown"),
        ({"trainer": {"mean": [1, 2]}}, r"trainer\.mean needs 3 values"),
        (
            {"example_gen": {"output": {"on_error": "ignore"}}},
            r"example_gen\.output\.on_error must be skip or fail",
        ),
        ({"evaluator": {"accuracy_threshold": -1}}, r"evaluator\.accuracy_threshold must be"),
        (
            {"kubeflow": {"images": {"Trainr": "registry/app:1"}}},
            r"kubeflow: unknown component ids \['Trainr'\] in resources or images",
        ),
        (
            {"kubeflow": {"resources": {"Trainer": {"cpu_request": "lots"}}}},
            r"kubeflow\.resources\.Trainer\.cpu_request must look like",
        ),
        (
            {"kubeflow": {"images": {"default": "registry.example/app@sha256:abc"}}},
            r"kubeflow\.images\.default: 'registry\.example/app@sha256:abc' has a malformed "
            r"digest; a digest is '@sha256:' and 64 lowercase hex digits",
        ),
        (
            {"kubeflow": {"images": {"Trainer": "registry.example/app:two words"}}},
            r"kubeflow\.images\.Trainer: 'registry\.example/app:two words' is not an image "
            r"reference; give REPOSITORY:TAG or, to run exactly one build, REPOSITORY@sha256:",
        ),
    ],
)
def test_bad_values_fail_when_the_config_is_loaded(values, message):
    with pytest.raises(ValueError, match=message):
        cfg.from_dict(values)


def test_a_config_built_in_python_is_checked_when_the_pipeline_is_built():
    from imgpipe.pipelines import pipeline
    from imgpipe.pipelines.kubeflow.config import Resources

    config = cfg.PipelineConfig(data_root="/data")
    with pytest.raises(ValueError, match=r"kubeflow: unknown component ids \['Trainr'\]"):
        pipeline.create_pipeline(
            dataclasses.replace(config, kubeflow=KubeflowConfig(resources={"Trainr": Resources()}))
        )
    with pytest.raises(ValueError, match=r"kubeflow: artifact_io must be one of"):
        pipeline.create_pipeline(
            dataclasses.replace(config, kubeflow=KubeflowConfig(artifact_io="sometimes"))
        )
    with pytest.raises(ValueError, match=r"trainer: epochs must be at least 1"):
        pipeline.create_pipeline(dataclasses.replace(config, trainer=TrainerConfig(epochs=0)))


def test_the_splits_must_include_the_ones_the_trainer_and_evaluator_read():
    with pytest.raises(ValueError, match=r"splits must include 'train' and 'eval'.*'val'"):
        cfg.from_dict({"example_gen": {"output": {"splits": [["train", 0.8], ["val", 0.2]]}}})
    # ...which the settings name.
    cfg.from_dict(
        {"example_gen": {"output": {"splits": [["train", 0.8], ["val", 0.2]], "eval_split": "val"}}}
    )
    with pytest.raises(ValueError, match=r"example_gen\.output\.eval_split must be a plain split"):
        cfg.from_dict({"example_gen": {"output": {"eval_split": ""}}})
    # A split layout takes its names from the folders.
    cfg.from_dict(
        {"example_gen": {"output": {"layout": "split", "splits": [["train", 1.0], ["val", 1.0]]}}}
    )


def test_yaml_round_trips_and_a_broken_file_is_one_line(tmp_path):
    config = cfg.from_dict(CHANGED)
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict(config)))
    assert cfg.load(str(path)) == config
    path.write_text("trainer: {epochs: 3\n")
    with pytest.raises(ValueError, match=r"pipeline.yaml: not valid YAML: line 2, col") as raised:
        cfg.load(str(path))
    assert "\n" not in str(raised.value)
    with pytest.raises(ValueError, match="does not exist"):
        cfg.load(str(tmp_path / "missing.yaml"))


@pytest.mark.parametrize(
    "cls",
    [
        ImageOptions,
        OutputOptions,
        ExampleGenConfig,
        StatisticsConfig,
        TrainerConfig,
        EvaluatorConfig,
        KubeflowConfig,
        cfg.PipelineConfig,
    ],
)
def test_every_settings_type_round_trips_through_json(cls):
    value = cls()
    assert config_loader.from_json(cls, config_loader.to_json(value)) == value
    for field in dataclasses.fields(cls):
        config_loader.field_default(cls, field.name)  # every setting has a default


def test_the_cli_takes_its_defaults_from_the_types():
    from imgpipe.pipelines.cli import build_parser
    from imgpipe.pipelines.cli import convert as convert_cli

    parser = build_parser()
    convert_args = parser.parse_args(["convert", "src", "out"])
    assert convert_cli.options_from_args(convert_args) == (ImageOptions(), OutputOptions())
    split_args = [
        *("--split-by", "path", "--on-label-conflict", "keep"),
        *("--train-split", "fit", "--eval-split", "holdout", "--eval-fraction", "0.25"),
    ]
    _, output = convert_cli.options_from_args(parser.parse_args(["convert", "s", "o", *split_args]))
    assert output == OutputOptions(
        splits=(("fit", 0.75), ("holdout", 0.25)),
        split_by="path",
        on_label_conflict="keep",
        train_split="fit",
        eval_split="holdout",
    )
    stats_args = parser.parse_args(["stats", "examples"])
    from imgpipe.pipelines.cli import dataclass_flags

    assert dataclass_flags.values(stats_args, stats_args.statistics_flags) == dataclasses.asdict(
        StatisticsConfig()
    )
    assert stats_args.image_size == TrainerConfig().input_size


def test_the_loader_coerces_yaml_scalars_and_checks_shapes():
    @dataclasses.dataclass(frozen=True)
    class Example:
        ratio: float = 1.0
        pair: tuple[int, int] = (0, 0)
        names: tuple[str, ...] = ()
        either: int | float = 0
        label: str = ""

    built = config_loader.from_dict(
        Example, {"ratio": 2, "pair": [3, 4], "names": ["a"], "either": 5, "label": 7}
    )
    assert built == Example(2.0, (3, 4), ("a",), 5, "7")
    assert isinstance(built.ratio, float) and isinstance(built.either, int)
    with pytest.raises(ValueError, match=r"pair needs 2 values"):
        config_loader.from_dict(Example, {"pair": [1]})
    with pytest.raises(ValueError, match=r"the top level must be a mapping"):
        config_loader.from_dict(Example, [1])
    with pytest.raises(ValueError, match=r"either must be one of"):
        config_loader.from_dict(Example, {"either": "x"})


def test_argparse_defaults_are_not_spelled_twice():
    """The stats and convert commands declare no literal default for a setting the
    component types own (a literal would drift, as epochs=10 against 5 once did)."""
    import ast
    import inspect

    from imgpipe.pipelines.cli import convert, stats

    for module in (convert, stats):
        tree = ast.parse(inspect.getsource(module))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                for keyword in node.keywords:
                    if keyword.arg == "default":
                        assert not isinstance(keyword.value, ast.Constant), (
                            f"{module.__name__}: literal default {ast.unparse(keyword.value)} "
                            f"for {ast.unparse(node.args[0])}"
                        )


def test_set_flags_reach_any_section_with_yaml_types(tmp_path):
    config_file = tmp_path / "c.yaml"
    config_file.write_text("evaluator: {accuracy_threshold: 0.5}\ntrainer: {epochs: 9}\n")
    config = cfg.load(
        str(config_file),
        [
            "evaluator.tolerance=0.02",
            "trainer.warm_start=true",
            "example_gen.output.splits=[[train, 0.8], [eval, 0.2]]",
            "statistics.fail_on_anomalies=false",
        ],
        data_root="/data",
    )
    assert config.evaluator == EvaluatorConfig(accuracy_threshold=0.5, tolerance=0.02)
    assert config.trainer.epochs == 9 and config.trainer.warm_start is True
    assert config.example_gen.output.splits == (("train", 0.8), ("eval", 0.2))
    assert config.statistics.fail_on_anomalies is False
    with pytest.raises(ValueError, match="--set takes section.key=VALUE"):
        cfg.load(None, ["trainer.epochs"])
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['tolerence'\] in evaluator"):
        cfg.load(None, ["evaluator.tolerence=0.1"])
    with pytest.raises(ValueError, match="--set trainer.epochs.x: epochs is a value"):
        cfg.load(str(config_file), ["trainer.epochs.x=1"])


def _alias_bomb(levels: int) -> str:
    """A few hundred bytes of YAML whose value has 9**levels leaves."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels):
        refs = ", ".join([f"*a{level - 1}"] * 9)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "\n".join(lines) + f"\ntrainer:\n  mean: *a{levels - 1}\n"


@pytest.mark.parametrize(
    "text, message",
    [
        # 9**9 = 387 million leaves: 4 GB and a 157 MB error line before the limit.
        (_alias_bomb(9), r"pipeline.yaml: not valid YAML: line \d+: expands to more than"),
        ("trainer: {mean: " + "[" * 20_000 + "]" * 20_000 + "}\n", r"nested more than 64"),
        ("a: &a [*a]\n", r"refers to a value that contains it"),
    ],
)
def test_yaml_bombs_are_refused_in_one_short_line(tmp_path, text, message):
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    assert len(text) < 200_000
    with pytest.raises(ValueError, match=message) as raised:
        cfg.load(str(path))
    assert "\n" not in str(raised.value) and len(str(raised.value)) < 300


def test_a_large_wrong_value_is_shown_cut_short(tmp_path):
    # Within the limits, but far too long to print: the message shows its start.
    path = tmp_path / "pipeline.yaml"
    path.write_text("trainer:\n  mean: [" + ", ".join(["0.5"] * 50_000) + "]\n")
    with pytest.raises(ValueError, match=r"trainer\.mean needs 3 values, got \[0\.5, ") as raised:
        cfg.load(str(path))
    assert len(str(raised.value)) < 300
    with pytest.raises(ValueError, match=r"--set trainer\.mean: not valid YAML: .*nested"):
        cfg.apply_settings({}, ["trainer.mean=" + "[" * 100 + "]" * 100])


# ---- every string setting is bounded by its kind; messages quote only its start ------

NAME_MAX = config_loader.MAX_CHARS[config_loader.NAME]
PATH_MAX = config_loader.MAX_CHARS[config_loader.PATH]
TEXT_MAX = config_loader.MAX_CHARS[config_loader.TEXT]


@pytest.mark.parametrize(
    "values, where, kind",
    [
        ({"pipeline_name": "p" * (NAME_MAX + 1)}, "pipeline_name", "a name"),
        (
            {"example_gen": {"output": {"eval_split": "e" * (NAME_MAX + 1)}}},
            "example_gen.output.eval_split",
            "a name",
        ),
        (
            {"example_gen": {"output": {"splits": [["train", 0.9], ["v" * (NAME_MAX + 1), 0.1]]}}},
            r"example_gen.output.splits[1][0]",
            "a name",
        ),
        ({"data_root": "/" + "d" * PATH_MAX}, "data_root", "a path or URI"),
        ({"trainer": {"weights": "/" + "w" * PATH_MAX}}, "trainer.weights", "a path or URI"),
        (
            {"evaluator": {"golden_examples": "g" * (PATH_MAX + 1)}},
            "evaluator.golden_examples",
            "a path or URI",
        ),
        (
            {"kubeflow": {"images": {"k" * (PATH_MAX + 1): "a:1"}}},
            "kubeflow.images: the key",
            "a path or URI",
        ),
        ({"beam_args": ["--x=" + "b" * TEXT_MAX]}, "beam_args[0]", "a free-text setting"),
    ],
)
def test_every_string_setting_is_bounded_by_its_kind(tmp_path, values, where, kind):
    with pytest.raises(ValueError) as raised:
        cfg.from_dict(values)
    message = str(raised.value)
    assert message.startswith(f"config: {where} '") and f"characters {kind} may have" in message
    assert len(message) < 300


def test_the_bounds_take_what_they_bound_and_hold_for_a_config_built_in_python():
    # Right at the bound: taken.
    assert cfg.from_dict({"pipeline_name": "p" * NAME_MAX}).pipeline_name == "p" * NAME_MAX
    cfg.from_dict({"data_root": "/" + "d" * (PATH_MAX - 1), "beam_args": ["-" * TEXT_MAX]})
    # TFX refuses a longer pipeline name, after a minute of work: refused at once here.
    for config in (
        cfg.PipelineConfig(pipeline_name="p" * (NAME_MAX + 1)),
        cfg.PipelineConfig(serving_dir="/" + "s" * PATH_MAX),
        cfg.PipelineConfig(trainer=TrainerConfig(checkpoint_dir="/" + "c" * PATH_MAX)),
    ):
        with pytest.raises(ValueError, match=r"is longer than the [\d,]+ characters"):
            config.validate()


def test_a_ten_megabyte_setting_is_refused_in_one_short_line(tmp_path):
    """The observed case: a 10 MB pipeline_name passed, and TFX's refusal echoed it."""
    path = tmp_path / "pipeline.yaml"
    path.write_text("pipeline_name: " + "x" * 10_000_000 + "\n")
    with pytest.raises(ValueError) as raised:
        cfg.load(str(path))
    assert str(raised.value) == (
        f"{path}: more than 1,000,000 characters; a settings file holds a few thousand, "
        "so this is not one"
    )
    # Within the file's bound, the setting's own bound names it.
    path.write_text("pipeline_name: " + "x" * 500_000 + "\n")
    with pytest.raises(ValueError) as raised:
        cfg.load(str(path))
    assert str(raised.value) == (
        f"{path}: pipeline_name '{'x' * 60}'... (500,000 characters) is longer than the 63 "
        "characters a name may have; give a shorter one"
    )
    # --set is bounded too, before its YAML is parsed.
    for setting in ("pipeline_name=" + "x" * 10_000_000, "k" * 10_000 + "=1"):
        with pytest.raises(ValueError) as raised:
            cfg.load(None, [setting])
        assert len(str(raised.value)) < 300 and "is longer than the" in str(raised.value)


def test_a_message_quotes_only_the_start_of_a_value():
    from imgpipe.components.common.runtime.printable import shown

    assert shown("x" * 10_000_000) == f"'{'x' * 60}'... (10,000,000 characters)"
    assert shown(list(range(100))) == "[0, 1, 2, 3, ...]"
    assert shown("five") == "'five'"
    # A wrong type and an unknown key are quoted as short.
    for values in (
        {"trainer": {"epochs": "e" * 1_000_000}},
        {"trainer": {"e" * 1_000_000: 1}},
        {"pipeline_name": "no spaces " * 5},
    ):
        with pytest.raises(ValueError) as raised:
            cfg.from_dict(values)
        assert len(str(raised.value)) < 700, str(raised.value)[:700]


# ---- no credential in any setting ----------------------------------------------------

CREDENTIALS_IN_SETTINGS = {
    "user-info in a Beam option's URL": (
        {"beam_args": ["--s3_endpoint_url=https://AKIAX:Hunter2Pw@minio:9000"]},
        "beam_args --s3_endpoint_url (a user name or password in its URL)",
    ),
    "user-info in the Flink master": (
        {"beam_args": ["--runner=FlinkRunner", "--flink_master=http://u:Hunter2Pw@flink:8081"]},
        "beam_args --flink_master (a user name or password in its URL)",
    ),
    "a token in an option's value": (
        {"beam_args": ["--dataflow_service_options=token=Hunter2Pw"]},
        "beam_args --dataflow_service_options (a secret in token=...)",
    ),
    "a key under another flag's name": (
        {"beam_args": ["--experiments=AKIAIOSFODNN7EXAMPLE"]},
        "beam_args --experiments (an AWS access key id)",
    ),
    "a credential flag by its name": (
        {"beam_args": ["--s3_secret_access_key=Hunter2Pw"]},
        "beam_args --s3_secret_access_key",
    ),
    "user-info in a path": (
        {"data_root": "s3://AKIAX:Hunter2Pw@bucket/photos/span-{SPAN}"},
        "data_root (a user name or password in its URL)",
    ),
    "a token in a URL's query": (
        {"trainer": {"weights": "https://models.example/notop.h5?X-Amz-Security-Token=Hunter2Pw"}},
        "trainer.weights (a secret in X-Amz-Security-Token=...)",
    ),
    "a password in a Kubeflow setting": (
        {"kubeflow": {"gpu": {"node_selector": {"pool": "gpu;password=Hunter2Pw"}}}},
        "kubeflow.gpu.node_selector.pool (a secret in password=...)",
    ),
}


@pytest.mark.parametrize(
    "values, named", CREDENTIALS_IN_SETTINGS.values(), ids=CREDENTIALS_IN_SETTINGS
)
def test_a_credential_in_any_setting_is_refused_naming_the_setting_not_the_value(
    tmp_path, values, named
):
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(values))
    with pytest.raises(ValueError) as raised:
        cfg.load(str(path))
    message = str(raised.value)
    assert message.startswith(f"{named}: a credential must not be written in a setting")
    assert "Kubernetes Secret imgpipe-object-store (AWS_ACCESS_KEY_ID" in message
    assert "Hunter2Pw" not in message and "AKIA" not in message and "\n" not in message


def test_a_credential_in_a_config_built_in_python_is_refused_when_it_is_validated():
    config = cfg.PipelineConfig(
        data_root="/data", beam_args=("--flink_master=http://u:Hunter2Pw@flink:8081",)
    )
    with pytest.raises(ValueError, match=r"^beam_args --flink_master \(a user name") as raised:
        config.validate()
    assert "Hunter2Pw" not in str(raised.value)


def test_ordinary_settings_are_not_taken_for_credentials():
    config = cfg.from_dict(
        {
            "data_root": "gs://bucket/photos/span-{SPAN}",
            "serving_dir": "s3://bucket/serving",
            "trainer": {"weights": "https://models.example/notop.h5?version=3"},
            "beam_args": [
                "--runner=FlinkRunner",
                "--flink_master=flink:8081",
                "--s3_endpoint_url=http://minio:9000",
                "--service_account_email=runner@example.iam.gserviceaccount.com",
                "--experiments=use_runner_v2,enable_secure_boot",
                '--environment_config={"command": "/opt/apache/beam/boot"}',
            ],
            "kubeflow": {"images": {"default": "registry.example:5000/app@sha256:" + "a" * 64}},
        }
    )
    assert config.beam_args[1] == "--flink_master=flink:8081"
    cfg.load(os.path.join(os.path.dirname(__file__), "..", "k8s", "pipeline-config.yaml"))
