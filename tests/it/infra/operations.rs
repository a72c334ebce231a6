//! How the deployed stack is run, against the template (`infra/template.yaml`) and the
//! committed SAM CLI configuration (`infra/samconfig.toml`):
//!
//! * every function traces (`Tracing: Active`, with the X-Ray grants in its own role) and
//!   is published through the alias `live`, shifted by CodeDeploy gradually and rolled
//!   back by the stack's alarms under a role written out in the template;
//! * the gc cycle's schedule retries a failed start and keeps what it could not start, a
//!   manual asynchronous gc invocation waits for a slot and ends in the same dead-letter
//!   queue, which has an alarm;
//! * the dashboard shows this stack's series only;
//! * samconfig.toml keeps the parameters where `sam build` and `sam deploy` both read
//!   them, and names only parameters the template has, with values it allows;
//! * backups: the bucket is versioned with noncurrent versions expiring (a gc delete only
//!   adds a delete marker), the table has PITR, and the optional AWS Backup plan covers
//!   both into a retained vault under a read-only role;
//! * restores: a restore role that only AWS Backup and S3 Batch Operations assume, that
//!   deletes nothing, and that the bucket policy's conditional-write denies exempt by
//!   `aws:PrincipalArn`, and nobody else.

use std::collections::BTreeMap;

use crate::support::infra::{
    branches, parameter, property, reference, resource, resources_of_type, root, scalars, tagged,
    template,
};
use serde_norway::Value;

