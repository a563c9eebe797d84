"""The pipeline over the components, its configuration and its runners.

The public names, loaded on first use (the pipeline loads TFX); the rest of the
package (the CLI, the Kubeflow compiler, the pod's entrypoint, the engines) is reached
through the `imgpipe` command:
  from imgpipe.pipelines import create_pipeline, load_config
  pipeline = create_pipeline(load_config("pipeline.yaml"))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from imgpipe.components.common.runtime import front_door

if TYPE_CHECKING:
    from imgpipe.pipelines.config import PipelineConfig
    from imgpipe.pipelines.config import load as load_config
    from imgpipe.pipelines.kubeflow.compiler import compile_to_file
    from imgpipe.pipelines.local_runner import run as run_locally
    from imgpipe.pipelines.pipeline import create_components, create_pipeline

__all__ = [
    "PipelineConfig",
    "compile_to_file",
    "create_components",
    "create_pipeline",
    "load_config",
    "run_locally",
]
# mypy reads the names above; a misspelt one fails the type check.
if not TYPE_CHECKING:
    __getattr__ = front_door.lazy(__name__)
