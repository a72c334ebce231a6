//! The checker: Wing & Gong's search for a linearization of a [`History`] against a
//! sequential model of the catalog (see the parent module).

use std::collections::{HashMap, HashSet};
use std::fmt;

use parqdb_catalog::ErrorKind;

use super::{Call, History, Loc, Op, Ret, describe, mix};

/// What a successful check found.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    /// Operations in the history.
    pub operations: usize,
    /// Model steps checked (a listing counts one per identifier of its namespace).
    pub steps: usize,
    /// Operations with an unknown outcome.
    pub unknown: usize,
    /// Operations without effect or information (dropped before the search).
    pub uninformative: usize,
    /// Independent partitions searched.
    pub partitions: usize,
    /// Search iterations.
    pub explored: u64,
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} operations ({} model steps, {} unknown outcomes, {} uninformative) linearizable; {} partitions, {} search iterations",
            self.operations,
            self.steps,
            self.unknown,
            self.uninformative,
            self.partitions,
            self.explored
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Exact(Option<Loc>),
    Present,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Observe { id: usize, expect: Expect },
    RegisterOk { id: usize, loc: Loc },
    RegisterExists { id: usize },
    RegisterMaybe { id: usize, loc: Loc },
    CommitOk { id: usize, base: Loc, new: Loc },
    CommitAlready { id: usize, new: Loc },
    CommitConflict { id: usize, base: Loc, new: Loc },
    CommitMaybe { id: usize, base: Loc, new: Loc },
    DropOk { id: usize },
    DropMaybe { id: usize },
    RenameOk { from: usize, to: usize },
    RenameExists { from: usize, to: usize },
    RenameMaybe { from: usize, to: usize },
}

impl Step {
    /// A known-outcome step that never changes the state: if it is possible now, placing
    /// it now is as good as anywhere later, so the search places it without a choice point.
    fn read_only(&self) -> bool {
        matches!(
            self,
            Step::Observe { .. }
                | Step::RegisterExists { .. }
                | Step::CommitAlready { .. }
                | Step::CommitConflict { .. }
                | Step::RenameExists { .. }
        )
    }

    fn ids(&self) -> (usize, Option<usize>) {
        match *self {
            Step::Observe { id, .. }
            | Step::RegisterOk { id, .. }
            | Step::RegisterExists { id }
            | Step::RegisterMaybe { id, .. }
            | Step::CommitOk { id, .. }
            | Step::CommitAlready { id, .. }
            | Step::CommitConflict { id, .. }
            | Step::CommitMaybe { id, .. }
            | Step::DropOk { id }
            | Step::DropMaybe { id } => (id, None),
            Step::RenameOk { from, to }
            | Step::RenameExists { from, to }
            | Step::RenameMaybe { from, to } => (from, Some(to)),
        }
    }

