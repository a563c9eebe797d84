"""Builds strict_jpeg.c into the library that strict_jpeg loads.

    python -m imgpipe.components.image_statistics.strict_jpeg_build [--out DIR]

Without --out, the library goes to the artifact cache ($IMGPIPE_ARTIFACTS, set by
bin/in-env), in a folder named by the source's hash, where strict_jpeg looks for it;
`make env` runs this. The Dockerfile builds it into the package folder instead. Needs a
C compiler and libjpeg's headers: the system's (libjpeg62-turbo-dev), or that package
fetched with `apt-get download` into the artifact cache when the system has none.
Standard library only, so it runs before the package is installed.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "strict_jpeg.c")
LIBRARY_NAME = "libimgpipe_strict_jpeg.so"
ARTIFACTS_ENV = "IMGPIPE_ARTIFACTS"
HEADERS_PACKAGE = "libjpeg62-turbo-dev"
# The runtime library TensorFlow's decoder is matched against (tests/test_strict_jpeg.py).
RUNTIME_LIBRARY = "libjpeg.so.62"
# -ffp-contract=off: the resize must round as TensorFlow's kernel does, with no fused
# multiply-adds.
COMPILE_FLAGS = ("-O2", "-ffp-contract=off", "-fPIC", "-shared", "-Wall", "-Werror")


def source_key() -> str:
    """The source's and the flags' hash: a change to either builds a new library."""
    with open(SOURCE, "rb") as f:
        return hashlib.sha256(f.read() + " ".join(COMPILE_FLAGS).encode()).hexdigest()[:16]


def cached_library_path(artifacts: str) -> str:
    """Where the library built from this source lives in the artifact cache."""
    return os.path.join(artifacts, f"imgpipe-strict-jpeg-{source_key()}", LIBRARY_NAME)


def _header_dirs(artifacts: str | None) -> list[str]:
    """-I folders holding jpeglib.h and jconfig.h: none for the system's, else the fetched
    package's (fetched now when missing)."""
    if os.path.exists("/usr/include/jpeglib.h"):
        return []
    if artifacts is None:
        raise SystemExit(
            f"strict_jpeg_build: error: no jpeglib.h; install {HEADERS_PACKAGE} "
            "(apt-get install libjpeg62-turbo-dev) or run inside bin/in-env"
        )
    fetched = sorted(glob.glob(os.path.join(artifacts, f"{HEADERS_PACKAGE}-*", "root")))
    if not fetched:
        fetched = [_fetch_headers(artifacts)]
    root = fetched[-1]
    return [os.path.join(root, "usr/include"), os.path.join(root, "usr/include/x86_64-linux-gnu")]


def _fetch_headers(artifacts: str) -> str:
    version = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "libjpeg62-turbo"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    folder = os.path.join(artifacts, f"{HEADERS_PACKAGE}-{version.split(':')[-1]}")
    os.makedirs(artifacts, exist_ok=True)
    partial = tempfile.mkdtemp(prefix=f"{HEADERS_PACKAGE}-", suffix=".partial", dir=artifacts)
    try:
        subprocess.run(
            ["apt-get", "download", "-qq", f"{HEADERS_PACKAGE}={version}"], cwd=partial, check=True
        )
        (deb,) = glob.glob(os.path.join(partial, "*.deb"))
        subprocess.run(["dpkg-deb", "-x", deb, os.path.join(partial, "root")], check=True)
        os.remove(deb)
        os.rename(partial, folder)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return os.path.join(folder, "root")


def build(out_path: str, artifacts: str | None, bundle_libjpeg: bool = False) -> str:
    """Compiles the library to out_path (atomically) and returns it.

    Args:
      bundle_libjpeg: also copy the system's libjpeg beside it, which it finds first
        (its run path is its own folder): for an image without that system package.
    """
    out_folder = os.path.dirname(out_path)
    os.makedirs(out_folder, exist_ok=True)
    includes = [f"-I{folder}" for folder in _header_dirs(artifacts)]
    partial = f"{out_path}.{os.getpid()}.partial"
    subprocess.run(
        ["cc", *COMPILE_FLAGS, *includes, "-o", partial, SOURCE]
        + ["-Wl,-rpath,$ORIGIN", f"-l:{RUNTIME_LIBRARY}", "-lm"],
        check=True,
    )
    if bundle_libjpeg:
        shutil.copy(_system_library(RUNTIME_LIBRARY), os.path.join(out_folder, RUNTIME_LIBRARY))
    os.replace(partial, out_path)
    return out_path


def _system_library(name: str) -> str:
    """The path the compiler's linker resolves `name` to."""
    return subprocess.run(
        ["cc", f"-print-file-name={name}"], capture_output=True, text=True, check=True
    ).stdout.strip()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="folder to build into (default: the artifact cache)")
    parser.add_argument(
        "--bundle-libjpeg", action="store_true", help=f"copy {RUNTIME_LIBRARY} beside it"
    )
    args = parser.parse_args(argv)
    artifacts = os.environ.get(ARTIFACTS_ENV)
    if args.out:
        out_path = os.path.join(args.out, LIBRARY_NAME)
    elif artifacts:
        out_path = cached_library_path(artifacts)
        if os.path.exists(out_path):
            return
    else:
        sys.exit(
            f"strict_jpeg_build: error: give --out, or run inside bin/in-env ({ARTIFACTS_ENV})"
        )
    print(build(out_path, artifacts, args.bundle_libjpeg))


if __name__ == "__main__":
    main()
