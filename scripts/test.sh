#!/usr/bin/env bash
# The whole test suite, on a fresh machine or a developer's:
#   1. installs (on first use) faketime and the local services the tests need, and starts
#      the services: an S3-compatible server (moto behind a request-serialising wrapper)
#      and DynamoDB Local, each on 127.0.0.1 at a free port;
#   2. checks formatting and clippy (the workspace, the functions as deployed, the library
#      without optional features), and validates the SAM template offline (cfn-lint and
#      checkov on the template and its plain-CloudFormation expansion);
#   3. runs every test of the workspace against real files and the real services;
#   4. stops the services by PID, whatever happened.
# Set PARQDB_TEST_S3_ENDPOINT / PARQDB_TEST_DYNAMODB_ENDPOINT yourself (e.g. MinIO and
# DynamoDB Local from infra/docker-compose.yml) to use running services instead.
#
# `scripts/test.sh --fast` is the fast tier for development (under 10 minutes on a warm
# machine; README.md): formatting, one clippy, the unit and doc tests, and the integration
# tests the fast tier takes in tests/it/tiers.txt (memory and local files, at
# PARQDB_TEST_SCALE=quick), with no service, no function binary and no libfaketime.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ "${1:-}" == "--fast" ]]; then
    # The integration tests' filters: every `fast` pattern, and `--skip` every `full` one.
    filters=()
    while read -r tier pattern; do
        case "$tier" in
            fast) filters+=("$pattern") ;;
            full) filters+=(--skip "$pattern") ;;
        esac
    done < <(grep -E '^(fast|full) ' tests/it/tiers.txt)
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets --locked -- -D warnings
    cargo test --workspace --lib --bins --locked
    cargo test --workspace --doc --locked
    # No service: a test of the fast tier that reaches for one fails, it does not skip.
    env -u PARQDB_TEST_S3_ENDPOINT -u PARQDB_TEST_DYNAMODB_ENDPOINT PARQDB_TEST_SCALE=quick \
        cargo test --test it --locked -- "${filters[@]}"
    exit 0
elif [[ $# -gt 0 ]]; then
    echo "usage: scripts/test.sh [--fast]" >&2
    exit 2
fi

# The whole suite builds once, as on a fresh machine: no incremental caches, a third of
# the target directory (1.5 of 5.2 GB measured on a fresh build), which a small CI disk
# cannot spare.
export CARGO_INCREMENTAL=0

state="$(mktemp -d "${TMPDIR:-/tmp}/parqdb-test.XXXXXX")"
started=()
stop_services() {
    local status=$?
    for service in "${started[@]}"; do
        scripts/services/"$service".sh stop "$state" || true
    done
    rm -rf "$state/fuzz-target"
    exit "$status"
}
trap stop_services EXIT

start() {
    local service="$1" variable="$2"
    if [[ -n "${!variable:-}" ]]; then
        echo "test.sh: using $variable=${!variable}" >&2
        return
    fi
    started+=("$service")
    if ! scripts/services/"$service".sh start "$state"; then
        echo "test.sh: the $service service could not start; the tests that need it cannot run" >&2
        exit 1
    fi
}

# The black-box restore drill (tests/it/cli/restore_drill.rs) moves the CLI's clock with
# libfaketime: install Debian's package on first use.
if ! command -v faketime >/dev/null 2>&1; then
    sudo=()
    [[ "$(id -u)" -ne 0 ]] && sudo=(sudo)
    if command -v apt-get >/dev/null 2>&1; then
        "${sudo[@]}" apt-get install -y -qq faketime >/dev/null ||
            { "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq faketime >/dev/null; }
    fi
    if ! command -v faketime >/dev/null 2>&1; then
        echo "test.sh: faketime (libfaketime) is needed and could not be installed; install it (Debian: apt-get install faketime)" >&2
        exit 1
    fi
fi

start moto PARQDB_TEST_S3_ENDPOINT
start dynamodb PARQDB_TEST_DYNAMODB_ENDPOINT
if [[ -f "$state/env" ]]; then
    set -a
    # shellcheck disable=SC1091
    . "$state/env"
    set +a
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The workspace build unifies features (the functions get the CLI's); lint the functions
# as they are deployed (the library's lambda, s3 and dynamodb features only), and the
# library with no optional feature at all.
cargo clippy -p parqdb-catalog-functions --bins --locked -- -D warnings
cargo clippy -p parqdb-catalog --lib --no-default-features --locked -- -D warnings
scripts/check-infra.sh
# The fuzz targets always build (running them needs nightly; see fuzz/README.md). Their
# bodies also run on stable in tests/it/fuzz_bodies.rs.
# They have their own dependency graph (the library without the AWS SDKs: about a minute):
# check them in a target of their own, removed before the test build needs the disk.
cargo check --manifest-path fuzz/Cargo.toml --target-dir "$state/fuzz-target"
rm -rf "$state/fuzz-target"
# One test more at a time than there are cores: many tests wait on the S3-compatible
# server, which answers one request at a time, while others (the model check, the
# simulation) need a core; the extra thread keeps every core busy. `RUST_TEST_THREADS`
# overrides it.
cargo test --workspace --locked --no-fail-fast -- \
    --test-threads "${RUST_TEST_THREADS:-$(($(nproc) + 1))}"