    /// The states this step can lead to from `s` (0 = absent, `loc + 1` = present).
    fn next(&self, s: &[u32]) -> Vec<Vec<u32>> {
        let with = |changes: &[(usize, u32)]| {
            let mut t = s.to_vec();
            for &(id, v) in changes {
                t[id] = v;
            }
            t
        };
        let p = |loc: Loc| loc + 1;
        let mut out = Vec::new();
        match *self {
            Step::Observe { id, expect } => {
                let ok = match expect {
                    Expect::Exact(None) => s[id] == 0,
                    Expect::Exact(Some(loc)) => s[id] == p(loc),
                    Expect::Present => s[id] != 0,
                };
                if ok {
                    out.push(s.to_vec());
                }
            }
            Step::RegisterOk { id, loc } => {
                if s[id] == 0 {
                    out.push(with(&[(id, p(loc))]));
                }
            }
            Step::RegisterExists { id } => {
                if s[id] != 0 {
                    out.push(s.to_vec());
                }
            }
            Step::RegisterMaybe { id, loc } => {
                out.push(s.to_vec());
                if s[id] == 0 {
                    out.push(with(&[(id, p(loc))]));
                }
            }
            Step::CommitOk { id, base, new } => {
                if s[id] == p(base) {
                    out.push(with(&[(id, p(new))]));
                }
            }
            Step::CommitAlready { id, new } => {
                if s[id] == p(new) {
                    out.push(s.to_vec());
                }
            }
            Step::CommitConflict { id, base, .. } => {
                // The base is not current. (`new` may be: a request that is not a replay
                // of the commit that made it current is a conflict too.)
                if s[id] != 0 && s[id] != p(base) {
                    out.push(s.to_vec());
                }
            }
            Step::CommitMaybe { id, base, new } => {
                out.push(s.to_vec());
                if s[id] == p(base) {
                    out.push(with(&[(id, p(new))]));
                }
            }
            Step::DropOk { id } => {
                if s[id] != 0 {
                    out.push(with(&[(id, 0)]));
                }
            }
            Step::DropMaybe { id } => {
                out.push(s.to_vec());
                if s[id] != 0 {
                    out.push(with(&[(id, 0)]));
                }
            }
            Step::RenameOk { from, to } => {
                if from != to && s[from] != 0 && s[to] == 0 {
                    out.push(with(&[(from, 0), (to, s[from])]));
                }
            }
            Step::RenameExists { from, to } => {
                if s[from] != 0 && s[to] != 0 {
                    out.push(s.to_vec());
                }
            }
            Step::RenameMaybe { from, to } => {
                out.push(s.to_vec());
                if from != to && s[from] != 0 && s[to] == 0 {
                    out.push(with(&[(from, 0), (to, s[from])]));
                }
            }
        }
        out
    }
}

#[derive(Debug, Clone, Copy)]
struct CheckOp {
    invoke: u64,
    /// `None`: the outcome is unknown; the step may happen at any point after `invoke`.
    complete: Option<u64>,
    step: Step,
    origin: usize,
}

fn not_found(id: usize) -> Step {
    Step::Observe {
        id,
        expect: Expect::Exact(None),
    }
}

