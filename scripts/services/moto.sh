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
SERVICE=moto
ENDPOINT_VAR=PARQDB_TEST_S3_ENDPOINT
WAIT_SECONDS=60
POLL_SECONDS=0.5
STOP_TENTHS=50

# shellcheck source=scripts/services/lib.sh
. "$HERE/lib.sh"

prepare() {
    if [[ -x "$VENV/bin/python" ]] &&
        [[ "$("$VENV/bin/python" -c 'import moto; print(moto.__version__)' 2>/dev/null)" == "$MOTO_VERSION" ]]; then
        return
    fi
    echo "moto.sh: installing moto[server]==$MOTO_VERSION into $VENV" >&2
    mkdir -p "$TOOLS_DIR"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION"
}

launch() {
    nohup "$VENV/bin/python" "$HERE/moto_serialised.py" "$1" >"$2" 2>&1 </dev/null &
}

answers() {
    "$VENV/bin/python" - "$1" <<'PY' 2>/dev/null
import sys, urllib.request
urllib.request.urlopen(sys.argv[1] + "/moto-api/", timeout=2).read()
PY
}

service_main "$@"
