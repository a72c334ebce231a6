//! `gc status`: where the collector stands, read without writing anything.

use futures::TryStreamExt;
use serde::Serialize;
use uuid::Uuid;

use super::job::{Job, PartitionProgress, Seq};
use super::journal::JournalRef;
use super::lease::{self, LeaseState};
use super::ledger::Ledger;
use super::report::GcPhase;
use crate::catalog::Catalog;
use crate::catalog::ownership::{OwnershipMarker, read_marker};
use crate::error::Result;
use crate::warehouse::ListItem;

/// The collector's state in one warehouse, as `gc status` prints it.
///
/// Its serialized form (`serde_json::to_value(&state)`) shows everything: the owner, the
/// lease, each run's journal, the unfinished run's phase and partitions, the ledger's
/// totals. Its shape follows the collector's internals, so the typed accessors answer
/// only the questions that outlive them: is a run going on, which one, and what stops
/// collection.
///
/// ```no_run
/// # async fn example(catalog: &parqdb_catalog::Catalog) -> parqdb_catalog::Result<()> {
/// let state = parqdb_catalog::gc::status(catalog, catalog.clock().now_ms(), false).await?;
/// if let Some(run) = state.current_run() {
///     println!("run {run} is unfinished, at {:?}", state.phase());
/// }
/// println!("{}", serde_json::to_value(&state).unwrap_or_default());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct GcState {
    /// The warehouse root.
    pub(crate) warehouse: String,
    /// Its ownership marker (`None`: unclaimed; the collector refuses to run).
    pub(crate) owner: Option<OwnershipMarker>,
    /// The run lease's latest generation.
    pub(crate) lease: Option<LeaseState>,
    /// Whether a run holds the lease now.
    pub(crate) running: bool,
    /// The latest run that finished (sweep included).
    pub(crate) last_finished_run: Option<RunState>,
    /// Runs that recorded a journal but did not finish: the unfinished run (see
    /// `current-run`; it is resumed, never restarted), and runs that were abandoned or
    /// died under an earlier version, for which the next new run restarts every tracked
    /// retention clock once.
    pub(crate) unfinished_runs: Vec<RunState>,
    /// The unfinished run (the one the next `gc` or plan step goes on with): its phase
    /// and each partition's progress.
    pub(crate) current_run: Option<CurrentRun>,
    /// Ledger totals (only with `ledger: true`: it lists the whole ledger).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ledger: Option<LedgerState>,
    /// What stops collection that the fields above do not show (the unfinished run was
    /// planned by a newer release).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) warnings: Vec<String>,
}

/// One run, by its journal.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct RunState {
    /// The run's id.
    pub(crate) run_id: Uuid,
    /// The time it started (its journal's time).
    pub(crate) run_ms: i64,
    /// How long ago that was.
    pub(crate) age_ms: i64,
}

/// Where the unfinished run stands.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct CurrentRun {
    /// The run.
    pub(crate) run: RunState,
    /// Its phase.
    pub(crate) phase: GcPhase,
    /// Metadata files listed (pass 1) so far.
    pub(crate) metadata_listed: u64,
    /// Whether `metadata/` has been read and decided.
    pub(crate) metadata_done: bool,
    /// Whether the verification walk and the metadata deletions are complete.
    pub(crate) verified: bool,
    /// Each partition of `indexes/`.
    pub(crate) partitions: Vec<PartitionProgress>,
}

/// What the ledger tracks.
#[derive(Debug, Clone, Copy, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct LedgerState {
    /// Objects with a ledger entry or a clock the last finished run's scan pages carry
    /// (unreachable, retention clock running).
    pub(crate) tracked_objects: u64,
    /// Condemnations: entry files that record one, and condemnations the last finished
    /// run's scan pages carry.
    pub(crate) condemnations: u64,
    /// Ledger files in all.
    pub(crate) files: u64,
}

impl GcState {
    /// Whether a run holds the lease now.
    pub fn running(&self) -> bool {
        self.running
    }

    /// The unfinished run, which the next `gc` or plan step goes on with.
    pub fn current_run(&self) -> Option<Uuid> {
        self.current_run.as_ref().map(|current| current.run.run_id)
    }

    /// The unfinished run's phase.
    pub fn phase(&self) -> Option<GcPhase> {
        self.current_run.as_ref().map(|current| current.phase)
    }

    /// The latest run that finished (sweep included).
    pub fn last_finished_run(&self) -> Option<Uuid> {
        self.last_finished_run.as_ref().map(|run| run.run_id)
    }

    /// Runs that recorded a journal and did not finish: the current run, and runs that were
    /// abandoned or died under an earlier version (the next new run restarts every tracked
    /// retention clock once for them).
    pub fn unfinished_runs(&self) -> Vec<Uuid> {
        self.unfinished_runs.iter().map(|run| run.run_id).collect()
    }

