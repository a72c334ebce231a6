#!/usr/bin/env bash
# A copy of the pointer store (backup restored elsewhere, DynamoDB PITR restore into a new table,
# a cloned staging catalog) carries the same catalog id: it passes the ownership check, writes into
# the warehouse, and each catalog's GC deletes the other's live data.
set -u
B=${PARQDB_CLI:-$(git rev-parse --show-toplevel)/target/debug/parqdb-catalog}
D=$(mktemp -d); W=file://$D/wh
$B --warehouse $W init >/dev/null
$B --warehouse $W demo >/dev/null 2>&1
cp -a $D/wh/_catalog $D/staging                       # the clone
M=$(ls $D/wh/metadata/*/00006-*.metadata.json)
$B --warehouse $W --catalog file://$D/staging namespace create --namespace staging; echo "clone write rc=$?"
$B --warehouse $W --catalog file://$D/staging register --namespace staging --name idx --metadata file://$M >/dev/null; echo "clone register rc=$?"
for h in 2 4 6; do FAKETIME_DONT_FAKE_MONOTONIC=1 faketime -f +${h}h $B --warehouse $W gc --force --retention 1s --grace 1s >/dev/null; echo "owner gc rc=$?"; done
test -f $M && echo "clone's live metadata still there" || echo "CLONE'S LIVE METADATA DELETED BY THE OWNER'S GC"
$B --warehouse $W --catalog file://$D/staging load --namespace staging --name idx | head -c 120; echo
