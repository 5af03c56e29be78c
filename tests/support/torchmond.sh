# shellcheck shell=bash disable=SC2034  # torchmond_* are for the script that sources this
# The one way shell scripts read torchmond's ready line (sourced, bash):
# deploy/dev/run-demo.sh and tests/gpu/cuda_loop_check.sh. The ready line
# is the first line torchmond prints on stdout, once every listener is
# bound (docs/operating.md, "Logs"):
#
#   torchmond ready grpc=<addr>[,<addr>...] metrics=<host:port>
#
# The C++ and Python launchers (tests/support/daemon_launch.h,
# tests/support/torchmond.py) read it by the same rule, and
# tests/python/test_ready_line.py holds all three to the same cases.

# torchmond_parse_ready LINE: if LINE is a ready line (the prefix, a
# non-empty grpc= list, a non-empty metrics=), sets torchmond_grpc (the
# addresses, comma-separated, in order) and torchmond_metrics (host:port)
# and returns 0; else returns 1 and sets both empty.
torchmond_parse_ready() {
  local line=${1%$'\n'} part
  local -a parts
  torchmond_grpc=
  torchmond_metrics=
  [[ $line == "torchmond ready "* ]] || return 1
  read -r -a parts <<<"${line#torchmond ready }"
  for part in ${parts[@]+"${parts[@]}"}; do
    case $part in
      grpc=*) torchmond_grpc=${part#grpc=} ;;
      metrics=*) torchmond_metrics=${part#metrics=} ;;
    esac
  done
  # Empty entries of the list count for nothing, as in C++ and Python.
  if [[ -z ${torchmond_grpc//,/} || -z $torchmond_metrics ]]; then
    torchmond_grpc=
    torchmond_metrics=
    return 1
  fi
}

# torchmond_wait_ready FILE PID [TIMEOUT_S]: waits (default 10 s) until the
# first line of FILE, where torchmond PID writes its stdout, is whole,
# then parses it (torchmond_parse_ready) and sets torchmond_ready to it.
# Returns 1 if PID exits first, the time passes, or the line is not a
# ready line.
torchmond_wait_ready() {
  local file=$1 pid=$2 deadline=$((SECONDS + ${3:-10})) first
  torchmond_ready=
  while :; do
    # read succeeds once the line's newline is written.
    if IFS= read -r first 2>/dev/null <"$file"; then
      torchmond_parse_ready "$first" || return 1
      torchmond_ready=$first
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || return 1
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}