    /// What stops collection that the rest does not show (e.g. the unfinished run was
    /// planned by a newer release).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

/// Read the collector's state of `catalog`'s warehouse at `now_ms`; with `ledger`, also
/// count the ledger (a listing of all of `_gc/ledger/` and a read of every clocks file of
/// the last finished run, holding the tracked names in memory).
pub async fn status(catalog: &Catalog, now_ms: i64, ledger: bool) -> Result<GcState> {
    let warehouse = catalog.warehouse();
    let owner = read_marker(warehouse).await?;
    let lease = lease::state(warehouse).await?;
    let running = lease
        .as_ref()
        .is_some_and(|lease| !lease.released && lease.expires_ms > now_ms);
    let journal = Ledger::new(warehouse);
    let journals = journal.journals().state().await?;
    let run = |journal: &JournalRef| RunState {
        run_id: journal.run_id,
        run_ms: journal.run_ms,
        age_ms: now_ms.saturating_sub(journal.run_ms),
    };
    let mut warnings = Vec::new();
    let current_run = match current_run(catalog, now_ms).await {
        // A run planned by a newer release: every step refuses it; say so, and why.
        Err(err) if err.kind() == crate::error::ErrorKind::UnsupportedFormatVersion => {
            warnings.push(err.message().to_owned());
            None
        }
        current => current?,
    };
    let ledger = if ledger {
        let mut state = LedgerState::default();
        let mut objects = std::collections::HashSet::new();
        let mut files = journal.list();
        while let Some(item) = files.try_next().await? {
            let ListItem::Object(file) = item else {
                continue;
            };
            let Some(object) = journal.object_of(&file.name) else {
                // A condemnation marker (its condemnations are counted where the pages
                // carry them).
                let last = file.name.rsplit('/').next().unwrap_or_default();
                if crate::warehouse::layout::parse_marker(last).is_some() {
                    state.files += 1;
                }
                continue;
            };
            state.files += 1;
            if file
                .name
                .rsplit('/')
                .next()
                .is_some_and(|n| n.starts_with("c-"))
            {
                state.condemnations += 1;
            }
            objects.insert(object);
        }
        // The clocks of `indexes/` that the last finished run's scan pages carry, if the
        // unfinished run (or the next) reads them: no run was planned in between.
        let current = current_run.as_ref().map(|current| JournalRef {
            run_ms: current.run.run_ms,
            run_id: current.run.run_id,
        });
        if let Some(previous) = journals.previous
            && !super::carried::started_between(
                warehouse,
                Some(previous),
                current,
                journals.dead.iter().copied(),
                &journals.finished,
            )
            .await?
            && let Some(previous) = super::carried::Previous::read(warehouse, previous).await?
        {
            let mut reader =
                super::carried::CarriedReader::new(warehouse, std::sync::Arc::new(previous));
            for (name, condemned) in reader.names().await? {
                state.condemnations += u64::from(condemned);
                objects.insert(name);
            }
        }
        state.tracked_objects = objects.len() as u64;
        Some(state)
    } else {
        None
    };
    Ok(GcState {
        warehouse: warehouse.root().to_owned(),
        owner,
        lease,
        running,
        last_finished_run: journals.previous.as_ref().map(run),
        unfinished_runs: journals.dead.iter().map(run).collect(),
        current_run,
        ledger,
        warnings,
    })
}

/// The unfinished run's progress, from its pages.
async fn current_run(catalog: &Catalog, now_ms: i64) -> Result<Option<CurrentRun>> {
    let collector = super::GarbageCollector::new(catalog.clone(), super::GcConfig::default())?;
    let Some((job, plan)) = collector.unfinished().await? else {
        return Ok(None);
    };
    let last = |seq: Seq, job: &Job| {
        let job = job.clone();
        async move { job.last_page(&seq).await }
    };
    let metadata = last(Seq::Metadata, &job).await?;
    let metadata_done = last(Seq::Assessed, &job)
        .await?
        .is_some_and(|page| page.done);
    let verified = last(Seq::DeletedMetadata, &job)
        .await?
        .is_some_and(|page| page.done);
    let mut partitions = Vec::new();
    for partition in 0..plan.partitions.len() {
        let scan = last(Seq::Scan(partition), &job).await?;
        let deleted = last(Seq::Deleted(partition), &job).await?;
        let swept = last(Seq::Swept(partition), &job).await?;
        partitions.push(PartitionProgress {
            partition,
            scanned_pages: scan.as_ref().map_or(0, |page| page.seq + 1),
            scanned: scan.as_ref().is_some_and(|page| page.done),
            deleted_pages: deleted.as_ref().map_or(0, |page| page.seq + 1),
            deleted: deleted.as_ref().is_some_and(|page| page.done),
            swept: swept.as_ref().is_some_and(|page| page.done),
            objects: scan.as_ref().map_or(0, |page| page.totals.scanned.objects),
        });
    }
    let phase = if !metadata_done {
        GcPhase::ScanMetadata
    } else if !partitions.iter().all(|p| p.scanned) {
        GcPhase::ScanIndexes
    } else if !verified {
        GcPhase::Verify
    } else if !partitions.iter().all(|p| p.swept) {
        GcPhase::Delete
    } else {
        GcPhase::SweepLedger
    };
    Ok(Some(CurrentRun {
        run: RunState {
            run_id: plan.run_id,
            run_ms: plan.run_ms,
            age_ms: now_ms.saturating_sub(plan.run_ms),
        },
        phase,
        metadata_listed: metadata.map_or(0, |page| page.totals.scanned.objects),
        metadata_done,
        verified,
        partitions,
    }))
}
