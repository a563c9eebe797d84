"""Every patch of private TFX and KFP behaviour, and every private name used, with its reason.

Upgrading TFX or kfp means reading this module first: each entry says what it
replaces, why, and which public behaviour a test pins (tests/test_kubeflow_compile.py).

Compile time (imgpipe.pipelines.kubeflow):
  project_artifact_titles  compiler_utils.get_artifact_schema, for custom artifact
                           TYPE_NAMEs that are not KFP "<namespace>.<Type>" titles.
  DEFAULT_IMAGE_PATH_KEY   kubeflow_v2_dag_runner._DEFAULT_IMAGE_PATH_KEY, the key of the
                           default image in KubeflowV2DagRunnerConfig's image map.
Local runs (imgpipe.pipelines.local_runner, beam_args):
  swap_executor            a component's executor_spec replaced in place, keeping its
                           extra_flags and beam_pipeline_args (TFX has no public setter).
  set_pipeline_run_id      tfx.orchestration.portable.runtime_parameter_utils, which
                           LocalDagRunner uses to give a run its id (not in tfx.v1).
  no_tfx_sdist             tfx.utils.dependency_utils.make_beam_dependency_flags, made to
                           return the Beam args as given (also in the pod, run_executor).
  beam_option_parser       apache_beam's pipeline_options._BeamArgumentParser and each
                           options class's _add_argparse_args: the parser Beam itself
                           builds in PipelineOptions.get_all_options.
  wrapped_docker_runs      kfp.local.docker_task_handler.run_docker_container (kfp 2.16.0),
                           wrapped while a `kfp run-local` lasts: the DockerRunner has one
                           set of container options for every step, and the Trainer of a
                           package with trainer.workers > 1 needs its own.
In the pod (imgpipe.pipelines.container):
  patch_tfx_entrypoint     kubeflow_v2_entrypoint_utils._retrieve_class_path and
                           compiler_utils.TITLE_TO_CLASS_PATH, for `system.*` and null
                           schema titles from the open-source KFP v2 driver; and the
                           KubeflowV2DagRunner export that tfx.v1 drops with kfp >= 2.
  run_executor, parse_flags  kubeflow_v2_run_executor._run_executor and _parse_flags:
                           TFX's own container entrypoint, run after the fixes. Ported
                           rather than imported: that module imports TFX's Evaluator
                           executor (for one issubclass check), and with it TFMA, Beam,
                           TFDV and TFT, in every step (issue 35).
  defer_package_init       the `__init__` of tfx.components and tensorflow_model_analysis,
                           run when one of its names is first asked for: each imports
                           every component or evaluator, which a step needs one of.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from imgpipe.pipelines.kfp_contract import PROJECT_TITLE_PREFIX

# system.* titles of KFP's generic types -> the TFX class most often behind them.
SYSTEM_TITLES = {
    "system.Dataset": "tfx.types.standard_artifacts.Examples",
    "system.Model": "tfx.types.standard_artifacts.Model",
    "system.Statistics": "tfx.types.standard_artifacts.ExampleStatistics",
    "system.Metrics": "tfx.types.standard_artifacts.ModelEvaluation",
    "system.Artifact": f"{__name__}.GenericArtifact",
}


def _generic_artifact_class() -> type:
    from tfx.types import artifact

    return type(
        "GenericArtifact",
        (artifact.Artifact,),
        {"TYPE_NAME": "system.Artifact", "__module__": __name__},
    )


def __getattr__(name: str) -> Any:  # GenericArtifact, built when TFX asks for it
    if name == "GenericArtifact":
        cls = _generic_artifact_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)


# ---- compile time ----------------------------------------------------------------------


def default_image_path_key() -> str:
    """The key of the default image in KubeflowV2DagRunnerConfig(default_image={...})."""
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner

    return kubeflow_v2_dag_runner._DEFAULT_IMAGE_PATH_KEY


@contextlib.contextmanager
def project_artifact_titles() -> Iterator[None]:
    """Compiles custom artifact types whose TYPE_NAME is not a KFP schema title.

    KFP v2 titles are "<namespace>.<Type>"; TFX refuses other custom TYPE_NAMEs. Such
    a type is compiled as "imgpipe.<TYPE_NAME>", which the pod resolves back to its
    class (custom_class_path).
    """
    from tfx.orchestration.kubeflow.v2 import compiler_utils

    original = compiler_utils.get_artifact_schema

    def get_artifact_schema(artifact_type) -> str:
        name = artifact_type.TYPE_NAME
        if (
            artifact_type in compiler_utils._SUPPORTED_STANDARD_ARTIFACT_TYPES
            or compiler_utils._SCHEMA_TITLE_RE.fullmatch(name)
        ):
            return original(artifact_type)
        renamed = type(
            artifact_type.__name__, (artifact_type,), {"TYPE_NAME": PROJECT_TITLE_PREFIX + name}
        )
        return original(renamed)

    compiler_utils.get_artifact_schema = get_artifact_schema
    try:
        yield
    finally:
        compiler_utils.get_artifact_schema = original


# ---- local runs ------------------------------------------------------------------------
# Checked against tfx 1.21.0 and apache-beam 2.77.0 (requirements.lock);
# tests/test_pipeline_local.py and tests/test_cli.py pin what they do.


def swap_executor(component: Any, executor_class: type) -> None:
    """Runs `component` with `executor_class`, its executor spec otherwise as it was."""
    old = component.executor_spec
    new = type(old)(executor_class)
    for name in ("extra_flags", "beam_pipeline_args"):
        if hasattr(old, name):
            setattr(new, name, getattr(old, name))
    component.executor_spec = new


def set_pipeline_run_id(ir: Any, run_id: str) -> None:
    """Gives a compiled pipeline (IR) its run id, as LocalDagRunner does where none is set."""
    from tfx.dsl.compiler import constants
    from tfx.orchestration.portable import runtime_parameter_utils

    runtime_parameter_utils.substitute_runtime_parameter(
        ir, {constants.PIPELINE_RUN_ID_PARAMETER_NAME: run_id}
    )


def no_tfx_sdist() -> None:
    """Stops TFX's Beam steps from packaging TFX for their workers.

    BaseBeamExecutor calls make_beam_dependency_flags whenever it has Beam args and none
    names a package or an SDK image. It copies the installed TFX to a new temporary folder,
    builds an sdist there (a second Python process, about 1 s), adds it as --extra_package
    and never removes the folder: 52 MB per Beam step per run at TFX 1.21, which filled a
    CI disk. That package would not be enough here anyway: our Beam steps need this
    project's code on their workers, so every runner runs them where TFX is installed
    already (in-process, a worker pool started from the project's image, or an SDK
    container of that image: docs/object-stores-and-engines.md).
    """
    from tfx.utils import dependency_utils

    def as_given(beam_pipeline_args: list[str]) -> list[str]:
        return beam_pipeline_args

    dependency_utils.make_beam_dependency_flags = as_given


def beam_option_parser() -> Any:
    """Beam's own argument parser with every registered options class's arguments, no
    abbreviations: what PipelineOptions.get_all_options parses with. Beam has no public
    call that returns the arguments it does not know."""
    from apache_beam.options import pipeline_options

    parser = pipeline_options._BeamArgumentParser(allow_abbrev=False, exit_on_error=False)
    classes = {str(cls): cls for cls in pipeline_options.PipelineOptions.__subclasses__()}
    for cls in classes.values():
        cls._add_argparse_args(parser)
    return parser


# ---- in the pod ------------------------------------------------------------------------


@contextlib.contextmanager
def wrapped_docker_runs(wrap: Any) -> Iterator[None]:
    """kfp.local's DockerRunner starts each step's container through
    docker_task_handler.run_docker_container(client, image, command, volumes, **options);
    while this lasts, through `wrap(original)` instead (checked against kfp 2.16.0)."""
    from kfp.local import docker_task_handler

    original = docker_task_handler.run_docker_container
    docker_task_handler.run_docker_container = wrap(original)
    try:
        yield
    finally:
        docker_task_handler.run_docker_container = original


def schema_title(type_schema) -> str | None:
    """The title of an ArtifactTypeSchema; None when it is empty or null."""
    import yaml

    kind = type_schema.WhichOneof("kind")
    if kind == "schema_title":
        return type_schema.schema_title or None
    if kind == "instance_schema":
        data = yaml.safe_load(type_schema.instance_schema or "") or {}
        return data.get("title") if isinstance(data, dict) else None
    return None


def custom_class_path(title: str) -> str | None:
    """The import path of the loaded Artifact subclass a custom schema title names.

    TFX uses a custom type's TYPE_NAME as its schema title and, at run time, as an
    import path; a TYPE_NAME that is not one (or the imgpipe.-prefixed form) is
    found among the Artifact classes the executor's modules have loaded.
    """
    from tfx.types import artifact

    names = {title, title.removeprefix(PROJECT_TITLE_PREFIX)}
    pending = [artifact.Artifact]
    while pending:
        cls = pending.pop()
        if getattr(cls, "TYPE_NAME", None) in names and "<locals>" not in cls.__qualname__:
            return f"{cls.__module__}.{cls.__qualname__}"
        pending.extend(cls.__subclasses__())
    return None


def patch_tfx_entrypoint() -> None:
    """Patches TFX's entrypoint helpers in place; idempotent.

    1. `system.*` titles map to TFX classes (SYSTEM_TITLES), custom titles to the
       loaded classes (custom_class_path).
    2. A null `instance_schema` reads as untyped instead of failing on None.get.
    3. tfx.v1.orchestration.experimental gets KubeflowV2DagRunner(Config) back, where
       tfx.v1 is loaded (by the step's executor, which is imported first).
    """
    from tfx.orchestration.kubeflow.v2 import compiler_utils
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as utils

    for title, path in SYSTEM_TITLES.items():
        compiler_utils.TITLE_TO_CLASS_PATH.setdefault(title, path)

    def retrieve_class_path(type_schema) -> str:
        title = schema_title(type_schema) or "system.Artifact"
        if title in compiler_utils.TITLE_TO_CLASS_PATH:
            return compiler_utils.TITLE_TO_CLASS_PATH[title]
        return custom_class_path(title) or title

    utils._retrieve_class_path = retrieve_class_path
    if "tfx.v1" in sys.modules:  # else importing tfx.v1 would load every component
        export_kubeflow_v2_runner()


def export_kubeflow_v2_runner() -> None:
    """Re-exports KubeflowV2DagRunner(Config) from tfx.v1.orchestration.experimental,
    which drops them when its kfp-v1 imports fail under kfp >= 2."""
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner
    from tfx.v1.orchestration import experimental

    for name in ("KubeflowV2DagRunner", "KubeflowV2DagRunnerConfig"):
        if not hasattr(experimental, name):
            setattr(experimental, name, getattr(kubeflow_v2_dag_runner, name))


def parse_flags(argv: list[str]) -> Any:
    """TFX's container entrypoint argument parser (kubeflow_v2_run_executor._parse_flags):
    (args, beam_args)."""
    from absl.flags import argparse_flags

    parser = argparse_flags.ArgumentParser()
    parser.add_argument("--executor_class_path", type=str, required=True)
    parser.add_argument("--json_serialized_invocation_args", type=str, required=True)
    parser.add_argument("--json_serialized_inputs_spec_args", type=str, required=False)
    return parser.parse_known_args(argv)


# Packages whose __init__ imports far more than a step uses (tfx.components: every TFX
# component, and through the Evaluator TFMA and Beam; TFMA: every evaluator, Beam, nltk).
DEFERRED_PACKAGES = ("tfx.components", "tensorflow_model_analysis")
# TFX's Evaluator executor, whose blessing output the entrypoint renames, and the Beam
# executors' base (it imports Beam), whose subclasses get a Beam context.
TFX_EVALUATOR_EXECUTOR = "tfx.components.evaluator.executor"
BEAM_EXECUTOR_MODULE = "tfx.dsl.components.base.base_beam_executor"


# The TFMA config protos that tfx.components' __init__ sets on the tensorflow_model_analysis
# package (TFX's components read tfma.EvalConfig at import); set on the deferred package
# instead, from the one small module that defines them.
TFMA_PROTO_ALIASES = (
    "EvalConfig",
    "ModelSpec",
    "SlicingSpec",
    "MetricsSpec",
    "MetricConfig",
    "MetricThreshold",
    "GenericValueThreshold",
    "GenericChangeThreshold",
    "MetricDirection",
)


def defer_package_init(name: str) -> bool:
    """Registers package `name` without running its `__init__`; its submodules import as
    usual, and the `__init__` runs when a name it defines is first asked for. Does
    nothing (False) once the package is imported, or when it is not installed."""
    if name in sys.modules or (spec := importlib.util.find_spec(name)) is None:
        return False
    if spec.loader is None or spec.submodule_search_locations is None:
        return False
    module = importlib.util.module_from_spec(spec)

    def __getattr__(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        submodule = f"{name}.{attr}"
        try:
            return importlib.import_module(submodule)
        except ModuleNotFoundError as e:
            if e.name != submodule:
                raise
        del module.__dict__["__getattr__"]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        return getattr(module, attr)

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:  # as the import system binds a submodule it loads
        setattr(importlib.import_module(parent), child, module)
    return True


def defer_heavy_packages() -> None:
    """Defers DEFERRED_PACKAGES' __init__s (a step's first act, before TFX is imported)."""
    if any(name in sys.modules for name in DEFERRED_PACKAGES):
        return  # too late to defer either consistently
    if defer_package_init("tensorflow_model_analysis"):
        # config_pb2 names wrappers.proto without importing it (TFMA's __init__ had).
        from google.protobuf import wrappers_pb2  # noqa: F401
        from tensorflow_model_analysis.proto import config_pb2

        tfma = sys.modules["tensorflow_model_analysis"]
        for name in TFMA_PROTO_ALIASES:
            setattr(tfma, name, getattr(config_pb2, name))
    defer_package_init("tfx.components")


# What run_executor imports beyond the executor's own modules.
RUN_EXECUTOR_MODULES = (
    "kfp.pipeline_spec.pipeline_spec_pb2",
    "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_entrypoint_utils",
    "tfx.orchestration.portable.outputs_utils",
    "tfx.types.standard_component_specs",
)


def import_run_executor_modules() -> None:
    for name in RUN_EXECUTOR_MODULES:
        importlib.import_module(name)


def parsed_invocation(args: Any) -> tuple[Any, Any]:
    """The entrypoint's (executor input, inputs spec or None) from parse_flags' args."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    executor_input = pipeline_spec_pb2.ExecutorInput()
    json_format.Parse(
        args.json_serialized_invocation_args, executor_input, ignore_unknown_fields=True
    )
    inputs_spec = None
    if getattr(args, "json_serialized_inputs_spec_args", None):
        inputs_spec = pipeline_spec_pb2.ComponentInputsSpec()
        json_format.Parse(
            args.json_serialized_inputs_spec_args, inputs_spec, ignore_unknown_fields=True
        )
    return executor_input, inputs_spec