/// Translate recorded operations into model steps. `Err` for a result no model state
/// can explain (a bogus answer or an error kind the catalog must never return here).
fn steps(history: &History) -> Result<(Vec<CheckOp>, usize), String> {
    let mut out = Vec::new();
    let mut uninformative = 0;
    for (origin, op) in history.ops.iter().enumerate() {
        let at = |step: Step| CheckOp {
            invoke: op.invoke,
            complete: Some(op.complete),
            step,
            origin,
        };
        let maybe = |step: Step| CheckOp {
            invoke: op.invoke,
            complete: None,
            step,
            origin,
        };
        let unexpected = || Err(format!("unexpected result: {}", describe(history, op)));
        use ErrorKind as K;
        let mut steps: Vec<CheckOp> = Vec::new();
        match (&op.call, &op.ret) {
            (_, Ret::Bogus(_)) => return unexpected(),
            // No effect and no information: a failed read, or a write that certainly did
            // not apply (the store failed before it, or it gave up contending).
            (Call::Load { .. } | Call::List { .. }, Ret::Failed(K::StoreUnavailable)) => {}
            (Call::Load { .. } | Call::List { .. }, Ret::Unknown) => return unexpected(),
            // (Operations without a base never answer COMMIT_CONFLICT: giving up under
            // contention is CONCURRENT_MODIFICATION.)
            (
                Call::Register { .. } | Call::Drop { .. } | Call::Rename { .. },
                Ret::Failed(K::StoreUnavailable | K::ConcurrentModification),
            ) => {}
            (Call::Commit { .. }, Ret::Failed(K::StoreUnavailable | K::ConcurrentModification)) => {
            }

            (Call::Load { id }, Ret::Loaded(loc)) => steps.push(at(Step::Observe {
                id: *id,
                expect: Expect::Exact(Some(*loc)),
            })),
            (Call::Load { id }, Ret::Failed(K::IndexNotFound)) => steps.push(at(not_found(*id))),

            (Call::Register { id, loc }, Ret::Registered) => {
                steps.push(at(Step::RegisterOk { id: *id, loc: *loc }))
            }
            (Call::Register { id, .. }, Ret::Failed(K::AlreadyExists)) => {
                steps.push(at(Step::RegisterExists { id: *id }))
            }
            (Call::Register { id, loc }, Ret::Unknown) => {
                steps.push(maybe(Step::RegisterMaybe { id: *id, loc: *loc }))
            }

            (
                Call::Commit { id, base, new },
                Ret::Committed {
                    already_applied: false,
                },
            ) => steps.push(at(Step::CommitOk {
                id: *id,
                base: *base,
                new: *new,
            })),
            (
                Call::Commit { id, new, .. },
                Ret::Committed {
                    already_applied: true,
                },
            ) => steps.push(at(Step::CommitAlready { id: *id, new: *new })),
            (Call::Commit { id, base, new }, Ret::Failed(K::CommitConflict)) => {
                steps.push(at(Step::CommitConflict {
                    id: *id,
                    base: *base,
                    new: *new,
                }))
            }
            (Call::Commit { id, .. }, Ret::Failed(K::IndexNotFound)) => {
                steps.push(at(not_found(*id)))
            }
            (Call::Commit { id, base, new }, Ret::Unknown) => {
                steps.push(maybe(Step::CommitMaybe {
                    id: *id,
                    base: *base,
                    new: *new,
                }))
            }

            (Call::Drop { id }, Ret::Dropped) => steps.push(at(Step::DropOk { id: *id })),
            (Call::Drop { id }, Ret::Failed(K::IndexNotFound)) => steps.push(at(not_found(*id))),
            (Call::Drop { id }, Ret::Unknown) => steps.push(maybe(Step::DropMaybe { id: *id })),

            (Call::Rename { from, to }, Ret::Renamed(loc)) => {
                steps.push(at(Step::RenameOk {
                    from: *from,
                    to: *to,
                }));
                // The answered pointer is a load of `to` after the move.
                steps.push(at(Step::Observe {
                    id: *to,
                    expect: Expect::Exact(Some(*loc)),
                }));
            }
            (Call::Rename { from, .. }, Ret::Failed(K::IndexNotFound)) => {
                steps.push(at(not_found(*from)))
            }
            (Call::Rename { from, to }, Ret::Failed(K::AlreadyExists)) => {
                steps.push(at(Step::RenameExists {
                    from: *from,
                    to: *to,
                }))
            }
            (Call::Rename { from, to }, Ret::Unknown) => steps.push(maybe(Step::RenameMaybe {
                from: *from,
                to: *to,
            })),

            (Call::List { ns, .. }, Ret::Listed(listed)) => {
                for id in history.universe.ids_in(*ns) {
                    let expect = if listed.contains(&id) {
                        Expect::Present
                    } else {
                        Expect::Exact(None)
                    };
                    steps.push(at(Step::Observe { id, expect }));
                }
            }
            _ => return unexpected(),
        }
        if steps.is_empty() {
            uninformative += 1;
        }
        out.extend(steps);
    }
    Ok((out, uninformative))
}

/// Search budget per partition (iterations); an exhausted budget fails the check.
const BUDGET: u64 = 200_000_000;

/// Check `history` for linearizability. `Err` explains the failure: the operations at the
/// deepest point the search reached, none of which could be linearized next.
pub fn check(history: &History) -> Result<CheckReport, String> {
    let (ops, uninformative) = steps(history)?;
    let ids = history.universe.ids.len();
    // Partition by identifier: union the two identifiers of every rename.
    let mut parent: Vec<usize> = (0..ids).collect();
    fn find(parent: &mut [usize], x: usize) -> usize {
        let mut root = x;
        while parent[root] != root {
            root = parent[root];
        }
        let mut x = x;
        while parent[x] != root {
            let next = parent[x];
            parent[x] = root;
            x = next;
        }
        root
    }
    for op in &ops {
        if let (a, Some(b)) = op.step.ids() {
            let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
            parent[ra] = rb;
        }
    }
    let mut partitions: HashMap<usize, Vec<CheckOp>> = HashMap::new();
    for op in &ops {
        let root = find(&mut parent, op.step.ids().0);
        partitions.entry(root).or_default().push(*op);
    }
    let mut report = CheckReport {
        operations: history.ops.len(),
        steps: ops.len(),
        unknown: history.unknown(),
        uninformative,
        partitions: partitions.len(),
        explored: 0,
    };
    let mut roots: Vec<usize> = partitions.keys().copied().collect();
    roots.sort();
    for root in roots {
        match search(&partitions[&root], ids, history) {
            Ok(explored) => report.explored += explored,
            Err(failure) => return Err(localize(&partitions[&root], ids, history, failure)),
        }
    }
    Ok(report)
}

