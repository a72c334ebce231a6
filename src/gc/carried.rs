//! Retention clocks carried on the scan's pages: the first step of the ledger per page
//! (`docs/design-ledger-pages.md`, step A). The plan carries `metadata/`'s the same way on
//! its assessed pages (`assessed/<seq>.carried.json`, round 143), read by
//! [`CarriedReader::of_metadata`]; what follows says "scan page" for both.
//!
//! Every scan page of a run writes, before the page itself, the clocks that stand after
//! its decisions: for every unreachable object of the page that has one (started by this
//! run or carried from the last), its start and the walk it came from
//! (`scan/<p>/<seq>.carried.json`, create-if-absent like every run file). The next run
//! reads the clocks of the **previous finished run** `F` beside its own listing: for the
//! names of each page it lists, the page of `F` that listed them (found by bisecting
//! `F`'s pages of the partition that holds them, then read in order as the listing
//! passes them: one `GET` per page of `F`).
//!
//! A carried clock counts only where the per-object ledger's would:
//!
//! * only `F`'s (the plan's `previous`, a finished run): a run that never finished carried
//!   nothing anyone looked at, and `F` carried every clock that still stood when it
//!   decided, so no earlier run is needed;
//! * only if no run was planned between `F` and this one: a run that never finished (given
//!   up, superseded) may have found objects reachable and cleared their clock files (its
//!   sweep, or its scan finding them gone); what it found is lost with it, so its
//!   successor starts those clocks again, as giving a run up says (such a run has a
//!   directory under `_gc/runs/`, or a journal the plan lists as dead or untrusted);
//! * only on a page of `F` that exists: `F` wrote the clocks before each page, and every
//!   page of a finished run is written (a stalled writer's late clocks land on a page
//!   number that is taken, and are refused); a page without clocks (it listed no object,
//!   or a release before this one wrote it) is never read, and a damaged one carries
//!   nothing;
//! * not for an object `F`'s verification walk found reachable: `F`'s sweep cleared its
//!   entry, and so does this reading;
//! * and then by the same rules as a clock file: it never stands before the object landed
//!   (a rewritten object is young again), before a publication the change log announces,
//!   or before the floor of the run ([`rules`](super::rules)).
//!
//! A carried clock may carry the object's condemnation on that clock too (issue 29, step
//! B2: the condemnation's stamp and the name of the marker publication reads it from, see
//! [`ledger`](super::ledger)): it counts only while that marker is there, and goes on with
//! the clock (a new clock voids it).
//!
//! The scan writes no clock file for the objects it decides: the pages alone carry their
//! clocks (a page costs one `PUT` and the next run one `GET`, where the clock files cost a
//! `PUT` per object). Clock files written by earlier releases still count, and a run takes
//! the later of a trusted clock file and the carried clock (the conservative reading), so
//! an upgrade restarts no clock. A new clock of an entry that holds clock files is written
//! as a file too (round 131, F1): a run that cannot read the pages falls back to the
//! files, and finds the newest clock there, never one a restart replaced. A run that can
//! read them counts no clock file of an earlier run for an object the previous run
//! reached, or whose partition its pages carry clocks for (round 141): the pages hold
//! every clock that stood, and a file they do not hold is a stalled write that landed
//! after a sweep cleared the entry, which the store may date before its run's finish (a
//! clock stepped back within the skew, a one-second tick). An earlier
//! release (before the pages carried clocks) that runs after this one reads only clock
//! files, and so starts the other clocks again (later, never earlier).
//!
//! A clock measures how long a *name* has been unreachable, and an object's absence does
//! not interrupt it: an object gone for a while (even cleared from the ledger by the run
//! that carried its clock, a later page of which found it gone) and put back with its old
//! times keeps the clock the previous run carried, as it kept its clock files between two
//! runs. Nothing reachable is dated by it: a publication naming the name while it was
//! away is logged, and restarts the clock (rule L); a rewrite is young again.
//!
//! What the clock files gave and the pages do not, and why it is safe: a clock file of a
//! finished run stayed trusted across any later run; a carried clock lives one run. A run
//! whose previous run's pages cannot be read restarts every clock of `indexes/` that only
//! the pages carried (the others stand on their files, which hold the newest clock):
//! retention takes longer once, and nothing is deleted earlier. A run given up in between
//! restarts every clock, the files' too: its walk may have found an object reachable
//! through a link no change-log entry records, and what it found is lost with it (round
//! 133, J1: the floor). So does a plan step that stopped after writing its walk and
//! before its plan (round 133, G1, where round 131's F2 had let it count for nothing).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::job::{CarriedCondemnation, CarriedPage, Job, Seq, Walk};
use super::journal::JournalRef;
use super::rules::Clock;
use crate::error::{ErrorKind, Result};
use crate::warehouse::{ListRange, Warehouse};