#[test]
fn functions_trace_and_ship_through_a_gradually_shifted_alias() {
    let template = template();
    let globals = &template["Globals"]["Function"];
    assert_eq!(globals["Tracing"].as_str(), Some("Active"));
    assert_eq!(globals["AutoPublishAlias"].as_str(), Some("live"));
    assert_eq!(
        parqdb_catalog::remote::DEFAULT_QUALIFIER,
        "live",
        "the CLI's lambda:// client invokes the alias the template publishes"
    );
    let preference = &globals["DeploymentPreference"];
    assert_eq!(reference(preference.get("Type")), Some("DeploymentType"));
    assert_eq!(
        tagged(&preference["Role"], "!GetAtt").and_then(Value::as_str),
        Some("DeploymentRole.Arn"),
        "CodeDeploy's role is written out (no managed policy)"
    );
    let rollback: Vec<&str> = preference["Alarms"]
        .as_sequence()
        .expect("Alarms")
        .iter()
        .filter_map(|alarm| reference(Some(alarm)))
        .collect();
    assert!(rollback.contains(&"FunctionFailuresAlarm"), "{rollback:?}");
    for alarm in &rollback {
        assert_eq!(
            resource(&template, alarm)["Type"].as_str(),
            Some("AWS::CloudWatch::Alarm")
        );
    }
    let types: Vec<&str> = parameter(&template, "DeploymentType")["AllowedValues"]
        .as_sequence()
        .expect("AllowedValues")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(types.contains(&"AllAtOnce"));
    assert!(types.iter().filter(|t| t.starts_with("Canary")).count() >= 1);

    // Each function's role may write its trace segments; nothing else gets "*".
    for (name, function) in resources_of_type(&template, "AWS::Serverless::Function") {
        assert!(
            property(function, "Tracing").is_none(),
            "{name}: from Globals"
        );
        assert!(
            property(function, "AutoPublishAlias").is_none(),
            "{name}: from Globals"
        );
        let role = tagged(property(function, "Role").expect("Role"), "!GetAtt")
            .and_then(Value::as_str)
            .and_then(|arn| arn.strip_suffix(".Arn"))
            .expect("Role: !GetAtt <role>.Arn");
        let statements =
            resource(&template, role)["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
                .as_sequence()
                .expect("statements");
        let traces = statements
            .iter()
            .find(|s| s["Sid"].as_str() == Some("WriteTraces"))
            .unwrap_or_else(|| panic!("{role}: WriteTraces"));
        let actions: Vec<&str> = traces["Action"]
            .as_sequence()
            .expect("Action")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(
            actions,
            ["xray:PutTraceSegments", "xray:PutTelemetryRecords"]
        );
    }
    // CodeDeploy moves only this stack's aliases.
    let deployment = &resource(&template, "DeploymentRole")["Properties"];
    assert_eq!(
        deployment["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]["Service"].as_str(),
        Some("codedeploy.amazonaws.com")
    );
    let statements = deployment["Policies"][0]["PolicyDocument"]["Statement"]
        .as_sequence()
        .expect("statements");
    let moves = &statements[0];
    assert_eq!(
        tagged(&moves["Resource"], "!Sub").and_then(Value::as_str),
        Some(
            "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${AWS::StackName}-*"
        )
    );
}

#[test]
fn gc_starts_and_manual_invocations_are_retried_then_kept() {
    let template = template();
    let schedule = &resource(&template, "GcCycleStateMachine")["Properties"]["Events"]["Schedule"]
        ["Properties"];
    let retry = &schedule["RetryPolicy"];
    assert!(
        retry["MaximumRetryAttempts"]
            .as_u64()
            .is_some_and(|n| n > 0)
    );
    assert_eq!(
        retry["MaximumEventAgeInSeconds"].as_u64(),
        Some(3600),
        "until the next start is due"
    );
    let queue = "GcDeadLetterQueue.Arn";
    assert_eq!(
        tagged(&schedule["DeadLetterConfig"]["Arn"], "!GetAtt").and_then(Value::as_str),
        Some(queue)
    );
    let function = &resource(&template, "GcFunction")["Properties"];
    let config = &function["EventInvokeConfig"];
    assert_eq!(config["MaximumEventAgeInSeconds"].as_u64(), Some(21_600));
    assert_eq!(config["MaximumRetryAttempts"].as_u64(), Some(2));
    assert_eq!(
        tagged(&function["DeadLetterQueue"]["TargetArn"], "!GetAtt").and_then(Value::as_str),
        Some(queue)
    );
    // The queue admits the schedule's rule (and the gc role, by its own grant) only.
    let policy = &resource(&template, "GcDeadLetterQueuePolicy")["Properties"]["PolicyDocument"]["Statement"]
        [0];
    assert_eq!(
        tagged(
            &policy["Condition"]["ArnEquals"]["aws:SourceArn"],
            "!GetAtt"
        )
        .and_then(Value::as_str),
        Some("GcCycleStateMachineSchedule.Arn"),
        "the rule SAM generates for the Schedule event"
    );
    let alarm = &resource(&template, "GcDeadLettersAlarm")["Properties"];
    assert_eq!(
        alarm["MetricName"].as_str(),
        Some("ApproximateNumberOfMessagesVisible")
    );
    assert_eq!(
        tagged(&alarm["Dimensions"][0]["Value"], "!GetAtt").and_then(Value::as_str),
        Some("GcDeadLetterQueue.QueueName")
    );
}

#[test]
fn the_dashboard_shows_this_stack_only() {
    let template = template();
    let body = tagged(
        &resource(&template, "Dashboard")["Properties"]["DashboardBody"],
        "!Sub",
    )
    .and_then(Value::as_str)
    .expect("DashboardBody: !Sub '<json>'");
    let body: serde_json::Value = serde_json::from_str(body).expect("the body is JSON");
    let widgets = body["widgets"].as_array().expect("widgets");
    assert!(widgets.len() >= 5);
    for widget in widgets {
        for metric in widget["properties"]["metrics"].as_array().expect("metrics") {
            let metric = metric.as_array().expect("a metric array");
            let fields: Vec<&str> = metric.iter().filter_map(|f| f.as_str()).collect();
            match fields[0] {
                "ParqDBCatalog" => assert!(
                    fields
                        .windows(2)
                        .any(|w| w == ["Stack", "${AWS::StackName}"]),
                    "{fields:?}"
                ),
                "AWS/Lambda" => assert!(fields[3].starts_with("${AWS::StackName}-"), "{fields:?}"),
                "AWS/States" => assert_eq!(fields[3], "${GcCycleStateMachine}"),
                other => panic!("a metric of {other}"),
            }
        }
    }
}

/// `key = "value"` pairs of `parameter_overrides` (space-separated, values optionally
/// quoted).
fn overrides(text: &str) -> BTreeMap<String, String> {
    text.split_whitespace()
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or_else(|| panic!("{pair}"));
            (key.to_owned(), value.trim_matches('"').to_owned())
        })
        .collect()
}

