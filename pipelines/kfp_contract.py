"""What the compiled Kubeflow pipeline and the code in its pods agree on.

The compiler (imgpipe.pipelines.kubeflow) writes these names into the YAML; the pod
entrypoint (imgpipe.pipelines.container) reads them. Neither imports the other.
"""

from __future__ import annotations

# Every step runs `python -m ENTRYPOINT_MODULE <TFX's kubeflow_v2_run_executor args>`.
ENTRYPOINT_MODULE = "imgpipe.pipelines.container.entrypoint"
ENTRYPOINT_COMMAND = ("python", "-m", ENTRYPOINT_MODULE)

# How the entrypoint reaches artifact URIs (see container/entrypoint.py, fix 4).
ARTIFACT_IO_ENV = "IMGPIPE_KFP_ARTIFACT_IO"
MODE_AUTO, MODE_DIRECT, MODE_LOCAL = "auto", "direct", "local"
ARTIFACT_IO_MODES = (MODE_AUTO, MODE_DIRECT, MODE_LOCAL)

# KFP schema titles are "<namespace>.<Type>"; project artifact types whose TYPE_NAME is
# not of that form are compiled as "imgpipe.<TYPE_NAME>" (tfx_patches.py).
PROJECT_TITLE_PREFIX = "imgpipe."

# Retention on Kubeflow (pipelines/retention_runs.py): JSON the compiler writes into every
# step's environment. Each step records its run's folder in RUN_FOLDERS_PIPELINE_ROOT; the
# Pusher's step alone also has RUN_FOLDERS_COLLECT (the serving folder, the window's
# `trainer.spans` and the `retention` settings) and collects after its executor.
RUN_FOLDERS_ENV = "IMGPIPE_KFP_RUN_FOLDERS"
RUN_FOLDERS_PIPELINE_ROOT = "pipeline_root"
RUN_FOLDERS_SERVING_DIR = "serving_dir"
RUN_FOLDERS_COLLECT = "collect"
RUN_FOLDERS_TRAINER_SPANS = "trainer_spans"
RUN_FOLDERS_RETENTION = "retention"