/// The previous finished run, as far as its carried clocks go.
pub(crate) struct Previous {
    job: Job,
    partitions: Vec<ListRange>,
    /// Its verification walk: a clock carried for an object it found reachable does not
    /// carry over.
    verified: Walk,
    /// Its first walk: with the verification walk, what its sweep cleared (round 141).
    observed: Walk,
}

impl Previous {
    /// The previous finished run `journal` of `warehouse`, if its clocks can be read: its
    /// plan and verification walk are there and of a format this release reads (else
    /// nothing is carried from it, and the ledger's clock files alone count).
    pub(crate) async fn read(
        warehouse: &Warehouse,
        journal: JournalRef,
    ) -> Result<Option<Previous>> {
        let job = Job::new(warehouse, journal);
        let unreadable = |kind: ErrorKind| {
            matches!(
                kind,
                ErrorKind::CorruptRecord | ErrorKind::UnsupportedFormatVersion
            )
        };
        let plan = match job.plan().await {
            Ok(Some(plan)) => plan,
            Ok(None) => return Ok(None),
            Err(err) if unreadable(err.kind()) => return Ok(None),
            Err(err) => return Err(err),
        };
        let verified = match job.verified().await {
            Ok(Some(walk)) => walk,
            Ok(None) => return Ok(None),
            Err(err) if unreadable(err.kind()) => return Ok(None),
            Err(err) => return Err(err),
        };
        let observed = match job.observed().await {
            Ok(Some(walk)) => walk,
            Ok(None) => return Ok(None),
            Err(err) if unreadable(err.kind()) => return Ok(None),
            Err(err) => return Err(err),
        };
        Ok(Some(Previous {
            job,
            partitions: plan.partitions,
            verified,
            observed,
        }))
    }

    /// Whether either of its walks reached `name` (in any spelling): its sweep cleared the
    /// object's entry, so a clock file of a run before it found there now is a write that
    /// landed after that sweep (a put stalled past its lease), whatever the store's time
    /// says of it (a clock stepped back within the skew, a one-second tick): it dates no
    /// loss of reachability (round 141).
    pub(crate) fn reached(&self, name: &str) -> bool {
        [&self.verified, &self.observed]
            .iter()
            .any(|walk| walk.observation.reachable.covers_any_spelling(name))
    }
}

