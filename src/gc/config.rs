//! The collector's configuration, its safety floors, and the crate's duration syntax
//! ([`parse_duration`]: `7d`, `36h`, `1h30m`).

use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, ErrorKind, Result};

const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;

/// Default retention after an object loses reachability: 7 days (Delta's default).
pub(crate) const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * DAY);
/// Smallest retention accepted without `force`: 1 hour.
pub(crate) const MIN_RETENTION: Duration = Duration::from_secs(HOUR);
/// Default grace period for young objects (in-flight writers): 1 hour.
pub(crate) const DEFAULT_GRACE: Duration = Duration::from_secs(HOUR);
/// Smallest grace period accepted without `force`: 5 minutes (SlateDB's minimum age).
pub(crate) const MIN_GRACE: Duration = Duration::from_secs(5 * MINUTE);
/// Default allowance for clock skew between writers, the object store and the collector.
pub(crate) const DEFAULT_MAX_CLOCK_SKEW: Duration = Duration::from_secs(5 * MINUTE);
/// Default lease duration: how long a run may go without renewing its lease.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(15 * MINUTE);
/// Longest lease duration accepted: a run renews its lease before every destructive
/// batch, so a longer one only keeps other runs out after a crash.
pub(crate) const MAX_LEASE: Duration = Duration::from_secs(6 * HOUR);
/// Default objects per listing page (one S3 `ListObjectsV2` response).
pub(crate) const DEFAULT_PAGE_SIZE: usize = 1000;
/// Most objects per listing page: a page's clocks file (names of up to 1,024 bytes each)
/// then stays well under the 16 MB a reader accepts (round 131).
pub(crate) const MAX_PAGE_SIZE: usize = 10_000;
/// Default most objects one run deletes: no cap at any size measured. Every step is
/// checkpointed, so the cap bounds no memory; what it bounds is the run's doomed lists
/// under `_gc/runs/` (about 517 bytes per doomed object) and the length of its delete
/// phase, while each deferred object costs a whole scan more (infra/README.md).
pub(crate) const DEFAULT_MAX_DELETES: usize = 1_000_000_000;
/// Default partitions of `indexes/` per run.
pub(crate) const DEFAULT_PARTITIONS: usize = 16;
/// Default concurrent partitions of one `collect`.
pub(crate) const DEFAULT_WORKERS: usize = 4;
/// Most partitions a run may have (a state machine `Map` iterates over them).
pub(crate) const MAX_PARTITIONS: usize = 1000;

