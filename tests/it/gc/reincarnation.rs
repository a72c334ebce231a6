//! Red team 16d: attacks on commit 68d4417 (journals keep every record's latest write; a
//! strict re-incarnation that replaced a drop of a state the previous run saw moves no
//! clock; a clock file written before the previous run started counts as swept by it).
//! A failing test is a bug; it is kept as it is.

use crate::support::gc::hooked_store::{LatePut, collect_in_background};
use crate::support::gc::{Backend, Env, HOUR, Layout, MINUTE, test_config};
use parqdb_catalog::IndexCatalog;

// 1. `Known::for_clock`'s "written before the previous run started" shortcut trusts the
//    store's last-modified as the time the clock file became visible.
//
// Process 1 plans run S while metadata file `o` (index X) is unreachable and stalls in
// the put of o's clock file. Its lease expires; `o` is registered (incarnation H);
// another process finishes S, and a new run P sees `o` reachable and clears its entry
// (P's journal lists H). Then process 1's put lands: a clock from S's walk, which never
// knew H, stamped (backdated) with the time the put began, before P started. H commits
// away from `o`; `o` must stay 2 h.
async fn stalled_clock_put(seed: u64, backdate: bool) {
    let mut stage = LatePut::stage(seed, backdate).await;
    stage.pause_at_the_clock_of_o();
    stage.env.advance(HOUR);
    let process1 = collect_in_background(&stage.env, stage.processes.next(&stage.env));
    stage.store.paused().await;

    let again = stage.publish_o_then_two_runs("S finished").await;
    assert!(
        stage.env.entry_of(&stage.md).await.is_empty(),
        "P saw o reachable: no entry"
    );
    stage.land_then_keep_o(&again, process1).await;
}

#[tokio::test]
async fn stalled_clock_put_stamped_with_its_start_counts_as_swept_by_the_previous_run() {
    stalled_clock_put(16301, true).await;
}

/// Control: the same late put stamped when it lands.
#[tokio::test]
async fn control_stalled_clock_put_stamped_when_it_lands() {
    stalled_clock_put(16302, false).await;
}

// 2. `lineage_after`'s exemption. Each case: run P sees `k` (and `k2`) in some state; the
//    tracked old metadata file `o` of index X is registered (incarnation H) between P and
//    the next runs, loses reachability, and then every record naming index X is replaced
//    by re-incarnations whose replaced writes include, where the history allows, writes
//    P saw. `o` must stay 2 h after it lost reachability.

#[derive(Debug, Clone, Copy)]
enum Churn {
    /// Drop `k`, register `o` there (H), drop, register another index there.
    DropRegisterTwice,
    /// Drop `k` and `k2`; register `o` at `k` (H); rename `k` → `k2` (over `k2`'s
    /// tombstone, whose replaced write P saw) and back; drop; register others over both.
    RenameAwayAndBack,
    /// H is registered at `k2` (a fresh key), renamed to `k` over `k`'s tombstone whose
    /// replaced write P saw, commits away from `o`, and `k2`'s tombstone is replaced.
    RenameOntoSeenDrop,
    /// Like `DropRegisterTwice`, then the final incarnation commits `n` times (its
    /// chain truncated down to the drop it replaced).
    Truncated(usize),
}

