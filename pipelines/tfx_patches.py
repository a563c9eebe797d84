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
                           TFX's own container entrypoint, run after the fixes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
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
    3. tfx.v1.orchestration.experimental gets KubeflowV2DagRunner(Config) back.
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
    """TFX's container entrypoint argument parser: (args, beam_args)."""
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor

    return kubeflow_v2_run_executor._parse_flags(argv)


def run_executor(args: Any, beam_args: list[str]) -> None:
    """Runs one TFX executor exactly as TFX's container entrypoint does."""
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor

    kubeflow_v2_run_executor._run_executor(args, beam_args)