#[test]
fn samconfig_keeps_shared_parameters_where_build_and_deploy_read_them() {
    let path = root().join("infra/samconfig.toml");
    let text = std::fs::read_to_string(&path).expect("read infra/samconfig.toml");
    let config: toml_edit::DocumentMut = text.parse().expect("TOML");
    assert_eq!(config["version"].as_float(), Some(0.1));
    let default = config["default"].as_table().expect("[default]");
    // The trap: a command's own parameter_overrides hides the global ones from the others
    // (`sam build` reads build and global, `sam deploy` deploy and global).
    for (command, table) in default.iter() {
        if command == "global" {
            continue;
        }
        let parameters = table.get("parameters");
        assert!(
            parameters
                .and_then(|p| p.get("parameter_overrides"))
                .is_none(),
            "[default.{command}.parameters] must not set parameter_overrides"
        );
    }
    let global = &default["global"]["parameters"];
    assert_eq!(global["beta_features"].as_bool(), Some(true));
    assert!(
        global["stack_name"].as_str().is_some_and(|n| n.len() <= 54),
        "function names stay under 64"
    );
    let overrides = overrides(
        global["parameter_overrides"]
            .as_str()
            .expect("parameter_overrides"),
    );
    assert!(
        overrides.contains_key("Architecture"),
        "sam build reads it here"
    );
    let template = template();
    for (key, value) in &overrides {
        let declared = parameter(&template, key);
        if let Some(allowed) = declared.get("AllowedValues").and_then(Value::as_sequence) {
            let allowed: Vec<String> = allowed
                .iter()
                .map(|v| match v {
                    Value::Number(n) => n.to_string(),
                    other => other.as_str().expect("a scalar").to_owned(),
                })
                .collect();
            assert!(allowed.contains(value), "{key}={value}: not in {allowed:?}");
        }
        if let Some(max) = declared.get("MaxValue").and_then(Value::as_u64) {
            assert!(
                value.parse::<u64>().is_ok_and(|v| v <= max),
                "{key}={value}"
            );
        }
    }
    assert_eq!(
        default["deploy"]["parameters"]["capabilities"].as_str(),
        Some("CAPABILITY_IAM")
    );
}

/// The value of `!GetAtt <target>`, if `value` is one.
fn get_att(value: &Value) -> Option<&str> {
    tagged(value, "!GetAtt").and_then(Value::as_str)
}

/// The statements of a role's only inline policy, `!If` branches unwrapped.
fn role_statements<'a>(template: &'a Value, role: &str) -> Vec<&'a Value> {
    let policies = resource(template, role)["Properties"]["Policies"]
        .as_sequence()
        .expect("Policies");
    assert_eq!(policies.len(), 1, "{role}: one inline policy");
    policies[0]["PolicyDocument"]["Statement"]
        .as_sequence()
        .expect("statements")
        .iter()
        .flat_map(branches)
        .collect()
}