/// Whether a run other than `current` (and not newer than it, if given) may have found
/// objects reachable that no later finished run knows of: a run that started after
/// `previous` (any run, where no run has finished: round 139, A), or that is not over at
/// all (neither finished nor marked dead: `over`) whatever its time. A finished run marks dead every run its plan counted, before its
/// finish mark, so a run older than `previous` that is not over landed after `previous`
/// had looked (a planner paused between its walk and its writes: round 134, F1). A run
/// counts if its directory holds anything (its plan step writes its walk first, and that
/// walk may have found objects reachable through links no change-log entry records:
/// round 133, G1), or if its journal is in `listed` (the dead and untrusted runs a plan
/// lists: a run given up whose directory was removed, round 130 H2). A plan step that
/// stopped before writing its walk left nothing behind, and no evidence either.
pub(crate) async fn started_between(
    warehouse: &Warehouse,
    previous: Option<JournalRef>,
    current: Option<JournalRef>,
    listed: impl IntoIterator<Item = JournalRef>,
    over: &HashSet<JournalRef>,
) -> Result<bool> {
    let between = |run: &JournalRef| {
        Some(*run) != current
            && current.is_none_or(|current| run.order() < current.order())
            && (previous.is_none_or(|previous| run.order() > previous.order())
                || !over.contains(run))
    };
    if listed.into_iter().any(|run| between(&run)) {
        return Ok(true);
    }
    Ok(super::job::planned_runs(warehouse)
        .await?
        .iter()
        .any(between))
}

/// One page of the previous run, as read.
struct Loaded {
    /// Its first and last listed object (none: it listed none, or its clocks were never
    /// written, by a release before this one).
    bounds: Option<(String, String)>,
    clocks: HashMap<String, Carried>,
}

/// What the previous finished run carried for one object: its clock, and its
/// condemnation on that clock if it had one (which counts only while its marker is
/// there: the scan looks, see [`Ledger::read_page`](super::ledger::Ledger)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Carried {
    pub clock: Clock,
    pub condemned: Option<CarriedCondemnation>,
}

impl Loaded {
    fn of(page: Option<CarriedPage>) -> Loaded {
        let Some(page) = page else {
            return Loaded {
                bounds: None,
                clocks: HashMap::new(),
            };
        };
        Loaded {
            bounds: page.first.zip(page.last),
            clocks: page
                .clocks
                .into_iter()
                .map(|carried| {
                    let clock = Clock {
                        start_ms: carried.start_ms,
                        walk_ms: carried.walk_ms,
                    };
                    let condemned = carried.condemned;
                    (carried.name, Carried { clock, condemned })
                })
                .collect(),
        }
    }
}

/// The most pages of the previous run one reader keeps read.
const CACHED_PAGES: usize = 16;

/// The largest carried page read: a page of 1,000 objects with names of 1,024 bytes is
/// about 1.1 MB; a larger one is damaged.
const MAX_PAGE_BYTES: u64 = 16 << 20;

/// Reads the previous run's carried clocks beside a listing, one invocation's worth.
pub(crate) struct CarriedReader {
    previous: Arc<Previous>,
    warehouse: Warehouse,
    /// What it reads: the scan's pages of each partition of `indexes/`, or the plan's
    /// assessed pages of `metadata/` (one range).
    source: Source,
    /// The page numbers of each partition of the previous run, once listed.
    numbers: HashMap<usize, Arc<Vec<u64>>>,
    loaded: HashMap<(usize, usize), Arc<Loaded>>,
    /// The page the last name was found on (partition, index).
    cursor: Option<(usize, usize)>,
    /// How many pages of the previous run were read.
    pub reads: u64,
}

/// Which pages of the previous run a reader reads.
enum Source {
    /// The scan's, one sequence per partition.
    Scan,
    /// The plan's assessed pages of `metadata/` (round 143): one sequence over `range`.
    Metadata { range: ListRange },
}

impl CarriedReader {
    /// A reader of the clocks the previous run's scan carried for `indexes/`.
    pub(crate) fn new(warehouse: &Warehouse, previous: Arc<Previous>) -> CarriedReader {
        Self::reading(warehouse, previous, Source::Scan)
    }

    /// A reader of the clocks the previous run's plan carried for `metadata/`, on its
    /// assessed pages (a run of an earlier release carried none there).
    pub(crate) fn of_metadata(warehouse: &Warehouse, previous: Arc<Previous>) -> CarriedReader {
        let range = ListRange::whole(crate::warehouse::METADATA_DIR);
        Self::reading(warehouse, previous, Source::Metadata { range })
    }

