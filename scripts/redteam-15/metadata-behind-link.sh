#!/usr/bin/env bash
# Metadata published through a symlinked directory under metadata/: register accepts it, the
# collector's listing skips the link, so rule (P) never sees it: after a drop its tables are
# deleted while the metadata file survives, and registering it again publishes an index with
# no tables.
set -u
B=${PARQDB_CLI:-$(git rev-parse --show-toplevel)/target/debug/parqdb-catalog}
D=$(mktemp -d); W=file://$D/wh
$B --warehouse $W init >/dev/null
$B --warehouse $W demo >/dev/null 2>&1
mkdir -p $D/shared-meta; ln -s $D/shared-meta $D/wh/metadata/ext
cp $(ls $D/wh/metadata/*/00006-*.metadata.json) $D/shared-meta/m.json
$B --warehouse $W namespace create --namespace live >/dev/null
$B --warehouse $W register --namespace live --name idx --metadata $W/metadata/ext/m.json >/dev/null; rc=$?; echo "register via link rc=$rc"
[ $rc -eq 0 ] || { echo "refused: fixed"; exit 0; }
$B --warehouse $W drop --namespace live --name idx; echo "drop rc=$?"
for h in 2 4 6 8; do FAKETIME_DONT_FAKE_MONOTONIC=1 faketime -f +${h}h $B --warehouse $W gc --force --retention 1s --grace 1s >/dev/null; done
echo "tables left: $(find $D/wh/indexes -type f | wc -l); metadata via link exists: $(test -f $D/wh/metadata/ext/m.json && echo yes)"
$B --warehouse $W register --namespace live --name again --metadata $W/metadata/ext/m.json >/dev/null; echo "re-register rc=$?"
python3 - "$D/wh/metadata/ext/m.json" "$D/wh" <<'PY'
import json,sys,os
m=json.load(open(sys.argv[1]))
locs=[t['properties']['location'] for s in m['snapshots'] for t in s['index-tables'].values()]
missing=[l for l in locs if not any(f for _,_,fs in os.walk(os.path.join(sys.argv[2],l)) for f in fs)]
print("tables named by the live metadata that are gone:", len(missing), "of", len(locs))
PY
