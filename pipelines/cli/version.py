"""`imgpipe version`: the versions of the stack in use."""

from __future__ import annotations

import argparse

DISTRIBUTIONS = (
    "tfx-image-pipeline",
    "tfx",
    "tensorflow",
    "tensorflow-data-validation",
    "apache-beam",
    "kfp",
    "kfp-kubernetes",
    "ml-metadata",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("version", help="print the versions of the stack in use")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from importlib import metadata

    for dist in DISTRIBUTIONS:
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            version = "not installed" if dist != "tfx-image-pipeline" else "source checkout"
        print(f"{dist:28s} {version}")
    return 0