    fn reading(warehouse: &Warehouse, previous: Arc<Previous>, source: Source) -> CarriedReader {
        CarriedReader {
            previous,
            warehouse: warehouse.clone(),
            source,
            numbers: HashMap::new(),
            loaded: HashMap::new(),
            cursor: None,
            reads: 0,
        }
    }

    /// The ranges the pages cover, one sequence each.
    fn ranges(&self) -> &[ListRange] {
        match &self.source {
            Source::Scan => &self.previous.partitions,
            Source::Metadata { range } => std::slice::from_ref(range),
        }
    }

    /// The sequence of pages of range `at`.
    fn seq(&self, at: usize) -> Seq {
        match self.source {
            Source::Scan => Seq::Scan(at),
            Source::Metadata { .. } => Seq::Assessed,
        }
    }

    /// What the previous run carried for `names` (objects one page listed, in listing
    /// order) that counts, by name.
    pub(crate) async fn clocks(&mut self, names: &[String]) -> Result<HashMap<String, Carried>> {
        let mut found = HashMap::new();
        for name in names {
            let reachable = &self.previous.verified.observation.reachable;
            if reachable.covers_any_spelling(name) {
                continue;
            }
            if let Some(carried) = self.clock(name).await? {
                found.insert(name.clone(), carried);
            }
        }
        Ok(found)
    }

    /// The names of `names` (objects one page listed) whose clock files of runs before
    /// this one add nothing and must not count (round 141): the previous run reached them
    /// ([`Previous::reached`]), or its pages of the partition that holds them carry
    /// clocks, and so carry every clock that still stood when it decided (a clock file
    /// of an earlier run that is not on them is stale: a write that landed after a sweep
    /// cleared the entry, dated by the store no later than its run's finish).
    pub(crate) async fn superseding(&mut self, names: &[String]) -> Result<HashSet<String>> {
        let mut superseding = HashSet::new();
        for name in names {
            let carrying = match self
                .ranges()
                .iter()
                .position(|range| self.warehouse.range_holds(range, name))
            {
                Some(partition) => !self.numbers(partition).await?.is_empty(),
                None => false,
            };
            if carrying || self.previous.reached(name) {
                superseding.insert(name.clone());
            }
        }
        Ok(superseding)
    }

    /// Every name the previous run carried a clock for that counts (its verification walk
    /// did not reach it), partition by partition, and whether it carried a condemnation
    /// too: what `gc status --ledger` counts as tracked and condemned beside the ledger's
    /// entries. One `GET` per page of the previous run.
    pub(crate) async fn names(&mut self) -> Result<Vec<(String, bool)>> {
        let mut names = Vec::new();
        for partition in 0..self.ranges().len() {
            for index in 0..self.numbers(partition).await?.len() {
                let page = self.page(partition, index).await?;
                let reachable = &self.previous.verified.observation.reachable;
                names.extend(
                    page.clocks
                        .iter()
                        .filter(|(name, _)| !reachable.covers_any_spelling(name))
                        .map(|(name, carried)| (name.clone(), carried.condemned.is_some())),
                );
            }
        }
        Ok(names)
    }

    /// What the previous run carried for `name`, if anything.
    async fn clock(&mut self, name: &str) -> Result<Option<Carried>> {
        let Some(partition) = self
            .ranges()
            .iter()
            .position(|range| self.warehouse.range_holds(range, name))
        else {
            return Ok(None);
        };
        let Some(page) = self.locate(partition, name).await? else {
            return Ok(None);
        };
        Ok(page.clocks.get(name).cloned())
    }

    /// The numbers of the pages of `partition` that carry clocks (a page that listed no
    /// object, or one an earlier release wrote, carries none and is never read).
    async fn numbers(&mut self, partition: usize) -> Result<Arc<Vec<u64>>> {
        if let Some(numbers) = self.numbers.get(&partition) {
            return Ok(numbers.clone());
        }
        let numbers = Arc::new(
            self.previous
                .job
                .carrying_pages(&self.seq(partition))
                .await?,
        );
        self.numbers.insert(partition, numbers.clone());
        Ok(numbers)
    }

