# What the service scripts of this directory share (sourced, not run): starting a local
# server on a free port of 127.0.0.1, waiting until it answers, recording its endpoint in
# STATE_DIR/env, and stopping it by the PID recorded in STATE_DIR.
#
# A script sets, before it calls `service_main "$@"`:
#   SERVICE        its name: the files STATE_DIR/$SERVICE.pid and STATE_DIR/$SERVICE.log,
#                  and the prefix of its messages ($SERVICE.sh)
#   ENDPOINT_VAR   the variable appended to STATE_DIR/env (ENDPOINT_VAR=http://127.0.0.1:PORT)
#   WAIT_SECONDS   how long the server may take to answer after it was started
#   POLL_SECONDS   the pause between two checks whether it answers
#   STOP_TENTHS    how many tenths of a second a stopped server may take to exit before
#                  it is killed
# and defines:
#   prepare              make sure the server can run (install it on first use)
#   launch PORT LOG      start the server in the background (`$!` its PID) on PORT,
#                        writing its output to LOG
#   answers ENDPOINT     whether the server answers at ENDPOINT
#   is_server PID        (optional) whether the live process PID is the server itself

usage() {
    echo "usage: $0 start|stop STATE_DIR" >&2
    exit 2
}

# Every live process is taken for the server unless the script says how to tell.
is_server() {
    true
}

# The PID of the server recorded in the state directory $1, if it is still running.
running_pid() {
    local pid_file="$1/$SERVICE.pid"
    [[ -f "$pid_file" ]] || return 1
    local pid
    pid="$(cat "$pid_file")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && is_server "$pid" && echo "$pid"
}

# A port of 127.0.0.1 that nothing listens on.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Give up on the server $2 (state directory $1, log $3): print the log's tail, kill it if
# it still runs, forget its PID, and exit.
give_up() {
    local state="$1" pid="$2" log="$3"
    tail -n 30 "$log" >&2 || true
    kill "$pid" 2>/dev/null || true
    rm -f "$state/$SERVICE.pid"
    exit 1
}

start() {
    local state="$1"
    mkdir -p "$state"
    state="$(cd "$state" && pwd)"
    local pid
    if pid="$(running_pid "$state")"; then
        echo "$SERVICE.sh: already running (PID $pid, state $state)" >&2
        return 0
    fi
    prepare
    local port
    port="$(free_port)"
    local log="$state/$SERVICE.log"
    launch "$port" "$log"
    pid=$!
    echo "$pid" >"$state/$SERVICE.pid"

    local endpoint="http://127.0.0.1:$port"
    local deadline=$((SECONDS + WAIT_SECONDS))
    until answers "$endpoint"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "$SERVICE.sh: the server exited before answering; log tail ($log):" >&2
            give_up "$state" "$pid" "$log"
        fi
        if ((SECONDS >= deadline)); then
            echo "$SERVICE.sh: no answer from $endpoint within ${WAIT_SECONDS}s; log tail ($log):" >&2
            give_up "$state" "$pid" "$log"
        fi
        sleep "$POLL_SECONDS"
    done
    echo "$ENDPOINT_VAR=$endpoint" >>"$state/env"
    echo "$SERVICE.sh: serving $endpoint (PID $pid)" >&2
}

stop() {
    local state="$1"
    local pid
    if ! pid="$(running_pid "$state")"; then
        echo "$SERVICE.sh: not running (state $state)" >&2
        rm -f "$state/$SERVICE.pid"
        return 0
    fi
    kill "$pid"
    for _ in $(seq 1 "$STOP_TENTHS"); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$state/$SERVICE.pid"
    echo "$SERVICE.sh: stopped PID $pid" >&2
}

# `start STATE_DIR` or `stop STATE_DIR`.
service_main() {
    [[ $# -eq 2 ]] || usage
    case "$1" in
        start) start "$2" ;;
        stop) stop "$2" ;;
        *) usage ;;
    esac
}
