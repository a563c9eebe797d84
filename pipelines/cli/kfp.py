"""`imgpipe kfp compile|submit|schedule|run-local`: the pipeline on Kubeflow Pipelines v2.

`compile` writes the YAML package; `submit` starts one run and `schedule` creates a
recurring run (max concurrency 1, no catch-up), both through kfp.Client; `run-local`
runs the package on this machine, every step in its image, under kfp.local's
DockerRunner (kubeflow/local_docker.py). Without --package, submit, schedule and
run-local compile from --config first.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Sequence
from typing import Any

from imgpipe.components.common.runtime.printable import short, shown
from imgpipe.pipelines.cli.errors import NOT_PUSHED_EXIT_CODE, UserError
from imgpipe.pipelines.cli.kfp_client import (
    api_errors,
    client,
    remote_pipeline_root,
    schedule,
    submit,
    validate_cron,
)
from imgpipe.pipelines.cli.settings import add_set_argument

DEFAULT_OUTPUT = "pipeline.yaml"


def register(subparsers: argparse._SubParsersAction) -> None:
    kfp = subparsers.add_parser("kfp", help="compile, submit or schedule on Kubeflow Pipelines")
    commands = kfp.add_subparsers(title="commands", metavar="COMMAND")

    _add_compile(commands)
    _add_submit(commands)
    _add_schedule(commands)
    _add_run_local(commands)


def _add_compile(commands: argparse._SubParsersAction) -> None:
    compile_ = commands.add_parser(
        "compile", help="compile to a KFP v2 YAML package (KubeflowV2DagRunner)"
    )
    compile_.add_argument("--config", metavar="FILE", help="pipeline config YAML")
    add_set_argument(compile_)
    compile_.add_argument(
        "-o",
        "--output",
        default=DEFAULT_OUTPUT,
        metavar="FILE",
        help=f"output .yaml (default {DEFAULT_OUTPUT})",
    )
    compile_.set_defaults(handler=run_compile)


def _add_submit(commands: argparse._SubParsersAction) -> None:
    submit = commands.add_parser("submit", help="start one run through the kfp client")
    _client_args(submit)
    submit.add_argument("--run-name", help="default: <pipeline>-<timestamp>")
    submit.set_defaults(handler=run_submit)


def _add_schedule(commands: argparse._SubParsersAction) -> None:
    schedule = commands.add_parser(
        "schedule", help="create a recurring run (max concurrency 1, no catch-up)"
    )
    _client_args(schedule)
    schedule.add_argument(
        "--cron",
        required=True,
        metavar="EXPR",
        help='six-field cron with seconds, e.g. "0 0 3 * * *" (03:00 daily)',
    )
    schedule.add_argument("--job-name", help="default: <pipeline>-schedule")
    schedule.set_defaults(handler=run_schedule)


def _add_run_local(commands: argparse._SubParsersAction) -> None:
    local = commands.add_parser(
        "run-local",
        help="run the package here, each step in its image (kfp.local DockerRunner)",
        description="Runs the compiled package on this machine, each step a container of its "
        f"image. Exits 0 when a model was pushed, {NOT_PUSHED_EXIT_CODE} when the run "
        "finished without pushing one (refused or not blessed), 1 on an error, as "
        "`imgpipe run local` does.",
    )
    local.add_argument("--config", metavar="FILE", help="pipeline config YAML")
    add_set_argument(local)
    local.add_argument(
        "--package", metavar="FILE", help="a compiled pipeline.yaml (default: compile --config now)"
    )
    local.add_argument(
        "--pipeline-root",
        metavar="DIR",
        help="local folder for the run's artifacts, writable by the image's user "
        "(default: the config's pipeline_root)",
    )
    local.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a pipeline parameter; repeatable",
    )
    local.add_argument(
        "--network",
        default=None,
        metavar="MODE",
        help="Docker network of the steps (default: Docker's own; `none` runs them "
        "offline, for local data)",
    )
    local.add_argument(
        "--workers-network",
        default=None,
        metavar="NAME",
        help="with trainer.workers > 1: an existing Docker network for the Trainer's worker "
        "containers (docker network create NAME); a local stand-in for the TFJob",
    )
    local.set_defaults(handler=run_local)


def _client_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host",
        required=True,
        metavar="URL",
        help="KFP API endpoint, e.g. http://localhost:8080 (port-forwarded "
        "ml-pipeline-ui) or https://<kubeflow>/pipeline",
    )
    parser.add_argument("--experiment", required=True, metavar="NAME")
    parser.add_argument(
        "--namespace", default=None, help="Kubeflow profile namespace (multi-user installs)"
    )
    parser.add_argument("--config", metavar="FILE", help="pipeline config YAML")
    add_set_argument(parser)
    parser.add_argument(
        "--package", metavar="FILE", help="a compiled pipeline.yaml (default: compile --config now)"
    )
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a pipeline parameter; repeatable",
    )
    parser.add_argument(
        "--service-account",
        default=None,
        help="Kubernetes service account of the run "
        "(default: the config's kubeflow.service_account)",
    )


def parse_params(pairs: Sequence[str], spec: dict[str, Any]) -> dict[str, Any]:
    """NAME=VALUE pairs, checked against the package's root parameters and typed by them.

    Raises:
      ValueError: a malformed pair, an unknown name or a value of the wrong type.
    """
    declared = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
    params: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--param takes NAME=VALUE, got {shown(pair)}")
        if name not in declared:
            raise ValueError(
                f"--param {short(name)}: the pipeline has no parameter {shown(name)}; "
                f"it has {sorted(declared) or 'none'}"
            )
        kind = declared[name].get("parameterType", "STRING")
        try:
            if kind == "NUMBER_INTEGER":
                params[name] = int(value)
            elif kind == "NUMBER_DOUBLE":
                params[name] = float(value)
            elif kind == "BOOLEAN":
                if value.lower() not in ("true", "false"):
                    raise ValueError(value)
                params[name] = value.lower() == "true"
            else:
                params[name] = value
        except ValueError:
            raise ValueError(f"--param {name}: {shown(value)} is not a {kind}") from None
    return params


def load_package(path: str) -> dict[str, Any]:
    """The PipelineSpec document of a compiled package.

    Raises:
      UserError: the file is missing, is not YAML, or is not a compiled pipeline.
    """
    import yaml

    from imgpipe.components.common.storage import fileio
    from imgpipe.pipelines.config import yaml_problem

    if not fileio.exists(path) or fileio.isdir(path):
        raise UserError(
            f"--package {path}: no such file; give a package that "
            "`imgpipe kfp compile` wrote, or leave --package out to compile --config now"
        )
    with fileio.open_file(path, "r") as f:
        try:
            documents = [d for d in yaml.safe_load_all(f.read()) if d]
        except yaml.YAMLError as e:
            raise UserError(f"--package {path}: {yaml_problem(e)}") from None
    if not documents or not isinstance(documents[0], dict) or "pipelineInfo" not in documents[0]:
        raise UserError(
            f"--package {path}: not a compiled KFP pipeline (no pipelineInfo); "
            "give a package that `imgpipe kfp compile` wrote"
        )
    return documents[0]


def run_compile(args: argparse.Namespace) -> int:
    from imgpipe.pipelines import config as cfg
    from imgpipe.pipelines.kubeflow import compiler

    config = cfg.load(args.config, args.set)
    path = compiler.compile_to_file(config, args.output)
    print(f"compiled {config.pipeline_name} to {path}")
    return 0


def _package(args: argparse.Namespace, workdir: str):
    """What every command that runs a package starts with: the config, the package
    (--package, or compiled from the config into `workdir`), its spec and the --param
    values checked against it."""
    from imgpipe.pipelines import config as cfg
    from imgpipe.pipelines.kubeflow import compiler

    config = cfg.load(args.config, args.set)
    package = args.package or compiler.compile_to_file(
        config, os.path.join(workdir, DEFAULT_OUTPUT)
    )
    spec = load_package(package)
    return package, config, spec, parse_params(args.param, spec)


def run_submit(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as workdir:
        package, config, spec, params = _package(args, workdir)
        with api_errors(args.host):
            result = submit(
                client(args.host, args.namespace),
                package,
                args.experiment,
                params,
                args.run_name,
                args.namespace,
                args.service_account or config.kubeflow.service_account,
                remote_pipeline_root(config.pipeline_root),
            )
    print(
        f"submitted run {result.run_id} of {spec['pipelineInfo']['name']} "
        f"in experiment {args.experiment}"
    )
    return 0


def run_schedule(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as workdir:
        validate_cron(args.cron)
        package, config, spec, params = _package(args, workdir)
        name = spec["pipelineInfo"]["name"]
        with api_errors(args.host):
            job = schedule(
                client(args.host, args.namespace),
                package,
                args.experiment,
                args.cron,
                args.job_name or f"{name}-schedule",
                params,
                args.namespace,
                args.service_account or config.kubeflow.service_account,
                remote_pipeline_root(config.pipeline_root),
            )
    print(
        f"scheduled {name} as recurring run {job.recurring_run_id} ({args.cron}), "
        f"max concurrency 1, no catch-up"
    )
    return 0


def run_local(args: argparse.Namespace) -> int:
    from imgpipe.pipelines.kubeflow import local_docker
    from imgpipe.pipelines.pipeline import DATA_ROOT_PARAMETER

    with tempfile.TemporaryDirectory() as workdir:
        package, config, spec, params = _package(args, workdir)
        root = args.pipeline_root or config.pipeline_root
        if "://" in root:
            raise UserError(
                f"pipeline root {root}: kfp run-local keeps artifacts in a local folder; "
                "give --pipeline-root DIR"
            )
        declared = spec["root"].get("inputDefinitions", {}).get("parameters", {})
        data_root = params.get(
            DATA_ROOT_PARAMETER, declared.get(DATA_ROOT_PARAMETER, {}).get("defaultValue", "")
        )
        try:
            run_dir = local_docker.run_package(
                package,
                root,
                params,
                # A local trainer.weights file is read at its own path too.
                read_only=[p for p in (data_root, config.trainer.weights_file) if p],
                # The config the package was compiled from names it (--config).
                writable=[config.serving_dir],
                network=args.network,
                workers_network=args.workers_network,
            )
        except local_docker.LocalRunError as e:
            raise UserError(str(e)) from None
    from imgpipe.pipelines import run_summary

    result = local_docker.run_result(spec, run_dir)
    for line in run_summary.summary_lines(result, config):
        print(line)
    print(f"ran {spec['pipelineInfo']['name']} in containers; artifacts in {run_dir}")
    return 0 if result.pushed else NOT_PUSHED_EXIT_CODE
