#!/usr/bin/env bash
# One ordinary S3 key that object_store's Path::parse refuses (`a//b`, a `.`/`..` segment,
# a control character) under a managed prefix makes every gc run fail while listing.
# Needs the S3-compatible server: scripts/services/moto.sh start DIR; source DIR/env.
set -u
B=${PARQDB_CLI:-$(git rev-parse --show-toplevel)/target/debug/parqdb-catalog}
: "${PARQDB_TEST_S3_ENDPOINT:?start scripts/services/moto.sh and source its env}"
export AWS_ENDPOINT_URL=$PARQDB_TEST_S3_ENDPOINT AWS_ALLOW_HTTP=true AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=x AWS_REGION=us-east-1
BUCKET=redteam-$RANDOM$RANDOM; W=s3://$BUCKET/wh
$B --warehouse $W init >/dev/null && $B --warehouse $W demo >/dev/null 2>&1
PY=${PARQDB_TOOLS_DIR:-$HOME/.cache/parqdb-catalog}/moto-venv/bin/python
$PY - "$BUCKET" <<'PY'
import boto3, os, sys
s = boto3.client('s3', endpoint_url=os.environ['AWS_ENDPOINT_URL'], aws_access_key_id='x', aws_secret_access_key='x', region_name='us-east-1')
s.put_object(Bucket=sys.argv[1], Key='wh/indexes/stray//part-0', Body=b'x')
PY
$B --warehouse $W gc --force --retention 1s --grace 1s; echo " rc=$? (every run fails the same way)"
