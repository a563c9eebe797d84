#!/bin/bash
# The Flink image's entrypoint (docs/flink-containers.md):
#   jobmanager | taskmanager   a Flink session cluster's JobManager or TaskManager
#   job-server [ARGS...]       Beam's Flink job server (FlinkJobServerDriver's flags)
#   anything else              run as given
# Each Flink role starts from the image's conf/ and this container's FLINK_PROPERTIES
# ("key: value" lines, each replacing the image's value of its key), and gets its heap,
# direct and metaspace limits from Flink's memory model, as Flink's own scripts do.
set -euo pipefail
FLINK_HOME="${FLINK_HOME:-/opt/flink}"
conf=/tmp/flink-conf

prepare_conf() {
  rm -rf "$conf" && cp -r "$FLINK_HOME/conf" "$conf"
  local line key
  while IFS= read -r line; do
    [ -n "${line//[[:space:]]/}" ] || continue
    key="${line%%:*}"
    awk -v key="$key" -F': ' '$1 != key' "$conf/config.yaml" >"$conf/config.yaml.new"
    echo "$line" >>"$conf/config.yaml.new"
    mv "$conf/config.yaml.new" "$conf/config.yaml"
  done <<<"${FLINK_PROPERTIES:-}"
}

run_flink() {  # run_flink JM|TM MAIN_CLASS [ARGS...]
  local role="$1" main="$2" results
  shift 2
  prepare_conf
  results="$(java -cp "$FLINK_HOME/lib/*" org.apache.flink.runtime.util.bash.BashJavaUtils \
    "GET_${role}_RESOURCE_PARAMS" --configDir "$conf" | sed -n 's/^BASH_JAVA_UTILS_EXEC_RESULT://p')"
  [ "$(wc -l <<<"$results")" = 2 ] || { echo "Flink's memory calculation failed" >&2; exit 1; }
  # Word splitting wanted: options and properties are space-separated lists.
  # shellcheck disable=SC2046
  exec java $(cat "$conf/java-options") $(sed -n 1p <<<"$results") \
    -Dlog4j.configurationFile="$conf/log4j-console.properties" \
    -cp "$FLINK_HOME/lib/*" "$main" --configDir "$conf" $(sed -n 2p <<<"$results") "$@"
}

case "${1:-help}" in
  jobmanager)
    shift
    run_flink JM org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint "$@" ;;
  taskmanager)
    shift
    run_flink TM org.apache.flink.runtime.taskexecutor.TaskManagerRunner "$@" ;;
  job-server)
    shift
    exec java -cp "$BEAM_JOB_SERVER_HOME/lib/*" org.apache.beam.runners.flink.FlinkJobServerDriver "$@" ;;
  help)
    echo "usage: docker-entrypoint.sh (jobmanager|taskmanager|job-server [ARGS...]|COMMAND...)" ;;
  *)
    exec "$@" ;;
esac
