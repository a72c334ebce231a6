#!/usr/bin/env bash
# Marker lost -> the next writer with another --catalog silently claims the warehouse and its GC deletes the owner's live index.
set -u
B=${PARQDB_CLI:-$(git rev-parse --show-toplevel)/target/debug/parqdb-catalog}
D=$(mktemp -d); W=file://$D/wh
$B --warehouse $W init >/dev/null
$B --warehouse $W demo >/dev/null 2>&1
# the demo leaves ["demo"]."embeddings-v2" dropped; register it again so something is live
M=$(ls $D/wh/metadata/*/00006-*.metadata.json)
$B --warehouse $W namespace create --namespace live >/dev/null 2>&1 || $B --warehouse $W namespace create live
$B --warehouse $W register --namespace live --name idx --metadata file://$M >/dev/null; echo "register rc=$?"
$B --warehouse $W load --namespace live --name idx | head -c 200; echo
rm $D/wh/_catalog-owner.json                          # lost marker (lifecycle rule, partial restore, cleanup script)
$B --warehouse $W --catalog file://$D/other namespace create --namespace mine >/dev/null; echo "foreign write rc=$?"
cat $D/wh/_catalog-owner.json | grep catalog
before=$(find $D/wh/metadata $D/wh/indexes -type f | wc -l)
for h in 2 4 6; do FAKETIME_DONT_FAKE_MONOTONIC=1 faketime -f +${h}h $B --warehouse $W --catalog file://$D/other gc --force --retention 1s --grace 1s >/dev/null; done
after=$(find $D/wh/metadata $D/wh/indexes -type f | wc -l)
echo "managed files before=$before after=$after"
test -f $M && echo "live metadata still there" || echo "LIVE METADATA DELETED: $M"
$B --warehouse $W load --namespace live --name idx >/dev/null 2>&1; echo "owner load rc=$?"
$B --warehouse $W gc --dry-run 2>&1 | head -c 300; echo
