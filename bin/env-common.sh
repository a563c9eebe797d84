# Shared by bin/setup-env and bin/in-env: where the environment lives and how it is keyed.
# shellcheck shell=bash

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCK_FILE="$REPO_ROOT/requirements.lock"
# The lock's last section: the CUDA libraries of tensorflow[and-cuda], which the
# Dockerfile installs with the rest and the development environment (no GPU) leaves out.
LOCK_CUDA_SECTION="# ---- tensorflow[and-cuda]: the GPU image's CUDA libraries; bin/setup-env stops here"

# Bump when the rootfs recipe in bin/setup-env changes, so that a new rootfs is built.
ROOTFS_RECIPE_VERSION=1
ROOTFS_SUITE=trixie
ROOTFS_PACKAGES=python3,python3-venv,python3-dev,g++,ca-certificates
# Installed into the rootfs after debootstrap: a headless browser for the report test,
# and real photographs (opencv-doc) for the demo and the benchmarks.
ROOTFS_EXTRA_PACKAGES="chromium fonts-dejavu-core opencv-doc"

if [ "$(id -u)" = 0 ]; then
  ENV_CACHE="${IMGPIPE_ENV_CACHE:-/var/cache/tfx-image-pipeline}"
else
  ENV_CACHE="${IMGPIPE_ENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfx-image-pipeline}"
fi

# The lock up to its CUDA section: what the development environment installs.
lock_without_cuda() {
  awk -v stop="$LOCK_CUDA_SECTION" '$0 == stop { exit } { print }' "$LOCK_FILE"
}

lock_key() {
  if [ -f "$LOCK_FILE" ]; then sha256sum "$LOCK_FILE" | cut -c1-16; else echo unlocked; fi
}

rootfs_dir() {
  echo "$ENV_CACHE/rootfs-$ROOTFS_SUITE-v$ROOTFS_RECIPE_VERSION"
}

# The venv path inside the rootfs (rootfs mode) or on the host (venv mode).
rootfs_venv() {
  echo "/opt/imgpipe-venvs/$(lock_key)"
}

host_venv() {
  echo "$ENV_CACHE/venv-$(lock_key)"
}

# Artifacts fetched with the ordinary clients (mvn, go, apt-get, pip download) for the
# engine and platform tiers: each in its own <name>-<version> folder, so a new version
# is fetched beside the old one. Seen from inside the environment (IMGPIPE_ARTIFACTS,
# set by bin/in-env) and from the host (artifact_cache_host).
artifact_cache_env() {
  if [ "$(env_mode)" = rootfs ]; then echo /opt/imgpipe-artifacts; else echo "$ENV_CACHE/artifacts"; fi
}

artifact_cache_host() {
  if [ "$(env_mode)" = rootfs ]; then echo "$(rootfs_dir)/opt/imgpipe-artifacts"; else echo "$ENV_CACHE/artifacts"; fi
}

# The checkout's import root: imgpipe.components and imgpipe.pipelines are links to the
# top-level folders, as pyproject.toml's package-dir maps them in an installed
# distribution. Made on first use; build/ is ignored by git.
namespace_root() {
  local root="$REPO_ROOT/build/namespace"
  if [ ! -L "$root/imgpipe/components" ] || [ ! -L "$root/imgpipe/pipelines" ]; then
    mkdir -p "$root/imgpipe"
    ln -sfn ../../../components "$root/imgpipe/components"
    ln -sfn ../../../pipelines "$root/imgpipe/pipelines"
  fi
  echo "$root"
}

die() {
  echo "imgpipe env: $*" >&2
  exit 1
}

