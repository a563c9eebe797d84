"""The openAPIV3Schema of a CRD's served version, every description left out: what
bin/refresh-crds writes to tests/crds/ (the descriptions are 80% of the TFJob CRD's
600 kB and no check reads them).

  python -m tests.crds.extract_schema CRD_FILE RELEASE COMMIT > SCHEMA_FILE
"""

from __future__ import annotations

import hashlib
import os
import sys

import yaml

VERSION = "v1"


def without_descriptions(node):
    """`node` with every schema's `description` removed; a property that happens to be
    named "description" (a schema, not a string) is kept."""
    if isinstance(node, dict):
        return {
            k: without_descriptions(v)
            for k, v in node.items()
            if not (k == "description" and isinstance(v, str))
        }
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


def served_schema(crd: dict, version: str = VERSION) -> dict:
    (entry,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return without_descriptions(entry["schema"]["openAPIV3Schema"])


def main(crd_file: str, release: str, commit: str) -> None:
    with open(crd_file, "rb") as f:
        text = f.read()
    crd = yaml.safe_load(text)
    name = crd["metadata"]["name"]
    generator = crd["metadata"].get("annotations", {}).get("controller-gen.kubebuilder.io/version")
    sys.stdout.write(
        f"# The openAPIV3Schema of {name} ({crd['spec']['group']}/{VERSION}) as the Training\n"
        f"# Operator {release} serves it: manifests/base/crds/{os.path.basename(crd_file)} of\n"
        f"# github.com/kubeflow/training-operator@{release} (commit {commit},\n"
        f"# controller-gen {generator}, sha256 {hashlib.sha256(text).hexdigest()}), fetched\n"
        "# from the Go module proxy by bin/refresh-crds. Only the descriptions are left out.\n"
    )
    yaml.safe_dump(served_schema(crd), sys.stdout, sort_keys=True, width=100)


if __name__ == "__main__":
    main(*sys.argv[1:])
