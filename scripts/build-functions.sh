#!/usr/bin/env bash
# The functions as Lambda runs them: a release build for arm64 (Graviton) with cargo-lambda,
# checked and measured. No Docker, no SAM; the same command `sam build` runs per function.
#
#   scripts/build-functions.sh            # arm64 (the template's default Architecture)
#   scripts/build-functions.sh --x86-64   # x86_64
#
#   1. installs (on first use) cargo-lambda and ziglang (pinned below) into a venv under
#      ${PARQDB_TOOLS_DIR:-$HOME/.cache/parqdb-catalog}/cargo-lambda, and the Rust target;
#   2. checks what the functions link, from cargo's dependency graph for the target: none
#      of the CLI's or the remote client's crates (clap, indicatif, aws-config) and one
#      crypto provider (aws-lc-rs; ring must not be linked). aws-sdk-s3 is linked for an
#      S3 warehouse's listings (signed with object_store's credentials). aws-sdk-lambda is
#      linked for `refresh`'s builder function (configured from the environment only);
#      the other binaries do not reference it, so the linker leaves it out of them;
#   3. builds every binary of the functions crate (`cargo lambda build --release --arm64
#      -p parqdb-catalog-functions`) into target/lambda/<name>/bootstrap;
#   4. checks each bootstrap is an ELF executable for the target, and prints its size
#      (stripped, as the release profile leaves it) and the size of its deployment zip.
#
# Sizes and build times on the project's machine are in BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CARGO_LAMBDA_VERSION=1.9.2
ZIGLANG_VERSION=0.17.1
TOOLS_DIR="${PARQDB_TOOLS_DIR:-$HOME/.cache/parqdb-catalog}"
VENV="$TOOLS_DIR/cargo-lambda"

arch_flag=--arm64
target=aarch64-unknown-linux-gnu
elf_machine=183 # EM_AARCH64
if [[ "${1:-}" == "--x86-64" ]]; then
    arch_flag=--x86-64
    target=x86_64-unknown-linux-gnu
    elf_machine=62 # EM_X86_64
elif [[ $# -gt 0 ]]; then
    echo "usage: $0 [--x86-64]" >&2
    exit 2
fi

ensure_tools() {
    local stamp="$VENV/.parqdb-pins" want="cargo-lambda==$CARGO_LAMBDA_VERSION ziglang==$ZIGLANG_VERSION"
    if [[ ! -x "$VENV/bin/cargo-lambda" || ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
        echo "build-functions.sh: installing $want into $VENV" >&2
        rm -rf "$VENV"
        mkdir -p "$TOOLS_DIR"
        python3 -m venv "$VENV"
        # shellcheck disable=SC2086
        "$VENV/bin/pip" install --quiet --disable-pip-version-check $want
        echo "$want" >"$stamp"
    fi
    export PATH="$VENV/bin:$PATH"
    if ! rustup target list --installed | grep -qx "$target"; then
        rustup target add "$target"
    fi
}

check_graph() {
    local graph forbidden found=0
    graph="$(cargo tree -p parqdb-catalog-functions -e normal --target "$target" --prefix none --locked)"
    for forbidden in clap indicatif aws-config ring; do
        if grep -q "^$forbidden v" <<<"$graph"; then
            echo "build-functions.sh: the functions link \`$forbidden\`:" >&2
            cargo tree -p parqdb-catalog-functions -e normal --target "$target" -i "$forbidden" --locked >&2
            found=1
        fi
    done
    grep -q "^aws-lc-rs v" <<<"$graph" || {
        echo "build-functions.sh: expected aws-lc-rs as the one crypto provider" >&2
        found=1
    }
    [[ $found == 0 ]] || exit 1
    echo "build-functions.sh: the functions link no CLI, aws-config or S3-SDK crate; one crypto provider (aws-lc-rs)" >&2
}

report() {
    python3 - "$elf_machine" target/lambda/*/bootstrap <<'PY'
import io
import os
import struct
import sys
import zipfile

machine = int(sys.argv[1])
print(f"{'function':<10} {'stripped':>12} {'zipped':>12}")
for path in sys.argv[2:]:
    name = os.path.basename(os.path.dirname(path))
    with open(path, "rb") as handle:
        data = handle.read()
    if data[:4] != b"\x7fELF" or struct.unpack_from("<H", data, 18)[0] != machine:
        sys.exit(f"build-functions.sh: {path} is not an ELF executable for machine {machine}")
    # As Lambda gets it: one executable `bootstrap`, deflated (a ZipInfo's own
    # compress_type wins over the archive's, so set it).
    entry = zipfile.ZipInfo("bootstrap")
    entry.compress_type = zipfile.ZIP_DEFLATED
    entry.external_attr = 0o100755 << 16
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(entry, data)
    print(f"{name:<10} {len(data):>12,} {len(buffer.getvalue()):>12,}")
PY
}

ensure_tools
check_graph
started=$SECONDS
cargo lambda build --release "$arch_flag" -p parqdb-catalog-functions --locked
echo "build-functions.sh: built in $((SECONDS - started)) s" >&2
report