/// The operations of a history cut at time `cut`: those invoked before it, the ones still
/// running then becoming unknown outcomes (mutations) or dropped (observations).
fn cut_at(ops: &[CheckOp], cut: u64) -> Vec<CheckOp> {
    ops.iter()
        .filter(|op| op.invoke < cut)
        .filter_map(|op| {
            if op.complete.is_some_and(|c| c < cut) {
                return Some(*op);
            }
            let step = match op.step {
                Step::RegisterOk { id, loc } | Step::RegisterMaybe { id, loc } => {
                    Step::RegisterMaybe { id, loc }
                }
                Step::CommitOk { id, base, new } | Step::CommitMaybe { id, base, new } => {
                    Step::CommitMaybe { id, base, new }
                }
                Step::DropOk { id } | Step::DropMaybe { id } => Step::DropMaybe { id },
                Step::RenameOk { from, to } | Step::RenameMaybe { from, to } => {
                    Step::RenameMaybe { from, to }
                }
                _ => return None,
            };
            Some(CheckOp {
                complete: None,
                step,
                ..*op
            })
        })
        .collect()
}

/// After a failed search: find the earliest cut of the history that is already not
/// linearizable (binary search), and show the operations just before it.
fn localize(ops: &[CheckOp], ids: usize, history: &History, failure: String) -> String {
    let mut times: Vec<u64> = ops.iter().filter_map(|op| op.complete).collect();
    times.sort();
    times.dedup();
    let (mut lo, mut hi) = (0usize, times.len());
    // Invariant: the cut after times[hi - 1] fails (the whole history does); find the first.
    while lo < hi {
        let mid = (lo + hi) / 2;
        if search(&cut_at(ops, times[mid] + 1), ids, history).is_err() {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let Some(&cut) = times.get(lo) else {
        return failure;
    };
    let mut text = format!(
        "not linearizable; the earliest failing cut of the history is at time {cut}, \
         when this operation completed:\n"
    );
    let mut window: Vec<&CheckOp> = ops.iter().filter(|op| op.complete == Some(cut)).collect();
    window.dedup_by_key(|op| op.origin);
    for op in &window {
        text.push_str(&format!(
            "  {} [as {:?}]\n",
            describe(history, &history.ops[op.origin]),
            op.step
        ));
    }
    let touched: HashSet<usize> = window
        .iter()
        .flat_map(|op| {
            let (a, b) = op.step.ids();
            std::iter::once(a).chain(b)
        })
        .collect();
    text.push_str("Operations on those identifiers invoked before then (latest 80):\n");
    let mut origins: Vec<usize> = ops
        .iter()
        .filter(|op| op.invoke <= cut)
        .filter(|op| {
            let (a, b) = op.step.ids();
            touched.contains(&a) || b.is_some_and(|b| touched.contains(&b))
        })
        .map(|op| op.origin)
        .collect();
    origins.sort_by_key(|&o| history.ops[o].invoke);
    origins.dedup();
    let skip = origins.len().saturating_sub(80);
    for &o in &origins[skip..] {
        text.push_str(&format!("  {}\n", describe(history, &history.ops[o])));
    }
    if ops.len() <= 400 {
        text.push_str("\nThe search's own report:\n");
        text.push_str(&failure);
    }
    text
}

#[derive(Clone, Copy, Debug)]
enum Node {
    Call(usize),
    Return(usize),
}

struct Frame {
    op: usize,
    alt: usize,
    previous: Vec<u32>,
    /// Placed without a choice point (a read-only step placed as soon as possible).
    forced: bool,
}

/// Wing & Gong's search with Lowe's memoisation over one partition.
///
/// Every operation has a call node in a time-ordered list, and those with a known outcome
/// also a return node; a call before the first remaining return may be linearized next.
/// An operation with an unknown outcome has no return: it may be linearized at any later
/// point, first tried without effect (the same as never), then with its effect.
fn search(ops: &[CheckOp], ids: usize, history: &History) -> Result<u64, String> {
    // Calls before returns at equal times: more concurrency, never less.
    let mut events: Vec<(u64, u8, Node)> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        events.push((op.invoke, 0, Node::Call(i)));
        if let Some(complete) = op.complete {
            events.push((complete, 1, Node::Return(i)));
        }
    }
    if events.is_empty() {
        return Ok(0);
    }
    events.sort_by_key(|&(time, order, _)| (time, order));
    const END: usize = usize::MAX;
    let n = events.len();
    let head = n;
    let mut next: Vec<usize> = (0..=n)
        .map(|i| if i + 1 >= n { END } else { i + 1 })
        .collect();
    let mut prev: Vec<usize> = (0..=n).map(|i| if i == 0 { head } else { i - 1 }).collect();
    next[head] = 0;
    let nodes: Vec<Node> = events.iter().map(|e| e.2).collect();
    let mut call_node = vec![0; ops.len()];
    let mut return_node = vec![None; ops.len()];
    for (index, node) in nodes.iter().enumerate() {
        match *node {
            Node::Call(i) => call_node[i] = index,
            Node::Return(i) => return_node[i] = Some(index),
        }
    }
    let unlink = |next: &mut Vec<usize>, prev: &mut Vec<usize>, x: usize| {
        let (p, q) = (prev[x], next[x]);
        next[p] = q;
        if q != END {
            prev[q] = p;
        }
    };
    let relink = |next: &mut Vec<usize>, prev: &mut Vec<usize>, x: usize| {
        let (p, q) = (prev[x], next[x]);
        next[p] = x;
        if q != END {
            prev[q] = x;
        }
    };
    let zobrist: Vec<u128> = (0..ops.len() as u64)
        .map(|i| ((mix(2 * i) as u128) << 64) | mix(2 * i + 1) as u128)
        .collect();

    let mut remaining = ops.iter().filter(|op| op.complete.is_some()).count();
    let mut state = vec![0u32; ids];
    let mut linearized: u128 = 0;
    let mut memo: HashSet<(u128, Vec<u32>)> = HashSet::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut resume: Option<(usize, usize)> = None;
    let mut cursor = next[head];
    let mut explored: u64 = 0;
    let mut deepest: (usize, Vec<u32>, Vec<usize>) = (0, state.clone(), Vec::new());

    let mut fresh_scan = true;
    loop {
        if remaining == 0 {
            return Ok(explored);
        }
        explored += 1;
        if explored > BUDGET {
            return Err(format!(
                "the linearizability search exhausted its budget of {BUDGET} iterations \
                 ({} of {} steps placed at best); reduce PARQDB_LIN_CLIENTS",
                deepest.0,
                ops.len()
            ));
        }
        // At the start of a scan, place a possible read-only step first, without a choice.
        let mut backtrack = false;
        let mut placed: Option<(usize, usize, Vec<u32>, bool)> = None;
        if fresh_scan {
            fresh_scan = false;
            let mut x = next[head];
            while x != END {
                let Node::Call(i) = nodes[x] else { break };
                let possible = (ops[i].complete.is_some() && ops[i].step.read_only())
                    .then(|| ops[i].step.next(&state).into_iter().next())
                    .flatten();
                if let Some(candidate) = possible {
                    if memo.insert((linearized ^ zobrist[i], candidate.clone())) {
                        placed = Some((i, 0, candidate, true));
                    } else {
                        backtrack = true; // this configuration failed before
                    }
                    break;
                }
                x = next[x];
            }
        }
        if placed.is_none() && !backtrack {
            assert!(cursor != END, "a return node must remain while ops remain");
            match nodes[cursor] {
                Node::Call(i) => {
                    let start = match resume {
                        Some((node, alt)) if node == cursor => {
                            resume = None;
                            alt
                        }
                        _ => 0,
                    };
                    let key = linearized ^ zobrist[i];
                    for (alt, candidate) in
                        ops[i].step.next(&state).into_iter().enumerate().skip(start)
                    {
                        if memo.insert((key, candidate.clone())) {
                            placed = Some((i, alt, candidate, false));
                            break;
                        }
                    }
                    if placed.is_none() {
                        cursor = next[cursor];
                        continue;
                    }
                }
                Node::Return(_) => backtrack = true,
            }
        }
        if let Some((i, alt, candidate, forced)) = placed {
            let previous = std::mem::replace(&mut state, candidate);
            stack.push(Frame {
                op: i,
                alt,
                previous,
                forced,
            });
            linearized ^= zobrist[i];
            unlink(&mut next, &mut prev, call_node[i]);
            if let Some(r) = return_node[i] {
                unlink(&mut next, &mut prev, r);
                remaining -= 1;
            }
            if stack.len() > deepest.0 {
                deepest = (stack.len(), state.clone(), Vec::new());
            }
            cursor = next[head];
            fresh_scan = true;
            continue;
        }
        debug_assert!(backtrack);
        if stack.len() == deepest.0 && deepest.2.is_empty() {
            // Remember what could not be placed here, for the report.
            let mut window = Vec::new();
            let mut x = next[head];
            while x != END {
                match nodes[x] {
                    Node::Call(i) => window.push(i),
                    Node::Return(i) => {
                        window.push(i);
                        break;
                    }
                }
                x = next[x];
            }
            deepest.2 = window;
        }
        // Undo forced placements, then resume the last choice point with its next choice.
        loop {
            let Some(frame) = stack.pop() else {
                return Err(failure_report(ops, history, &deepest));
            };
            if let Some(r) = return_node[frame.op] {
                relink(&mut next, &mut prev, r);
                remaining += 1;
            }
            relink(&mut next, &mut prev, call_node[frame.op]);
            linearized ^= zobrist[frame.op];
            state = frame.previous;
            if !frame.forced {
                resume = Some((call_node[frame.op], frame.alt + 1));
                cursor = call_node[frame.op];
                break;
            }
        }
    }
}

fn failure_report(
    ops: &[CheckOp],
    history: &History,
    deepest: &(usize, Vec<u32>, Vec<usize>),
) -> String {
    let (depth, state, window) = deepest;
    let mut text = format!(
        "not linearizable: at best {depth} of {} steps of this partition could be placed. \
         Model state there:\n",
        ops.len()
    );
    for (id, value) in state.iter().enumerate() {
        if *value != 0 {
            text.push_str(&format!(
                "  #{id} {} = L{}\n",
                history.universe.ids[id],
                value - 1
            ));
        }
    }
    text.push_str("None of these could be linearized next:\n");
    let mut seen = HashSet::new();
    for &i in window {
        if seen.insert(ops[i].origin) {
            text.push_str(&format!(
                "  {} [as {:?}]\n",
                describe(history, &history.ops[ops[i].origin]),
                ops[i].step
            ));
        }
    }
    text.push_str("The whole partition, by invocation:\n");
    let mut origins: Vec<usize> = ops.iter().map(|op| op.origin).collect();
    origins.sort();
    origins.dedup();
    let mut related: Vec<&Op> = origins.iter().map(|&o| &history.ops[o]).collect();
    related.sort_by_key(|op| op.invoke);
    for op in related.iter().take(600) {
        text.push_str(&format!("  {}\n", describe(history, op)));
    }
    text
}