async fn exemption(seed: u64, churn: Churn) {
    let env = Env::open(Backend::Memory, seed).await;
    let config = test_config();
    env.register("keep", &Layout::under("keep/1")).await;
    let (k, _, _) = env.register("k", &Layout::under("k/1")).await;
    let (k2, _, _) = env.register("k2", &Layout::under("k2/1")).await;
    let o_layout = Layout::under("x/1");
    let (o_meta, o_loc) = env.new_index(&o_layout).await;
    let o = env.relative(&o_loc);
    env.advance(HOUR);
    // P0 tracks o; P (the previous finished run of what follows) sees k, k2 live.
    for _ in 0..2 {
        env.collect_completed(&config).await;
        env.advance(5 * MINUTE);
    }
    assert!(!env.entry_of(&o).await.is_empty(), "o is tracked");
    let cat = &env.catalog;
    let src = Some(&o_layout.source);
    let commit_away = |at: String| {
        let o_meta = o_meta.clone();
        let o_loc = o_loc.clone();
        let layout = Layout::under("x/2");
        let env = &env;
        async move {
            let id = env.id(&at).await;
            let (_, next) = env.successor(&o_meta, &layout, None).await;
            env.catalog
                .commit(&id, Some(&layout.source), &o_loc, &next)
                .await
                .expect("committed away from o");
        }
    };
    let lost_at;
    match churn {
        Churn::DropRegisterTwice | Churn::Truncated(_) => {
            cat.drop_index(&k).await.expect("dropped");
            cat.register(&k, src, &o_loc).await.expect("H registered");
            env.advance(MINUTE);
            commit_away("k".into()).await;
            lost_at = env.now();
            cat.drop_index(&k).await.expect("dropped");
            let (c_meta, c_loc) = env.new_index(&Layout::under("c/1")).await;
            cat.register(&k, Some(&Layout::under("c/1").source), &c_loc)
                .await
                .expect("C registered");
            if let Churn::Truncated(n) = churn {
                let (mut base_meta, mut base_loc) = (c_meta, c_loc);
                for i in 0..n {
                    let layout = Layout::under(&format!("c/{}", i + 2));
                    let (next_meta, next_loc) = env.successor(&base_meta, &layout, None).await;
                    cat.commit(&k, Some(&layout.source), &base_loc, &next_loc)
                        .await
                        .expect("committed");
                    (base_meta, base_loc) = (next_meta, next_loc);
                }
            }
        }
        Churn::RenameAwayAndBack => {
            cat.drop_index(&k).await.expect("dropped");
            cat.drop_index(&k2).await.expect("dropped");
            cat.register(&k, src, &o_loc).await.expect("H registered");
            env.advance(MINUTE);
            cat.rename(&k, &k2).await.expect("renamed away");
            cat.rename(&k2, &k).await.expect("renamed back");
            commit_away("k".into()).await;
            lost_at = env.now();
            cat.drop_index(&k).await.expect("dropped");
            env.register("k", &Layout::under("c/1")).await;
            env.register("k2", &Layout::under("c2/1")).await;
        }
        Churn::RenameOntoSeenDrop => {
            cat.drop_index(&k).await.expect("dropped");
            let k3 = env.id("k3").await;
            cat.register(&k3, src, &o_loc).await.expect("H registered");
            env.advance(MINUTE);
            cat.rename(&k3, &k).await.expect("renamed onto k");
            commit_away("k".into()).await;
            lost_at = env.now();
            env.register("k3", &Layout::under("c3/1")).await;
        }
    }
    let context = format!("; {churn:?}");
    env.assert_kept_through_retention(lost_at, 5 * MINUTE, &[o], &context, async || {
        env.collect_completed(&config).await;
    })
    .await;
}

#[tokio::test]
async fn drop_register_drop_register_between_runs() {
    exemption(16311, Churn::DropRegisterTwice).await;
}

#[tokio::test]
async fn rename_away_and_back_between_runs() {
    exemption(16312, Churn::RenameAwayAndBack).await;
}

#[tokio::test]
async fn rename_onto_a_drop_the_previous_run_saw() {
    exemption(16313, Churn::RenameOntoSeenDrop).await;
}

#[tokio::test]
async fn reincarnation_chain_truncated_to_its_drop() {
    exemption(16314, Churn::Truncated(15)).await;
}

/// 16 commits push the creation out of the chain: the incarnation still counts as a
/// possible re-incarnation until a finished run has listed it.
#[tokio::test]
async fn reincarnation_chain_truncated_past_its_creation() {
    exemption(16315, Churn::Truncated(16)).await;
}
