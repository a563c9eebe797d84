"""The openAPIV3Schema of a CRD's served version, every description left out: what
bin/refresh-crds writes to tests/crds/ (the descriptions are 80% of the TFJob CRD's
600 kB and no check reads them).

  python -m tests.crds.extract_schema CRD_FILE MODULE RELEASE COMMIT PATH VERSION > SCHEMA_FILE

MODULE@RELEASE is the Go module the CRD came from (its commit COMMIT), PATH the CRD's
file inside it, VERSION the API version whose schema is kept (v1 for the TFJob,
v1alpha2 for the JobSet).
"""

from __future__ import annotations

import hashlib
import sys

import yaml


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


def served_schema(crd: dict, version: str) -> dict:
    """The schema of `version`, which the CRD must serve.

    Raises:
      ValueError: the CRD does not serve that version, naming the ones it does.
    """
    served = [v for v in crd["spec"]["versions"] if v["name"] == version and v.get("served")]
    if len(served) != 1:
        raise ValueError(
            f"{crd['metadata']['name']} serves no version {version}; it has "
            f"{[v['name'] for v in crd['spec']['versions'] if v.get('served')]}"
        )
    return without_descriptions(served[0]["schema"]["openAPIV3Schema"])


def header(
    crd: dict, text: bytes, module: str, release: str, commit: str, path: str, version: str
) -> str:
    """The comment that says where the schema came from, byte for byte."""
    generator = crd["metadata"].get("annotations", {}).get("controller-gen.kubebuilder.io/version")
    return (
        f"# The openAPIV3Schema of {crd['metadata']['name']} ({crd['spec']['group']}/{version}) "
        f"as {release}\n"
        f"# of {module} serves it: {path} of\n"
        f"# {module}@{release} (commit {commit},\n"
        f"# controller-gen {generator}, sha256 {hashlib.sha256(text).hexdigest()}), fetched\n"
        "# from the Go module proxy by bin/refresh-crds. Only the descriptions are left out.\n"
    )


def main(crd_file: str, module: str, release: str, commit: str, path: str, version: str) -> None:
    with open(crd_file, "rb") as f:
        text = f.read()
    crd = yaml.safe_load(text)
    schema = served_schema(crd, version)
    sys.stdout.write(header(crd, text, module, release, commit, path, version))
    yaml.safe_dump(schema, sys.stdout, sort_keys=True, width=100)


if __name__ == "__main__":
    main(*sys.argv[1:])