def run_executor(args: Any, beam_args: list[str]) -> None:
    """Runs one TFX executor as TFX's container entrypoint does
    (kubeflow_v2_run_executor._run_executor, TFX 1.21), but without importing TFX's
    Evaluator executor or the Beam executors' base for its class checks."""
    from absl import logging
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2
    from tfx.dsl.components.base import base_executor
    from tfx.dsl.io import fileio
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as utils
    from tfx.orchestration.portable import outputs_utils
    from tfx.types import (
        artifact_utils,
        standard_artifacts,
        standard_component_specs,
        value_artifact,
    )
    from tfx.utils import import_utils

    def loaded_subclass(cls: type, module: str, name: str) -> bool:
        """issubclass(cls, module.name) without importing `module`: a subclass of a class
        has loaded the module that defines it."""
        return module in sys.modules and issubclass(cls, getattr(sys.modules[module], name))

    logging.set_verbosity(logging.INFO)
    executor_input, inputs_spec = parsed_invocation(args)
    parameter_values = executor_input.inputs.parameter_values
    parameters = executor_input.inputs.parameters
    output_file = executor_input.outputs.output_file
    task_root = os.path.dirname(output_file)
    if fileio.exists(output_file):  # a driver's updated exec_properties
        with fileio.open(output_file, "rb") as f:
            driver_output = pipeline_spec_pb2.ExecutorOutput()
            json_format.Parse(f.read(), driver_output, ignore_unknown_fields=True)
        for k, v in driver_output.parameter_values.items():
            parameter_values[k].CopyFrom(v)
        for k, v in driver_output.parameters.items():
            parameters[k].CopyFrom(v)

    name_from_id: dict = {}
    inputs = utils.parse_raw_artifact_dict(executor_input.inputs.artifacts, name_from_id)
    outputs = utils.parse_raw_artifact_dict(executor_input.outputs.artifacts, name_from_id)
    exec_properties = utils.parse_execution_properties(parameter_values, parameters, inputs_spec)
    logging.info(
        "Executor %s do: inputs: %s, outputs: %s, exec_properties: %s",
        args.executor_class_path,
        inputs,
        outputs,
        exec_properties,
    )
    executor_cls = import_utils.import_class_by_path(args.executor_class_path)
    context_args = {
        "unique_id": os.path.basename(task_root),
        "tmp_dir": os.path.join(task_root, ".temp"),
    }
    if loaded_subclass(executor_cls, BEAM_EXECUTOR_MODULE, "BaseBeamExecutor"):
        no_tfx_sdist()
        base_beam_executor = sys.modules[BEAM_EXECUTOR_MODULE]
        context = base_beam_executor.BaseBeamExecutor.Context(
            beam_pipeline_args=beam_args, **context_args
        )
    else:
        context = base_executor.BaseExecutor.Context(extra_flags=beam_args, **context_args)
    executor = executor_cls(context)
    logging.info("Starting executor")
    executor.Do(inputs, outputs, exec_properties)

    outputs_utils.tag_output_artifacts_with_version(outputs)
    if (
        loaded_subclass(executor_cls, TFX_EVALUATOR_EXECUTOR, "Executor")
        and standard_component_specs.BLESSING_KEY in outputs
    ):
        utils.refactor_model_blessing(
            artifact_utils.get_single_instance(outputs[standard_component_specs.BLESSING_KEY]),
            name_from_id,
        )

    executor_output = pipeline_spec_pb2.ExecutorOutput()
    for k, v in utils.translate_executor_output(outputs, name_from_id).items():
        executor_output.artifacts[k].CopyFrom(v)
    for key in executor_input.outputs.parameters.keys():
        if key not in outputs:
            raise ValueError("All OutputParameters must have corresponding OutputValueArtifacts.")
        artifact = outputs[key][0]
        if len(outputs[key]) != 1 or not isinstance(artifact, value_artifact.ValueArtifact):
            raise ValueError("Parameter should have one corresponding ValueArtifact.")
        value = executor_output.parameter_values[key]
        if isinstance(artifact, standard_artifacts.String):
            value.string_value = artifact.read()
        elif isinstance(artifact, (standard_artifacts.Float, standard_artifacts.Integer)):
            value.number_value = artifact.read()
        elif isinstance(artifact, standard_artifacts.Boolean):
            value.bool_value = artifact.read()
        else:
            raise ValueError("Only String, Float, Int, and Boolean ValueArtifacts are supported.")
    fileio.makedirs(os.path.dirname(output_file))
    with fileio.open(output_file, "wb") as f:
        f.write(json_format.MessageToJson(executor_output))


@contextlib.contextmanager
def announced_steps(announce: Callable[[str, str, float | None], None]) -> Iterator[None]:
    """While this lasts, LocalDagRunner's launcher calls `announce(node_id, "started",
    None)` as each step starts and `announce(node_id, "done" or "failed", seconds)` as it
    ends (Launcher.launch, checked against TFX 1.21)."""
    import time

    from tfx.orchestration.portable import launcher

    original = launcher.Launcher.launch

    def launch(self: Any) -> Any:
        node_id = self._pipeline_node.node_info.id
        announce(node_id, "started", None)
        start = time.monotonic()
        try:
            result = original(self)
        except BaseException:
            announce(node_id, "failed", time.monotonic() - start)
            raise
        announce(node_id, "done", time.monotonic() - start)
        return result

    launcher.Launcher.launch = launch
    try:
        yield
    finally:
        launcher.Launcher.launch = original