/// How the collector decides and acts. See the [module docs](super) for what each bound
/// protects.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct GcConfig {
    /// How long an object must stay unreachable before it may be deleted (readers that
    /// loaded it earlier keep working for at least this long). Default 7 days; at least 1
    /// hour unless forced.
    #[serde(serialize_with = "as_millis")]
    pub retention: Duration,
    /// Objects younger than this (by last-modified time) are never tracked or deleted:
    /// they may belong to a register or commit in flight. Every catalog operation must
    /// complete within this bound. Default 1 hour; at least 5 minutes unless forced.
    #[serde(serialize_with = "as_millis")]
    pub grace: Duration,
    /// `B`: how long a condemnation must stand before the object is deleted; `None` means
    /// the grace period. At least twice the catalog's publish window (the longest a
    /// register or commit may take) unless forced.
    #[serde(serialize_with = "opt_as_millis")]
    pub condemn_delay: Option<Duration>,
    /// Allowance for clock skew between writers, the object store and the collector.
    /// Default 5 minutes.
    #[serde(serialize_with = "as_millis")]
    pub max_clock_skew: Duration,
    /// Report what would happen without writing or deleting anything.
    pub dry_run: bool,
    /// Accept a retention or grace below the safety floors.
    pub force: bool,
    /// Concurrent object-store requests while scanning.
    pub io_concurrency: usize,
    /// Objects per delete batch.
    pub delete_batch_size: usize,
    /// Most objects deleted by one run (the rest wait for the next run). Default
    /// 1,000,000,000: a cap bounds no memory (every step is checkpointed), only the run's
    /// doomed lists and the length of its delete phase; lower it to throttle deletions on
    /// purpose.
    pub max_deletes_per_run: usize,
    /// Most per-object actions listed in the report.
    pub max_reported_actions: usize,
    /// How long the run lease lasts without renewal. Default 15 minutes; at most 6 hours.
    #[serde(serialize_with = "as_millis")]
    pub lease_duration: Duration,
    /// How long one call (a [`collect`](super::GarbageCollector::collect) or a
    /// [`step`](super::GarbageCollector::step)) may work before it stops at the next page
    /// boundary, its progress checkpointed; the next call goes on where it stopped. `None`:
    /// until the run is complete. The `gc` Lambda function sets it from its deadline.
    #[serde(serialize_with = "opt_as_millis")]
    pub budget: Option<Duration>,
    /// Objects per listing page: the unit of checkpointed work (a killed invocation loses
    /// at most one page) and what bounds a worker's memory besides the reachable set.
    /// Default 1,000 (one S3 `ListObjectsV2` response); at most 10,000 (the clocks the
    /// page carries to the next run must stay small enough to read).
    pub page_size: usize,
    /// How many partitions a run splits `indexes/` into (at its subdirectories): the
    /// units the scan and delete steps fan out over. Default 16; at most 1,000.
    pub partitions: usize,
    /// How many partitions one `collect` works on at once (the `gc-cycle` state machine's
    /// `Map` concurrency is its own parameter). Default 4.
    pub workers: usize,
}

impl Default for GcConfig {
    fn default() -> Self {
        GcConfig {
            retention: DEFAULT_RETENTION,
            grace: DEFAULT_GRACE,
            condemn_delay: None,
            max_clock_skew: DEFAULT_MAX_CLOCK_SKEW,
            dry_run: false,
            force: false,
            io_concurrency: 16,
            delete_batch_size: 1000,
            max_deletes_per_run: DEFAULT_MAX_DELETES,
            max_reported_actions: 1000,
            lease_duration: DEFAULT_LEASE,
            budget: None,
            page_size: DEFAULT_PAGE_SIZE,
            partitions: DEFAULT_PARTITIONS,
            workers: DEFAULT_WORKERS,
        }
    }
}