    /// The page at `index` of `partition`'s pages.
    async fn page(&mut self, partition: usize, index: usize) -> Result<Arc<Loaded>> {
        if let Some(page) = self.loaded.get(&(partition, index)) {
            return Ok(page.clone());
        }
        let numbers = self.numbers(partition).await?;
        let page = match self
            .previous
            .job
            .carried(&self.seq(partition), numbers[index], MAX_PAGE_BYTES)
            .await
        {
            Ok(page) => page,
            // A damaged page (or one of a later release's format) carries nothing: the
            // clocks of its objects start again, and collection goes on.
            Err(err) if err.kind() == ErrorKind::CorruptRecord => None,
            Err(err) => return Err(err),
        };
        self.reads += 1;
        if self.loaded.len() >= CACHED_PAGES {
            self.loaded.clear();
        }
        let page = Arc::new(Loaded::of(page));
        self.loaded.insert((partition, index), page.clone());
        Ok(page)
    }

    /// Whether `name` lies within the bounds of `page`.
    fn within(&self, page: &Loaded, name: &str) -> bool {
        page.bounds.as_ref().is_some_and(|(first, last)| {
            self.warehouse.name_order(first, name).is_le()
                && self.warehouse.name_order(name, last).is_le()
        })
    }

    /// The page of `partition` that listed `name`, if one did: the cursor's page or the
    /// next, else found by bisection.
    async fn locate(&mut self, partition: usize, name: &str) -> Result<Option<Arc<Loaded>>> {
        let count = self.numbers(partition).await?.len();
        if let Some((at, index)) = self.cursor
            && at == partition
        {
            for index in [index, index + 1] {
                if index < count {
                    let page = self.page(partition, index).await?;
                    if self.within(&page, name) {
                        self.cursor = Some((partition, index));
                        return Ok(Some(page));
                    }
                }
            }
            // After the cursor's page and before the next one's first name (or after the
            // partition's last page): no page listed it, and no bisection is needed (new
            // objects past the previous run's last name cost no read each; round 131).
            let page = self.page(partition, index).await?;
            if let Some((_, last)) = &page.bounds
                && self.warehouse.name_order(last, name).is_lt()
            {
                if index + 1 == count {
                    return Ok(None);
                }
                let next = self.page(partition, index + 1).await?;
                if let Some((first, _)) = &next.bounds
                    && self.warehouse.name_order(name, first).is_lt()
                {
                    return Ok(None);
                }
            }
        }
        // The first page whose last object is not before `name` (pages without bounds
        // are passed over).
        let (mut low, mut high) = (0, count);
        while low < high {
            let middle = low + (high - low) / 2;
            let mut bounded = None;
            for index in middle..high {
                let page = self.page(partition, index).await?;
                if let Some((_, last)) = &page.bounds {
                    bounded = Some((index, self.warehouse.name_order(last, name)));
                    break;
                }
            }
            match bounded {
                None => high = middle,
                Some((index, order)) if order.is_ge() => high = index,
                Some((index, _)) => low = index + 1,
            }
        }
        while low < count {
            let page = self.page(partition, low).await?;
            if page.bounds.is_some() {
                self.cursor = Some((partition, low));
                return Ok(self.within(&page, name).then_some(page));
            }
            low += 1;
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gc::job::Page;
    use crate::gc::reachability::Observation;

    fn clock(n: i64) -> Clock {
        Clock {
            start_ms: 1_000 + n,
            walk_ms: n,
        }
    }

    fn name(n: usize) -> String {
        format!("indexes/{}/{n:05}", if n < 500 { "a" } else { "m" })
    }

    struct Fixture {
        warehouse: Warehouse,
        previous: Arc<Previous>,
    }

    /// A previous run with two partitions (`a…` and `m…`), whose pages list the objects
    /// `pages[p][k]` and carry a clock for every object of those numbers divisible by 3;
    /// a page given as `None` was written without its clocks (an earlier release).
    async fn fixture(pages: [Vec<Option<Vec<usize>>>; 2], reachable: &[usize]) -> Fixture {
        let warehouse = Warehouse::in_memory("memory://carried/wh").expect("warehouse");
        let journal = JournalRef {
            run_ms: 1,
            run_id: uuid::Uuid::from_u128(7),
        };
        let job = Job::new(&warehouse, journal);
        for (partition, pages) in pages.iter().enumerate() {
            let seq = Seq::Scan(partition);
            for (number, objects) in pages.iter().enumerate() {
                let number = number as u64;
                if let Some(objects) = objects {
                    let listed: Vec<String> = objects.iter().map(|n| name(*n)).collect();
                    let clocks = objects
                        .iter()
                        .filter(|n| *n % 3 == 0)
                        .map(|n| (name(*n), clock(*n as i64), None))
                        .collect();
                    let page = CarriedPage::of(&warehouse, &listed, clocks);
                    job.write_carried(&seq, number, &page)
                        .await
                        .expect("clocks");
                }
                let page = Page {
                    seq: number,
                    ..Page::default()
                };
                job.write_page(&seq, page).await.expect("page");
            }
        }
        let mut observation = Observation::default();
        for n in reachable {
            observation.reachable.insert(name(*n), 0);
        }
        let partitions = vec![
            ListRange::new("indexes", None, Some("m".into())),
            ListRange::new("indexes", Some("m".into()), None),
        ];
        let previous = Previous {
            job,
            partitions,
            verified: Walk {
                observation,
                nested: Vec::new(),
                linked: Vec::new(),
            },
            observed: Walk {
                observation: Observation::default(),
                nested: Vec::new(),
                linked: Vec::new(),
            },
        };
        Fixture {
            warehouse,
            previous: Arc::new(previous),
        }
    }

    fn expected(names: &[usize], carried: impl Fn(usize) -> bool) -> HashMap<String, Carried> {
        names
            .iter()
            .filter(|n| *n % 3 == 0 && carried(**n))
            .map(|n| {
                let clock = clock(*n as i64);
                let condemned = None;
                (name(*n), Carried { clock, condemned })
            })
            .collect()
    }

    /// Pages of `size` consecutive objects of `range`, every `skip`-th object left out
    /// (created after the previous run listed).
    fn pages_of(
        range: std::ops::Range<usize>,
        size: usize,
        skip: usize,
    ) -> Vec<Option<Vec<usize>>> {
        let objects: Vec<usize> = range.filter(|n| n % skip != 0).collect();
        objects
            .chunks(size)
            .map(|page| Some(page.to_vec()))
            .collect()
    }

    #[tokio::test]
    async fn every_listed_name_finds_the_clock_its_page_of_the_previous_run_carried() {
        let fixture = fixture([pages_of(0..500, 7, 11), pages_of(500..1000, 13, 11)], &[]).await;
        let mut reader = CarriedReader::new(&fixture.warehouse, fixture.previous.clone());
        // Pages of this run cut the listing elsewhere (19 names each), across the
        // previous run's partitions.
        let all: Vec<usize> = (0..1000).collect();
        let mut found = HashMap::new();
        for page in all.chunks(19) {
            let names: Vec<String> = page.iter().map(|n| name(*n)).collect();
            found.extend(reader.clocks(&names).await.expect("clocks"));
        }
        assert_eq!(found, expected(&all, |n| n % 11 != 0));
        // Read in order, each page of the previous run is read about once (plus the
        // bisection into each partition).
        let pages = 500usize.div_ceil(7) + 500usize.div_ceil(13);
        assert!(
            reader.reads as usize <= pages + 2 * 12,
            "{} reads",
            reader.reads
        );
    }

    #[tokio::test]
    async fn a_name_far_from_the_last_is_found_by_bisection() {
        let fixture = fixture(
            [pages_of(0..500, 5, 1000), pages_of(500..1000, 5, 1000)],
            &[],
        )
        .await;
        let mut reader = CarriedReader::new(&fixture.warehouse, fixture.previous.clone());
        for n in [999, 3, 498, 501, 6, 750] {
            let found = reader.clocks(&[name(n)]).await.expect("clocks");
            assert_eq!(found, expected(&[n], |_| true), "{n}");
        }
        assert!(reader.reads <= 6 * 10, "{} reads", reader.reads);
    }

    #[tokio::test]
    async fn pages_without_objects_or_without_clocks_are_passed_over() {
        // Partition 0: a page without objects between two, and a page an earlier release
        // wrote (no clocks file); partition 1: no pages at all.
        let pages = [
            vec![
                Some(vec![0, 3, 6]),
                Some(vec![]),
                Some(vec![9, 12]),
                None,
                Some(vec![30, 33]),
                Some(vec![]),
            ],
            vec![],
        ];
        let fixture = fixture(pages, &[]).await;
        for order in [[0, 9, 21, 33, 600], [600, 33, 21, 9, 0]] {
            let mut reader = CarriedReader::new(&fixture.warehouse, fixture.previous.clone());
            let mut found = HashMap::new();
            for n in order {
                found.extend(reader.clocks(&[name(n)]).await.expect("clocks"));
            }
            // 21 lay on the page without clocks: none.
            assert_eq!(found, expected(&[0, 9, 33], |_| true), "{order:?}");
        }
    }

    #[tokio::test]
    async fn a_previous_run_without_carried_pages_costs_no_read() {
        // Every page written by a release before this one: no clocks files.
        let pages = [vec![None; 50], vec![None; 50]];
        let fixture = fixture(pages, &[]).await;
        let mut reader = CarriedReader::new(&fixture.warehouse, fixture.previous.clone());
        let names: Vec<String> = (0..1000).map(name).collect();
        assert!(reader.clocks(&names).await.expect("clocks").is_empty());
        assert_eq!(reader.reads, 0);
    }

    #[tokio::test]
    async fn a_damaged_page_carries_nothing_and_the_others_still_count() {
        use object_store::ObjectStoreExt as _;
        let fixture = fixture([pages_of(0..30, 10, 1000), vec![]], &[]).await;
        // Page 1 (objects 11 to 20; object 0 is not listed) damaged: a field this release
        // does not know.
        let damaged = format!(
            "{}/scan/0/0000000001.carried.json",
            fixture.previous.job.dir()
        );
        fixture
            .warehouse
            .object_store()
            .put(
                &fixture.warehouse.path(&damaged).expect("name"),
                object_store::PutPayload::from_static(b"{\"first\":\"x\",\"condemned\":[]}"),
            )
            .await
            .expect("damaged");
        let mut reader = CarriedReader::new(&fixture.warehouse, fixture.previous.clone());
        let all: Vec<usize> = (0..30).collect();
        let names: Vec<String> = all.iter().map(|n| name(*n)).collect();
        let found = reader.clocks(&names).await.expect("clocks");
        assert_eq!(found, expected(&all, |n| n != 0 && !(11..=20).contains(&n)));
    }

    #[tokio::test]
    async fn a_clock_of_an_object_the_previous_verification_walk_found_reachable_is_not_carried() {
        let fixture = fixture([vec![Some(vec![0, 3, 6, 9])], vec![]], &[3, 9]).await;
        let mut reader = CarriedReader::new(&fixture.warehouse, fixture.previous.clone());
        let names: Vec<String> = [0, 3, 6, 9].iter().map(|n| name(*n)).collect();
        let found = reader.clocks(&names).await.expect("clocks");
        assert_eq!(found, expected(&[0, 6], |_| true));
    }
}
