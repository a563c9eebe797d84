"""The package's structure: one namespace, no import cycles, no sideways reach-ins, and
an installable distribution that claims no generic top-level name."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile

import pytest
import tomllib

from tests import import_graph, waiting

pytestmark = pytest.mark.unit


def test_the_import_graph_has_no_cycles_and_keeps_its_floors():
    edges = import_graph.graph()
    assert len(edges) > 50, "the graph found too few modules to mean anything"
    assert import_graph.cycles(edges) == []
    assert import_graph.rule_breaks(edges) == []
    assert import_graph.foreign_top_level_imports() == []


def test_the_checks_catch_a_cycle_and_a_sideways_reach():
    edges = {
        "imgpipe.components.trainer.a": {"imgpipe.components.trainer.b"},
        "imgpipe.components.trainer.b": {
            "imgpipe.components.trainer.a",
            "imgpipe.components.image_statistics.x",
        },
        "imgpipe.components.common.c": {"imgpipe.components.trainer.a"},
        "imgpipe.pipelines.kubeflow.compiler": {
            "imgpipe.pipelines.container.entrypoint",
            "imgpipe.components.trainer.several_workers",
            "imgpipe.components.trainer.several_workers.choice",
        },
        "imgpipe.pipelines.cli.run": {
            "imgpipe.components.image_example_gen",
            "imgpipe.components.image_example_gen.data_warnings",
        },
    }
    assert import_graph.cycles(edges) == [
        ["imgpipe.components.trainer.a", "imgpipe.components.trainer.b"]
    ]
    breaks = import_graph.rule_breaks(edges)
    assert any("trainer.b -> imgpipe.components.image_statistics.x" in b for b in breaks)
    assert any("common.c -> imgpipe.components.trainer.a" in b for b in breaks)
    assert any("compiler -> imgpipe.pipelines.container" in b for b in breaks)
    reach_ins = [b for b in breaks if b.startswith("imgpipe.pipelines.cli.run ->")]
    assert reach_ins == [
        "imgpipe.pipelines.cli.run -> imgpipe.components.image_example_gen.data_warnings: "
        "other rooms use a component through its front door (its __init__)"
    ]
    # A sub-package with a front door of its own is one; the modules behind it are not.
    assert "imgpipe.components.trainer.several_workers" in import_graph.sub_front_doors()
    through_doors = [b for b in breaks if "several_workers" in b]
    assert through_doors == [
        "imgpipe.pipelines.kubeflow.compiler -> "
        "imgpipe.components.trainer.several_workers.choice: "
        "other rooms use a component through its front door (its __init__)"
    ]
    # A sub-package whose __init__ is no front door is not one.
    assert import_graph.rule_breaks(
        {"imgpipe.pipelines.cli.run": {"imgpipe.components.trainer.several_workers"}}, set()
    ) == [
        "imgpipe.pipelines.cli.run -> imgpipe.components.trainer.several_workers: "
        "other rooms use a component through its front door (its __init__)"
    ]


def test_pyproject_lists_every_package_folder():
    with open(os.path.join(import_graph.ROOT, "pyproject.toml"), "rb") as f:
        setuptools = tomllib.load(f)["tool"]["setuptools"]
    packages = {
        name
        for name in import_graph.modules()
        if import_graph.modules()[name].endswith("__init__.py")
    }
    assert set(setuptools["packages"]) == packages
    assert setuptools["package-dir"] == {
        package: folder for folder, package in import_graph.PACKAGE_DIRS.items()
    }


def test_the_wheel_installs_under_the_imgpipe_namespace_only(tmp_path):
    # Built from a copy of what the Dockerfile copies, so the checkout gets no build files.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(import_graph.ROOT, name), source / name)
    for name in import_graph.PACKAGE_DIRS:
        shutil.copytree(
            os.path.join(import_graph.ROOT, name),
            source / name,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(tmp_path),
            str(source),
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"imgpipe"}
    assert "imgpipe/components/trainer/task.py" in names
    assert "imgpipe/components/trainer/several_workers/worker.py" in names
    assert "imgpipe/pipelines/container/entrypoint.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert (
        "imgpipe = imgpipe.pipelines.cli:run_command"
        in zipfile.ZipFile(wheel).read(entry_points).decode()
    )


FRONT_DOORS = {
    "imgpipe.components.image_example_gen": {"ImageExampleGen", "ImageOptions", "OutputOptions"},
    "imgpipe.components.image_statistics": {"ImageStatistics", "StatisticsConfig"},
    "imgpipe.components.trainer": {"ImageTrainer", "TrainerConfig"},
    # The sub-package's own door, which pipelines/kubeflow reads at compile time.
    "imgpipe.components.trainer.several_workers": {
        "DOCKER_LAUNCHER",
        "KUBERNETES_LAUNCHER",
        "TRAINER_POD_FIELDS",
        "WORKERS_DOCKER_NETWORK_ENV",
        "WORKERS_DOCKER_SOCKET",
        "WORKERS_LAUNCHER_ENV",
    },
    "imgpipe.components.evaluator": {"ImageEvaluator", "EvaluatorConfig"},
    "imgpipe.components.pusher": {"ImagePusher"},
    "imgpipe.pipelines": {"PipelineConfig"},
}


def test_each_component_package_is_its_own_front_door_and_loads_tfx_only_when_asked():
    """`from imgpipe.components.trainer import TrainerConfig` neither needs the file layout
    nor loads TFX; the component class, when asked for, is the one its module defines;
    every name a front door (each component package's, trainer.several_workers' and
    imgpipe.pipelines') lists
    resolves."""
    code = (
        "import importlib, sys\n"
        f"doors = {FRONT_DOORS!r}\n"
        "for package, names in doors.items():\n"
        "    module = importlib.import_module(package)\n"
        "    assert names <= set(module.__all__), (package, module.__all__)\n"
        "    config = [n for n in names if not n.startswith('Image') or 'Options' in n]\n"
        "    [getattr(module, n) for n in config]\n"
        "print(sorted({'tfx', 'tensorflow'} & set(sys.modules)))\n"
        "from imgpipe.components.trainer import ImageTrainer\n"
        "from imgpipe.components.trainer.component import ImageTrainer as defined\n"
        "print(ImageTrainer is defined)\n"
        "import pkgutil, imgpipe.components as c\n"
        "rooms = [f'imgpipe.components.{m.name}' for m in pkgutil.iter_modules(c.__path__)]\n"
        "for room in [*rooms, 'imgpipe.pipelines']:\n"
        "    if not room.endswith('.common'):\n"
        "        door = importlib.import_module(room)\n"
        "        [getattr(door, n) for n in door.__all__]\n"
        "print('resolved')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=waiting.COMMAND_S
    )
    assert result.stdout.split() == ["[]", "True", "resolved"], result.stderr


def test_a_front_door_loads_what_it_imports_for_the_type_checker_and_nothing_else(tmp_path):
    """The names a door serves are its `if TYPE_CHECKING:` imports, each from its own
    modules; an unknown name is an AttributeError, an import from elsewhere an ImportError."""
    door = tmp_path / "door_sample"
    door.mkdir()
    (door / "inner.py").write_text("VALUE = 7\n")
    head = (
        "from typing import TYPE_CHECKING\n"
        "from imgpipe.components.common.runtime import front_door\n"
        "if TYPE_CHECKING:\n"
    )
    (door / "__init__.py").write_text(
        f"{head}    from door_sample.inner import VALUE as SEVEN\n"
        "if not TYPE_CHECKING:\n"
        "    __getattr__ = front_door.lazy(__name__)\n"
    )
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "import door_sample\n"
        "loaded = lambda: 'door_sample.inner' in sys.modules\n"
        "print(loaded(), door_sample.SEVEN, loaded())\n"
        "try:\n"
        "    door_sample.VALUE\n"
        "except AttributeError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.splitlines() == [
        "False 7 True",
        "module 'door_sample' has no attribute 'VALUE'",
    ], result.stderr
    (door / "__init__.py").write_text(
        f"{head}    from os import sep\n"
        "if not TYPE_CHECKING:\n"
        "    __getattr__ = front_door.lazy(__name__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code.replace("door_sample.SEVEN", "0")],
        capture_output=True,
        text=True,
    )
    assert (
        "a front door imports only its own modules under TYPE_CHECKING, not 'from os import sep'"
        in (result.stderr)
    )


def test_private_library_names_live_in_their_one_home():
    """TFX, KFP, Beam and the pytest plugins' private names are used in
    pipelines/tfx_patches.py (and tests/plugin_patches.py) alone, each with its reason."""
    assert import_graph.private_api_outside_its_homes() == []


def test_the_private_name_check_finds_each_kind_of_use(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from tfx.components.trainer import executor as trainer_executor\n"
        "from tfx.orchestration.portable import runtime_parameter_utils\n"
        "from apache_beam.options import pipeline_options\n"
        "from kfp.dsl import _secret\n"
        "import os\n"
        "class E(trainer_executor.GenericExecutor):\n"
        "    def _GetFnArgs(self):\n"
        "        return os._exit\n"
        "parser = pipeline_options._BeamArgumentParser()\n"
        "from kfp.local import docker_task_handler\n"
    )
    assert import_graph.private_names_used(str(sample)) == [
        "2: from tfx.orchestration.portable",
        "4: kfp.dsl._secret",
        "7: overrides E._GetFnArgs",
        "9: pipeline_options._BeamArgumentParser",
        "10: kfp.local.docker_task_handler",
    ]


def test_the_package_ships_only_what_the_product_runs():
    """Every module is reached from the CLI, a component or the pod's entrypoint: test
    infrastructure (the Flink container cluster) and recipes (DALI's pipeline) live in
    tests/ and benchmarks/, not in the wheel."""
    assert import_graph.unreachable_modules() == []