impl GcConfig {
    /// The configuration from the environment; unset (or empty) variables keep the
    /// defaults, and the result is validated:
    ///
    /// | variable | field | form |
    /// |---|---|---|
    /// | `PARQDB_GC_RETENTION` | [`retention`](GcConfig::retention) | duration (humantime's syntax: `7d`, `36h`, `1h30m`, `500ms`) |
    /// | `PARQDB_GC_GRACE` | [`grace`](GcConfig::grace) | duration |
    /// | `PARQDB_GC_CONDEMN_DELAY` | [`condemn_delay`](GcConfig::condemn_delay) | duration |
    /// | `PARQDB_GC_MAX_CLOCK_SKEW` | [`max_clock_skew`](GcConfig::max_clock_skew) | duration |
    /// | `PARQDB_GC_LEASE` | [`lease_duration`](GcConfig::lease_duration) | duration |
    /// | `PARQDB_GC_BUDGET` | [`budget`](GcConfig::budget) | duration |
    /// | `PARQDB_GC_IO_CONCURRENCY` | [`io_concurrency`](GcConfig::io_concurrency) | positive integer |
    /// | `PARQDB_GC_DELETE_BATCH_SIZE` | [`delete_batch_size`](GcConfig::delete_batch_size) | positive integer |
    /// | `PARQDB_GC_MAX_DELETES` | [`max_deletes_per_run`](GcConfig::max_deletes_per_run) | positive integer |
    /// | `PARQDB_GC_PAGE_SIZE` | [`page_size`](GcConfig::page_size) | integer, 1 to 10,000 |
    /// | `PARQDB_GC_PARTITIONS` | [`partitions`](GcConfig::partitions) | positive integer |
    /// | `PARQDB_GC_WORKERS` | [`workers`](GcConfig::workers) | positive integer |
    /// | `PARQDB_GC_DRY_RUN`, `PARQDB_GC_FORCE` | flags | `true`/`false` |
    ///
    /// A malformed value is `INVALID_CONFIGURATION` naming the variable.
    pub fn from_env() -> Result<GcConfig> {
        GcConfig::from_lookup(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    /// Like [`GcConfig::from_env`], reading variables through `lookup`.
    #[doc(hidden)] // For the workspace's tests.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<GcConfig> {
        let mut config = GcConfig::default();
        let invalid = |name: &str, err: Error| {
            Error::new(
                ErrorKind::Configuration,
                format!("{name}: {}", err.message()),
            )
        };
        if let Some(value) = lookup("PARQDB_GC_RETENTION") {
            config.retention =
                parse_duration(&value).map_err(|err| invalid("PARQDB_GC_RETENTION", err))?;
        }
        if let Some(value) = lookup("PARQDB_GC_GRACE") {
            config.grace = parse_duration(&value).map_err(|err| invalid("PARQDB_GC_GRACE", err))?;
        }
        if let Some(value) = lookup("PARQDB_GC_CONDEMN_DELAY") {
            config.condemn_delay = Some(
                parse_duration(&value).map_err(|err| invalid("PARQDB_GC_CONDEMN_DELAY", err))?,
            );
        }
        if let Some(value) = lookup("PARQDB_GC_BUDGET") {
            config.budget =
                Some(parse_duration(&value).map_err(|err| invalid("PARQDB_GC_BUDGET", err))?);
        }
        for (name, slot) in [
            ("PARQDB_GC_MAX_CLOCK_SKEW", &mut config.max_clock_skew),
            ("PARQDB_GC_LEASE", &mut config.lease_duration),
        ] {
            if let Some(value) = lookup(name) {
                *slot = parse_duration(&value).map_err(|err| invalid(name, err))?;
            }
        }
        for (name, slot) in [
            ("PARQDB_GC_IO_CONCURRENCY", &mut config.io_concurrency),
            ("PARQDB_GC_DELETE_BATCH_SIZE", &mut config.delete_batch_size),
            ("PARQDB_GC_MAX_DELETES", &mut config.max_deletes_per_run),
            ("PARQDB_GC_PAGE_SIZE", &mut config.page_size),
            ("PARQDB_GC_PARTITIONS", &mut config.partitions),
            ("PARQDB_GC_WORKERS", &mut config.workers),
        ] {
            if let Some(value) = lookup(name) {
                *slot = value
                    .trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        Error::new(
                            ErrorKind::Configuration,
                            format!("{name}: `{value}` is not a positive integer"),
                        )
                    })?;
            }
        }
        if config.partitions > MAX_PARTITIONS {
            return Err(Error::new(
                ErrorKind::Configuration,
                format!("PARQDB_GC_PARTITIONS: at most {MAX_PARTITIONS}"),
            ));
        }
        for (name, slot) in [
            ("PARQDB_GC_DRY_RUN", &mut config.dry_run),
            ("PARQDB_GC_FORCE", &mut config.force),
        ] {
            if let Some(value) = lookup(name) {
                *slot = match value.as_str() {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    other => {
                        return Err(Error::new(
                            ErrorKind::Configuration,
                            format!("{name}: `{other}` is not true or false"),
                        ));
                    }
                };
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// The condemnation delay `B` in effect.
    pub(crate) fn effective_condemn_delay(&self) -> Duration {
        self.condemn_delay.unwrap_or(self.grace)
    }

    /// Refuse unsafe settings: retention under 1 hour, grace under 5 minutes or a
    /// condemnation delay under twice the catalog's
    /// publish window (60 s) unless `force`, and zero sizes
    /// always.
    pub fn validate(&self) -> Result<()> {
        let refuse = |message: String| Err(Error::new(ErrorKind::Configuration, message));
        if !self.force && self.retention < MIN_RETENTION {
            return refuse(format!(
                "gc retention {} is below the safety floor of {}; readers of dropped indexes could fail. Use force to override",
                format_duration(self.retention),
                format_duration(MIN_RETENTION)
            ));
        }
        if !self.force && self.grace < MIN_GRACE {
            return refuse(format!(
                "gc grace {} is below the safety floor of {}; in-flight writers could lose files. Use force to override",
                format_duration(self.grace),
                format_duration(MIN_GRACE)
            ));
        }
        let floor = crate::catalog::PUBLISH_WINDOW.saturating_mul(2);
        if !self.force && self.effective_condemn_delay() < floor {
            return refuse(format!(
                "gc condemnation delay {} is below {}, twice the catalog's publish window: a register or commit that started before a condemnation could publish after the deletion. Use force to override",
                format_duration(self.effective_condemn_delay()),
                format_duration(floor)
            ));
        }
        if self.io_concurrency == 0
            || self.delete_batch_size == 0
            || self.max_deletes_per_run == 0
            || self.page_size == 0
            || self.partitions == 0
            || self.workers == 0
        {
            return refuse(
                "gc io-concurrency, delete-batch-size, max-deletes-per-run, page-size, partitions and workers must be positive"
                    .into(),
            );
        }
        if self.page_size > MAX_PAGE_SIZE {
            return refuse(format!(
                "gc page size {} is more than {MAX_PAGE_SIZE}: the retention clocks a page carries to the next run must stay small enough to read",
                self.page_size
            ));
        }
        if self.partitions > MAX_PARTITIONS {
            return refuse(format!(
                "gc partitions {} is more than {MAX_PARTITIONS}",
                self.partitions
            ));
        }
        if self.lease_duration < Duration::from_secs(1) || self.lease_duration > MAX_LEASE {
            return refuse(format!(
                "gc lease duration {} is outside 1s..{}: a run renews its lease before every destructive batch, so a longer lease only locks other runs out after a crash",
                format_duration(self.lease_duration),
                format_duration(MAX_LEASE)
            ));
        }
        Ok(())
    }
}

/// Parse a duration: the one duration syntax of the crate's CLI flags (`--retention`,
/// `--older-than`, `--duration`, ...), environment variables (`PARQDB_GC_*`) and Lambda
/// configuration. It is [`humantime`]'s: one or more `<integer><unit>` spans, optionally
/// separated by spaces, such as `7d`, `36h`, `90m`, `45s`, `500ms`, `2w` or `1h30m`
/// (units `ns`, `us`, `ms`, `s`, `m`, `h`, `d`, `w`, `M` = 30.44 days, `y` = 365.25
/// days, and their long forms `sec`, `min`, `hours`, `days`, ...). Surrounding whitespace
/// is ignored. Anything else — a bare number, a negative one, an unknown unit, an
/// overflow — is [`ErrorKind::InvalidRequest`] naming the text and the reason.
pub(crate) fn parse_duration(text: &str) -> Result<Duration> {
    humantime::parse_duration(text.trim()).map_err(|err| {
        Error::new(
            ErrorKind::InvalidRequest,
            format!(
                "`{text}` is not a duration ({err}); use e.g. 7d, 36h, 90m, 45s, 500ms or 1h30m"
            ),
        )
    })
}

/// A duration in the largest exact unit (`7d`, `36h`, `90m`, `1500ms`).
pub(crate) fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    for (unit, size) in [
        ("d", DAY * 1000),
        ("h", HOUR * 1000),
        ("m", MINUTE * 1000),
        ("s", 1000),
    ] {
        let size = u128::from(size);
        if millis > 0 && millis.is_multiple_of(size) {
            return format!("{}{unit}", millis / size);
        }
    }
    format!("{millis}ms")
}

/// A duration in whole milliseconds, saturating, as `i64`.
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn as_millis<S: serde::Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_i64(millis(*duration))
}