#[test]
fn backups_cover_the_bucket_and_the_table_and_gc_deletes_stay_restorable() {
    let template = template();
    // A gc delete only adds a delete marker: the bytes stay for the noncurrent-version
    // window, then expire, and the marker left alone goes too.
    let bucket = &resource(&template, "WarehouseBucket")["Properties"];
    assert_eq!(
        bucket["VersioningConfiguration"]["Status"].as_str(),
        Some("Enabled")
    );
    let rules = bucket["LifecycleConfiguration"]["Rules"]
        .as_sequence()
        .expect("rules");
    let rule = |id: &str| {
        rules
            .iter()
            .find(|rule| rule["Id"].as_str() == Some(id))
            .unwrap_or_else(|| panic!("lifecycle rule {id}"))
    };
    let noncurrent = rule("expire-noncurrent-versions");
    assert!(noncurrent.get("Prefix").is_none(), "every version expires");
    assert_eq!(
        reference(noncurrent["NoncurrentVersionExpiration"].get("NoncurrentDays")),
        Some("NoncurrentVersionRetentionDays")
    );
    assert_eq!(
        rule("remove-expired-delete-markers")["ExpiredObjectDeleteMarker"].as_bool(),
        Some(true)
    );
    assert_eq!(
        resource(&template, "PointerTable")["Properties"]["PointInTimeRecoverySpecification"]
            ["PointInTimeRecoveryEnabled"]
            .as_bool(),
        Some(true)
    );

    // The plan: on by default, continuous, into a vault that outlives the stack.
    let backups = parameter(&template, "Backups");
    assert_eq!(backups["Default"].as_str(), Some("true"));
    let retention = parameter(&template, "BackupRetentionDays");
    assert_eq!(
        retention["MaxValue"].as_u64(),
        Some(35),
        "continuous S3 backups keep 35 days at most"
    );
    let enabled = tagged(&template["Conditions"]["BackupsEnabled"], "!Equals")
        .and_then(Value::as_sequence)
        .expect("BackupsEnabled: !Equals [...]");
    assert_eq!(reference(enabled.first()), Some("Backups"));
    assert_eq!(enabled[1].as_str(), Some("true"));
    for name in ["BackupVault", "BackupPlan", "BackupSelection", "BackupRole"] {
        assert_eq!(
            resource(&template, name)["Condition"].as_str(),
            Some("BackupsEnabled"),
            "{name}"
        );
    }
    let vault = resource(&template, "BackupVault");
    assert_eq!(vault["DeletionPolicy"].as_str(), Some("Retain"));
    let plan = &resource(&template, "BackupPlan")["Properties"]["BackupPlan"];
    let rules = plan["BackupPlanRule"].as_sequence().expect("rules");
    assert_eq!(rules.len(), 1);
    assert_eq!(
        reference(rules[0].get("TargetBackupVault")),
        Some("BackupVault")
    );
    assert_eq!(rules[0]["EnableContinuousBackup"].as_bool(), Some(true));
    assert_eq!(
        reference(rules[0]["Lifecycle"].get("DeleteAfterDays")),
        Some("BackupRetentionDays")
    );
    let selection = &resource(&template, "BackupSelection")["Properties"];
    assert_eq!(reference(selection.get("BackupPlanId")), Some("BackupPlan"));
    let selection = &selection["BackupSelection"];
    assert_eq!(get_att(&selection["IamRoleArn"]), Some("BackupRole.Arn"));
    let covered: Vec<&str> = selection["Resources"]
        .as_sequence()
        .expect("Resources")
        .iter()
        .flat_map(branches)
        .filter_map(get_att)
        .collect();
    assert_eq!(covered, ["WarehouseBucket.Arn", "PointerTable.Arn"]);

    // The backup role reads: no object write, no delete of anything but its own backups.
    let trust =
        &resource(&template, "BackupRole")["Properties"]["AssumeRolePolicyDocument"]["Statement"];
    assert_eq!(
        trust[0]["Principal"]["Service"].as_str(),
        Some("backup.amazonaws.com")
    );
    for statement in role_statements(&template, "BackupRole") {
        for action in scalars(&statement["Action"]) {
            assert!(!action.contains('*'), "{action}");
            let object_write = action.starts_with("s3:PutObject")
                || action.starts_with("s3:Delete")
                || action.starts_with("dynamodb:Put")
                || action.starts_with("dynamodb:Update")
                || action == "dynamodb:DeleteItem";
            assert!(!object_write, "BackupRole may {action}");
            if action == "dynamodb:DeleteBackup" {
                assert_eq!(
                    tagged(&statement["Resource"], "!Sub").and_then(Value::as_str),
                    Some("${PointerTable.Arn}/backup/*")
                );
            }
        }
    }
}

