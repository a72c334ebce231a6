#!/usr/bin/env bash
# Validate the deployment template offline: no AWS account, no credentials, no network
# beyond PyPI for the first install.
#
#   scripts/check-infra.sh
#
#   1. installs (on first use, or when a pin changed) cfn-lint, aws-sam-translator and
#      checkov into a venv under ${PARQDB_TOOLS_DIR:-$HOME/.cache/parqdb-catalog}/infra-venv,
#      with every transitive version pinned by infra/check-constraints.txt;
#   2. expands the SAM template (infra/template.yaml) to plain CloudFormation with
#      aws-sam-translator, as `sam deploy` would after uploading the code;
#   3. runs cfn-lint on the SAM template and on the expanded template (errors and
#      warnings fail; the few accepted findings are ignored on their resource, with the
#      reason next to them);
#   4. runs checkov on both (any failed check fails; each skipped check is justified in
#      the resource's `Metadata: checkov: skip` entry);
#   5. validates every Step Functions definition (infra/statemachines/*.asl.json) with
#      asl-validator (npm, pinned, installed under the same tools directory), after
#      substituting sample values for its `${...}` DefinitionSubstitutions.
#
# The expanded template is left in ${PARQDB_INFRA_OUT:-target/infra}/template.expanded.json.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CFN_LINT_VERSION=1.58.0
SAM_TRANSLATOR_VERSION=1.115.0
CHECKOV_VERSION=3.3.30
ASL_VALIDATOR_VERSION=4.0.0
TOOLS_DIR="${PARQDB_TOOLS_DIR:-$HOME/.cache/parqdb-catalog}"
VENV="$TOOLS_DIR/infra-venv"
TEMPLATE=infra/template.yaml
CONSTRAINTS=infra/check-constraints.txt
OUT="${PARQDB_INFRA_OUT:-target/infra}"
EXPANDED="$OUT/template.expanded.json"

ensure_venv() {
    local stamp="$VENV/.parqdb-pins"
    local want
    want="cfn-lint==$CFN_LINT_VERSION aws-sam-translator==$SAM_TRANSLATOR_VERSION checkov==$CHECKOV_VERSION $(
        python3 -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$CONSTRAINTS"
    )"
    if [[ -x "$VENV/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        return
    fi
    echo "check-infra.sh: installing cfn-lint, aws-sam-translator and checkov into $VENV" >&2
    local started=$SECONDS
    rm -rf "$VENV"
    mkdir -p "$TOOLS_DIR"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --constraint "$CONSTRAINTS" \
        "cfn-lint==$CFN_LINT_VERSION" \
        "aws-sam-translator==$SAM_TRANSLATOR_VERSION" \
        "checkov==$CHECKOV_VERSION"
    echo "$want" >"$stamp"
    echo "check-infra.sh: installed in $((SECONDS - started)) s" >&2
}

# SAM -> CloudFormation, offline. The translator only needs IAM to resolve managed-policy
# names in a function's `Policies`; this template names none (every role is explicit), so
# the loader answers an empty map. Local CodeUri directories are what `sam deploy` uploads
# and rewrites to s3:// URIs; a placeholder URI stands in for the upload.
expand() {
    mkdir -p "$OUT"
    AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true \
        "$VENV/bin/python" - "$TEMPLATE" "$EXPANDED" <<'PY'
import json
import sys

from samtranslator.public.exceptions import InvalidDocumentException
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse


class NoManagedPolicies:
    """Managed-policy lookups without IAM: the template uses no managed policies."""

    def load(self):
        return {}


source, target = sys.argv[1], sys.argv[2]
with open(source, encoding="utf-8") as handle:
    template = yaml_parse(handle.read())
for name, resource in template.get("Resources", {}).items():
    properties = resource.get("Properties", {})
    code = properties.get("CodeUri")
    if resource.get("Type") == "AWS::Serverless::Function" and isinstance(code, str) and not code.startswith("s3://"):
        properties["CodeUri"] = f"s3://parqdb-catalog-artifacts-placeholder/{name}.zip"
    # A state machine's local DefinitionUri is what `sam deploy` uploads; inline the
    # definition instead, so the checks below see it.
    definition = properties.get("DefinitionUri")
    if resource.get("Type") == "AWS::Serverless::StateMachine" and isinstance(definition, str) and not definition.startswith("s3://"):
        import os
        with open(os.path.join(os.path.dirname(source), definition), encoding="utf-8") as handle:
            properties["Definition"] = json.load(handle)
        del properties["DefinitionUri"]
try:
    expanded = transform(template, {}, NoManagedPolicies(), passthrough_metadata=True)
except InvalidDocumentException as err:
    for cause in err.causes:
        print(f"check-infra.sh: SAM transform: {cause.message}", file=sys.stderr)
    sys.exit(1)
# SAM resolves DeploymentPreference.Type from the parameter's value while transforming
# (CloudFormation transforms with the stack's values; offline it sees the default): put the
# reference back, as the deployed template has the chosen value there.
for resource in expanded["Resources"].values():
    if resource["Type"] == "AWS::CodeDeploy::DeploymentGroup":
        resource["Properties"]["DeploymentConfigName"]["Fn::Sub"][1]["ConfigName"] = {"Ref": "DeploymentType"}
with open(target, "w", encoding="utf-8") as handle:
    json.dump(expanded, handle, indent=2, sort_keys=True)
    handle.write("\n")
print(f"check-infra.sh: expanded {source} -> {target} ({len(expanded['Resources'])} resources)", file=sys.stderr)
PY
}

# asl-validator (npm) for the Step Functions definitions.
ensure_asl_validator() {
    local dir="$TOOLS_DIR/asl-validator-$ASL_VALIDATOR_VERSION"
    ASL_VALIDATOR="$dir/node_modules/.bin/asl-validator"
    if [[ -x "$ASL_VALIDATOR" ]]; then
        return
    fi
    echo "check-infra.sh: installing asl-validator $ASL_VALIDATOR_VERSION into $dir" >&2
    mkdir -p "$dir"
    npm install --silent --no-audit --no-fund --prefix "$dir" \
        "asl-validator@$ASL_VALIDATOR_VERSION" >/dev/null
}

# Each definition with its substitutions replaced by sample values of the right shape.
check_state_machines() {
    local definition name
    for definition in infra/statemachines/*.asl.json; do
        name="$(basename "$definition")"
        sed -e 's/\${Workers}/4/g' \
            -e 's/\${GcFunctionArn}/arn:aws:lambda:us-east-1:123456789012:function:gc:live/g' \
            -e 's/\${Stack}/parqdb/g' \
            "$definition" >"$OUT/$name"
        if grep -q '\${' "$OUT/$name"; then
            echo "check-infra.sh: $definition has a substitution this script does not know" >&2
            return 1
        fi
        "$ASL_VALIDATOR" --json-path "$OUT/$name"
    done
}

ensure_venv
ensure_asl_validator
expand
check_state_machines

echo "check-infra.sh: cfn-lint $TEMPLATE $EXPANDED" >&2
"$VENV/bin/cfn-lint" --non-zero-exit-code warning -- "$TEMPLATE" "$EXPANDED"

echo "check-infra.sh: checkov $TEMPLATE $EXPANDED" >&2
"$VENV/bin/checkov" --quiet --compact --skip-download --framework cloudformation \
    --output cli -f "$TEMPLATE" -f "$EXPANDED"
echo "check-infra.sh: $TEMPLATE is clean" >&2
