#!/usr/bin/env bash
# A mount point inside indexes/ (bind mount, NFS/SMB share, docker volume) is walked like a
# plain directory: the collector deletes files of another file system, outside the warehouse.
# Needs root (mount --bind).
set -u
B=${PARQDB_CLI:-$(git rev-parse --show-toplevel)/target/debug/parqdb-catalog}
D=$(mktemp -d); W=file://$D/wh
$B --warehouse $W init >/dev/null
mkdir -p $D/outside $D/wh/indexes/shared
echo precious > $D/outside/dataset.parquet; touch -d '3 days ago' $D/outside/dataset.parquet
mount --bind $D/outside $D/wh/indexes/shared || { echo "cannot mount (need root)"; exit 0; }
for i in 1 2 3; do $B --warehouse $W gc --force --retention 1s --grace 1s >/dev/null; sleep 2; done
umount $D/wh/indexes/shared
test -f $D/outside/dataset.parquet && echo "outside file kept" || echo "OUTSIDE FILE DELETED THROUGH A MOUNT POINT: $D/outside/dataset.parquet"