fn opt_as_millis<S: serde::Serializer>(
    duration: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match duration {
        Some(duration) => serializer.serialize_some(&millis(*duration)),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_format() {
        for (text, expected) in [
            ("7d", Duration::from_secs(7 * DAY)),
            ("36h", Duration::from_secs(36 * HOUR)),
            ("90m", Duration::from_secs(90 * MINUTE)),
            ("1h30m", Duration::from_secs(90 * MINUTE)),
            ("1h 30m", Duration::from_secs(90 * MINUTE)),
            ("1.5h", Duration::from_secs(90 * MINUTE)),
            ("90min", Duration::from_secs(90 * MINUTE)),
            (" 90s ", Duration::from_secs(90)),
            ("500ms", Duration::from_millis(500)),
            ("250ms", Duration::from_millis(250)),
            ("2w", Duration::from_secs(14 * DAY)),
            ("0s", Duration::ZERO),
        ] {
            assert_eq!(parse_duration(text).ok(), Some(expected), "{text:?}");
        }
        for bad in [
            "",
            "7",
            "d",
            "7x",
            "-1h",
            "h7",
            "1h30",
            "99999999999999999999d",
        ] {
            let err = parse_duration(bad).expect_err(bad);
            assert_eq!(err.kind(), ErrorKind::InvalidRequest, "{bad:?}");
            assert!(
                err.message()
                    .contains(&format!("`{bad}` is not a duration")),
                "{}",
                err.message()
            );
        }
        assert_eq!(format_duration(Duration::from_secs(7 * DAY)), "7d");
        assert_eq!(format_duration(Duration::from_secs(36 * HOUR)), "36h");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn the_environment_configures_and_is_validated() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let config = GcConfig::from_lookup(env(&[
            ("PARQDB_GC_RETENTION", "36h"),
            ("PARQDB_GC_DRY_RUN", "true"),
        ]))
        .expect("valid");
        assert_eq!(config.retention, Duration::from_secs(36 * HOUR));
        let compound = GcConfig::from_lookup(env(&[
            ("PARQDB_GC_RETENTION", "2w"),
            ("PARQDB_GC_GRACE", "1h30m"),
            ("PARQDB_GC_MAX_CLOCK_SKEW", "90s"),
            ("PARQDB_GC_BUDGET", "500ms"),
        ]))
        .expect("valid");
        assert_eq!(
            (
                compound.retention,
                compound.grace,
                compound.max_clock_skew,
                compound.budget
            ),
            (
                Duration::from_secs(14 * DAY),
                Duration::from_secs(90 * MINUTE),
                Duration::from_secs(90),
                Some(Duration::from_millis(500))
            )
        );
        assert_eq!(config.grace, DEFAULT_GRACE);
        assert!(config.dry_run);
        let err =
            GcConfig::from_lookup(env(&[("PARQDB_GC_GRACE", "soon")])).expect_err("bad duration");
        assert_eq!(err.kind(), ErrorKind::Configuration);
        assert!(
            err.message().starts_with("PARQDB_GC_GRACE"),
            "{}",
            err.message()
        );
        assert!(
            GcConfig::from_lookup(env(&[("PARQDB_GC_RETENTION", "10m")])).is_err(),
            "floor"
        );
        assert!(
            GcConfig::from_lookup(env(&[
                ("PARQDB_GC_RETENTION", "10m"),
                ("PARQDB_GC_FORCE", "true")
            ]))
            .is_ok()
        );
        assert!(GcConfig::from_lookup(env(&[("PARQDB_GC_FORCE", "yes")])).is_err());
        let limits = GcConfig::from_lookup(env(&[
            ("PARQDB_GC_CONDEMN_DELAY", "10m"),
            ("PARQDB_GC_MAX_CLOCK_SKEW", "1m"),
            ("PARQDB_GC_LEASE", "20m"),
            ("PARQDB_GC_IO_CONCURRENCY", "4"),
            ("PARQDB_GC_DELETE_BATCH_SIZE", "500"),
            ("PARQDB_GC_MAX_DELETES", "20000"),
            ("PARQDB_GC_BUDGET", "5m"),
            ("PARQDB_GC_PAGE_SIZE", "250"),
            ("PARQDB_GC_PARTITIONS", "64"),
            ("PARQDB_GC_WORKERS", "8"),
        ]))
        .expect("valid limits");
        assert_eq!(limits.budget, Some(Duration::from_secs(5 * MINUTE)));
        assert_eq!(
            (limits.page_size, limits.partitions, limits.workers),
            (250, 64, 8)
        );
        assert_eq!(limits.condemn_delay, Some(Duration::from_secs(10 * MINUTE)));
        assert_eq!(limits.max_clock_skew, Duration::from_secs(MINUTE));
        assert_eq!(limits.lease_duration, Duration::from_secs(20 * MINUTE));
        assert_eq!(
            (
                limits.io_concurrency,
                limits.delete_batch_size,
                limits.max_deletes_per_run
            ),
            (4, 500, 20000)
        );
        static BAD: [(&str, &str); 7] = [
            ("PARQDB_GC_MAX_DELETES", "0"),
            ("PARQDB_GC_PAGE_SIZE", "0"),
            ("PARQDB_GC_PARTITIONS", "1001"),
            ("PARQDB_GC_WORKERS", "lots"),
            ("PARQDB_GC_IO_CONCURRENCY", "-1"),
            ("PARQDB_GC_DELETE_BATCH_SIZE", "many"),
            ("PARQDB_GC_LEASE", "1"),
        ];
        for pair in &BAD {
            let name = pair.0;
            let err = GcConfig::from_lookup(env(std::slice::from_ref(pair))).expect_err(name);
            assert_eq!(err.kind(), ErrorKind::Configuration, "{name}");
            assert!(err.message().starts_with(name), "{}", err.message());
        }
        // A page whose clocks file would outgrow what the next run reads.
        let err = GcConfig::from_lookup(env(&[("PARQDB_GC_PAGE_SIZE", "10001")]))
            .expect_err("large page");
        assert_eq!(err.kind(), ErrorKind::Configuration);
        assert!(err.message().contains("page size"), "{}", err.message());
        // A lease no crash should leave standing for long (`gc --lease 3650d`).
        let err = GcConfig::from_lookup(env(&[("PARQDB_GC_LEASE", "3650d")])).expect_err("long");
        assert_eq!(err.kind(), ErrorKind::Configuration);
        assert!(err.message().contains("lease"), "{}", err.message());
        let err = GcConfig::from_lookup(env(&[("PARQDB_GC_CONDEMN_DELAY", "30s")]))
            .expect_err("below twice the publish window");
        assert_eq!(err.kind(), ErrorKind::Configuration);
    }

    #[test]
    fn floors_are_enforced_unless_forced() {
        assert!(GcConfig::default().validate().is_ok());
        let short = GcConfig {
            retention: Duration::from_secs(30 * MINUTE),
            ..GcConfig::default()
        };
        let err = short.validate().expect_err("below the floor");
        assert_eq!(err.kind(), ErrorKind::Configuration);
        assert!(err.message().contains("floor"), "{}", err.message());
        assert!(
            GcConfig {
                force: true,
                ..short
            }
            .validate()
            .is_ok()
        );
        let no_grace = GcConfig {
            grace: Duration::from_secs(60),
            ..GcConfig::default()
        };
        assert!(no_grace.validate().is_err());
        assert_eq!(GcConfig::default().effective_condemn_delay(), DEFAULT_GRACE);
    }
}
