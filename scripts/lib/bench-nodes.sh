# Shared by the benchmark scripts that run their own keel-nodes (sourced,
# not run): starting a node and waiting for it, stopping process groups,
# and waiting until the nodes are idle.
#
# The sourcing script sets `node_bin` and `bench_bin` (the keel-node and
# keel-bench binaries) and `out` (its output folder), and defines `say` (a
# message to stderr). Every node runs in its own process group (setsid);
# its pid is added to `pids`, which `stop_nodes` stops. `bench` sets
# `status` to 1 when a run is not clean.

pids=()
declare -A node_addr node_pid
bench_pid=""
status=0

alive() { # PID: true while it runs (a zombie does not)
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [[ -n $state && $state != Z ]]
}

stop_group() { # PID: SIGTERM to its group, SIGKILL after 5 s
  local pid=$1
  if ! alive "$pid"; then
    { wait "$pid"; } 2>/dev/null || true
    return 0
  fi
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do
    alive "$pid" || break
    sleep 0.1
  done
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  { wait "$pid"; } 2>/dev/null || true
}

stop_nodes() { # stops every node started so far
  local pid
  for pid in ${pids[@]+"${pids[@]}"}; do stop_group "$pid"; done
}

# HTTP status of GET http://127.0.0.1:PORT/PATH, or nothing.
http_status() { # PORT PATH
  local status=""
  {
    exec 3<>"/dev/tcp/127.0.0.1/$1" &&
      printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nConnection: close\r\n\r\n' "$2" "$1" >&3 &&
      read -r -t 5 _ status _ <&3
    exec 3<&- 3>&-
  } 2>/dev/null || true
  echo "$status"
}

# Starts keel-node with DIR/config.yaml (output in DIR/node.out and
# DIR/node.err, appended) and waits until it listens and /healthz answers
# 200; then node_addr[NAME] is its HOST:PORT and node_pid[NAME] its pid.
# Exits the script if it does not come up.
start_keel_node() { # NAME DIR
  local name=$1 dir=$2 addr="" port pid
  : >"$dir/node.out"
  setsid "$node_bin" --config "$dir/config.yaml" >>"$dir/node.out" 2>>"$dir/node.err" &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 1 600); do
    addr=$(sed -n 's/^keel-node: listening on \([^ ]*\).*/\1/p' "$dir/node.out" 2>/dev/null | head -n 1) || addr=
    [[ -n $addr ]] && break
    if ! alive "$pid"; then
      say "keel-node ($name) exited before listening:"
      cat "$dir/node.out" "$dir/node.err" >&2
      exit 1
    fi
    sleep 0.1
  done
  [[ -n $addr ]] || { say "keel-node ($name) did not report its address"; exit 1; }
  port=${addr##*:}
  for _ in $(seq 1 100); do
    if [[ $(http_status "$port" /healthz) == 200 ]]; then
      node_addr[$name]=$addr
      node_pid[$name]=$pid
      return 0
    fi
    sleep 0.1
  done
  say "keel-node ($name) on $addr: /healthz never answered 200"; exit 1
}

# CPU ticks used so far by the nodes.
node_ticks() {
  local pid total=0 t
  for pid in ${pids[@]+"${pids[@]}"}; do
    t=$(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null) || t=0
    total=$((total + ${t:-0}))
  done
  echo "$total"
}

# Waits (at most 30 s) until the nodes together use less than a tenth of a
# core, so that a run does not pay for the backlog of the one before.
settle() {
  local hz a b
  hz=$(getconf CLK_TCK)
  for _ in $(seq 1 30); do
    a=$(node_ticks); sleep 1; b=$(node_ticks)
    ((b - a < hz / 10)) && return 0
  done
  say "the nodes did not settle within 30 s (going on)"
}

# keel-bench ARGS..., its JSON report into $out/runs/NAME.json (its output
# next to it); a run that fails or is not clean sets status=1.
bench() { # NAME ARGS...
  local name=$1 rc=0
  shift
  mkdir -p "$out/runs"
  "$bench_bin" "$@" --json-out "$out/runs/$name.json" >"$out/runs/$name.txt" 2>"$out/runs/$name.err" &
  bench_pid=$!
  { wait "$bench_pid"; } 2>/dev/null || rc=$?
  bench_pid=""
  if ((rc != 0)) || [[ ! -s $out/runs/$name.json ]]; then
    say "$name: exit $rc (1: not clean, see $out/runs/$name.txt)"
    ((rc > 1)) && cat "$out/runs/$name.err" >&2
    status=1
  fi
}

stop_bench() { # ends a keel-bench run still going (the script is ending)
  if [[ -n $bench_pid ]]; then kill -TERM "$bench_pid" 2>/dev/null || true; fi
}