version_ge() {  # version_ge A B: A >= B, dotted numeric versions
  [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$2" ]
}

# venv: the host can load the stack (glibc >= 2.38, Python 3.10-3.13).
# rootfs: an older host; the stack runs in a Debian 13 chroot.
env_mode() {
  if [ -n "${IMGPIPE_ENV_MODE:-}" ]; then
    echo "$IMGPIPE_ENV_MODE"
    return
  fi
  local glibc py
  glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
  py="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)"
  if [ -n "$glibc" ] && version_ge "$glibc" 2.38 && [ -n "$py" ] \
      && version_ge "$py" 3.10 && ! version_ge "$py" 3.14; then
    echo venv
  else
    echo rootfs
  fi
}

# Directories that must never be bind-mounted over the rootfs's own.
is_system_dir() {
  case "$1" in
    /|/usr|/usr/*|/bin|/bin/*|/sbin|/sbin/*|/lib|/lib/*|/lib64|/lib64/*|/etc|/etc/*|\
    /proc|/proc/*|/sys|/sys/*|/dev|/dev/*|/run|/run/*|/var|/opt|/boot|/boot/*) return 0 ;;
  esac
  return 1
}

# chroot_exec ROOTFS CMD...: run CMD in ROOTFS with /proc, /dev, /sys, /tmp, the repo, the
# current directory and the top folder of each absolute path in CMD bind-mounted at their
# own paths, with everything mounted below them (recursive binds), so a path means the
# same inside and out: a tmpfs under /tmp is the same tmpfs in the chroot. The mounts live in their own mount namespace, a slave of
# the host's: they vanish when the command ends, however it ends, and neither they nor
# their unmounting reach the host, while the host's later mounts still show inside.
chroot_exec() {
  local rootfs="$1"; shift
  [ "$(id -u)" = 0 ] || die "the Debian 13 rootfs is entered with chroot, which needs root: run as root (sudo)"
  # The host's pip settings point at host-only paths; the rootfs has its own.
  env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PYTHONHOME -u LD_LIBRARY_PATH \
  unshare --mount --propagation slave -- bash -c '
    set -e
    rootfs="$1" repo="$2" cwd="$3"; shift 3
    for fs in proc dev sys; do mount --rbind "/$fs" "$rootfs/$fs"; done
    # The Docker engine'"'"'s socket, when one runs: `imgpipe kfp run-local` and the
    # container tests talk to it from inside.
    if [ -S /run/docker.sock ] && [ -d "$rootfs/run" ]; then
      [ -e "$rootfs/run/docker.sock" ] || : > "$rootfs/run/docker.sock"
      mount --bind /run/docker.sock "$rootfs/run/docker.sock"
    fi
    # The top folder of every absolute path among the arguments (PATH or --flag=PATH)
    # first, so an output named outside /tmp and the repository is not written into the
    # rootfs instead of where it was named.
    binds=()
    for arg in "$@"; do
      case "$arg" in --*=/*) arg="${arg#*=}" ;; esac
      case "$arg" in /*) ;; *) continue ;; esac
      # Normalised first (no ., .. or //), symlinks left alone: "/root//x" or "/./x"
      # must not bind / or all of /root.
      arg="$(realpath -m -s -- "$arg")"
      rest="${arg#/}"; top="/${rest%%/*}"
      case "$top" in
        /|/tmp|/lost+found) continue ;;
        # The rootfs keeps its own /root (HOME: its caches and settings): bind the
        # folder below it instead.
        /root)
          rest="${rest#root}"; rest="${rest#/}"
          [ -n "$rest" ] || continue
          top="/root/${rest%%/*}" ;;
      esac
      if [ ! -e "$top" ] && ! is_system_dir "$top"; then
        echo "bin/in-env: warning: $top does not exist here, so $arg is the environment'"'"'s own: create $top first to see it outside" >&2
      fi
      [ -d "$top" ] && [ ! -L "$top" ] && [ ! -L "$rootfs$top" ] || continue
      case " ${binds[*]} " in *" $top "*) ;; *) binds+=("$top") ;; esac
    done
    binds+=(/tmp "$repo")
    case "$cwd" in /tmp|/tmp/*|"$repo"|"$repo"/*) ;; *) binds+=("$cwd") ;; esac
    for dir in "${binds[@]}"; do
      if ! is_system_dir "$dir"; then
        mkdir -p "$rootfs$dir"
        mount --rbind "$dir" "$rootfs$dir"
      fi
    done
    exec chroot "$rootfs" /bin/bash -c "cd \"\$0\" 2>/dev/null || cd /; exec \"\$@\"" "$cwd" "$@"
  ' chroot_exec "$rootfs" "$REPO_ROOT" "$PWD" "$@"
}
export -f is_system_dir