#[test]
fn only_the_restore_role_may_write_without_conditions_and_only_restore_services_assume_it() {
    let template = template();
    let role = &resource(&template, "RestoreRole");
    assert!(
        role.get("Condition").is_none(),
        "versions restore without backups too"
    );
    let trust = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        .as_sequence()
        .expect("trust");
    assert_eq!(trust.len(), 1);
    assert_eq!(trust[0]["Action"].as_str(), Some("sts:AssumeRole"));
    assert!(trust[0]["Principal"].get("AWS").is_none());
    assert_eq!(
        scalars(&trust[0]["Principal"]["Service"]),
        ["backup.amazonaws.com", "batchoperations.s3.amazonaws.com"]
    );
    // It writes objects under the warehouse prefix (and Batch Operations' own manifests and
    // reports beside it), and deletes nothing.
    let mut puts = Vec::new();
    for statement in role_statements(&template, "RestoreRole") {
        for action in scalars(&statement["Action"]) {
            assert!(!action.contains('*'), "{action}");
            assert!(
                !action.starts_with("s3:Delete") && !action.starts_with("s3:PutBucket"),
                "RestoreRole may {action}"
            );
            assert_ne!(action, "dynamodb:DeleteTable");
            if action == "s3:PutObject" {
                puts.push(
                    tagged(&statement["Resource"], "!Sub")
                        .and_then(Value::as_str)
                        .expect("a !Sub resource"),
                );
            }
            if action == "dynamodb:PutItem" {
                let resource = tagged(&statement["Resource"], "!Sub")
                    .and_then(Value::as_str)
                    .expect("a !Sub resource");
                assert!(
                    resource.ends_with("table/${PointerTable}-restored-*"),
                    "restores go to new tables, never the pointer table: {resource}"
                );
            }
        }
    }
    puts.sort_unstable();
    assert_eq!(
        puts,
        [
            "${WarehouseBucket.Arn}/${WarehousePrefix}/*",
            "${WarehouseBucket.Arn}/restore-jobs/*",
        ]
    );
    assert_eq!(
        get_att(&template["Outputs"]["RestoreRoleArn"]["Value"]),
        Some("RestoreRole.Arn")
    );

    // The bucket policy's conditional-write denies bind everyone but the restore role; the
    // policy allows nothing and names no other exemption.
    let statements =
        resource(&template, "WarehouseBucketPolicy")["Properties"]["PolicyDocument"]["Statement"]
            .as_sequence()
            .expect("statements");
    let mut exempting = Vec::new();
    for statement in statements {
        assert_eq!(statement["Effect"].as_str(), Some("Deny"));
        let condition = &statement["Condition"];
        if let Some(exempt) = condition.get("ArnNotEquals") {
            let keys: Vec<&str> = exempt
                .as_mapping()
                .expect("a mapping")
                .keys()
                .filter_map(Value::as_str)
                .collect();
            assert_eq!(keys, ["aws:PrincipalArn"]);
            assert_eq!(
                get_att(&exempt["aws:PrincipalArn"]),
                Some("RestoreRole.Arn")
            );
            assert_eq!(
                condition["Null"]["s3:if-none-match"].as_str(),
                Some("true"),
                "the deny still binds everyone else's unconditional writes"
            );
            exempting.push(statement["Sid"].as_str().expect("Sid"));
        }
    }
    assert_eq!(
        exempting,
        [
            "DenyUnconditionalPointerWrites",
            "DenyOverwritesOfImmutableObjects"
        ]
    );
}
