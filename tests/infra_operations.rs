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
//!   them, and names only parameters the template has, with values it allows.

mod infra_support;

use std::collections::BTreeMap;

use infra_support::{
    parameter, property, reference, resource, resources_of_type, root, tagged, template,
};
use serde_norway::Value;

#[test]
fn functions_trace_and_ship_through_a_gradually_shifted_alias() {
    let template = template();
    let globals = &template["Globals"]["Function"];
    assert_eq!(globals["Tracing"].as_str(), Some("Active"));
    assert_eq!(globals["AutoPublishAlias"].as_str(), Some("live"));
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
