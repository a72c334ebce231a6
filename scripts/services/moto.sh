#!/usr/bin/env bash
# A local S3-compatible server (moto, every request serialised) for the S3 store tests.
#
#   scripts/services/moto.sh start STATE_DIR   start it, append PARQDB_TEST_S3_ENDPOINT to STATE_DIR/env
#   scripts/services/moto.sh stop STATE_DIR    stop the server started with the same STATE_DIR
#
# The server runs from a venv under ${PARQDB_TOOLS_DIR:-$HOME/.cache/parqdb-catalog}/moto-venv,
# created (pip, pinned version) on first use. It listens on 127.0.0.1 at a free port; its
# log is STATE_DIR/moto.log and its PID STATE_DIR/moto.pid. Any credentials and region are
# accepted. Buckets named lying-* ignore If-Match (see moto_serialised.py).
set -euo pipefail

MOTO_VERSION=5.2.5
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLS_DIR="${PARQDB_TOOLS_DIR:-$HOME/.cache/parqdb-catalog}"
VENV="$TOOLS_DIR/moto-venv"
WAIT_SECONDS=60

usage() {
    echo "usage: $0 start|stop STATE_DIR" >&2
    exit 2
}

ensure_venv() {
    if [[ -x "$VENV/bin/python" ]] &&
        [[ "$("$VENV/bin/python" -c 'import moto; print(moto.__version__)' 2>/dev/null)" == "$MOTO_VERSION" ]]; then
        return
    fi
    echo "moto.sh: installing moto[server]==$MOTO_VERSION into $VENV" >&2
    mkdir -p "$TOOLS_DIR"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION"
}

running_pid() {
    local pid_file="$1/moto.pid"
    [[ -f "$pid_file" ]] || return 1
    local pid
    pid="$(cat "$pid_file")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

start() {
    local state="$1"
    mkdir -p "$state"
    state="$(cd "$state" && pwd)"
    if pid="$(running_pid "$state")"; then
        echo "moto.sh: already running (PID $pid, state $state)" >&2
        return 0
    fi
    ensure_venv
    local port
    port="$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
    local log="$state/moto.log"
    nohup "$VENV/bin/python" "$HERE/moto_serialised.py" "$port" >"$log" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$state/moto.pid"

    local endpoint="http://127.0.0.1:$port"
    local deadline=$((SECONDS + WAIT_SECONDS))
    until "$VENV/bin/python" - "$endpoint" <<'PY' 2>/dev/null
import sys, urllib.request
urllib.request.urlopen(sys.argv[1] + "/moto-api/", timeout=2).read()
PY
    do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "moto.sh: the server exited before answering; log tail ($log):" >&2
            tail -n 30 "$log" >&2 || true
            rm -f "$state/moto.pid"
            exit 1
        fi
        if ((SECONDS >= deadline)); then
            echo "moto.sh: no answer from $endpoint within ${WAIT_SECONDS}s; log tail ($log):" >&2
            tail -n 30 "$log" >&2 || true
            kill "$pid" 2>/dev/null || true
            rm -f "$state/moto.pid"
            exit 1
        fi
        sleep 0.5
    done
    echo "PARQDB_TEST_S3_ENDPOINT=$endpoint" >>"$state/env"
    echo "moto.sh: serving $endpoint (PID $pid)" >&2
}

stop() {
    local state="$1"
    local pid
    if ! pid="$(running_pid "$state")"; then
        echo "moto.sh: not running (state $state)" >&2
        rm -f "$state/moto.pid"
        return 0
    fi
    kill "$pid"
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$state/moto.pid"
    echo "moto.sh: stopped PID $pid" >&2
}

[[ $# -eq 2 ]] || usage
case "$1" in
    start) start "$2" ;;
    stop) stop "$2" ;;
    *) usage ;;
esac
