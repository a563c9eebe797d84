"""Compile-time Kubeflow Pipelines v2 support: settings, and the compiler to YAML.

Nothing here runs inside a pipeline step; that code is in imgpipe.pipelines.container.
"""
