//! The queue's priorities: normal keys first, FIFO within a priority, promotion of a key
//! queued low, and dedup, exclusivity and delays across priorities.

use std::time::Duration;

use tokio::time::timeout;

use super::{Priority, QueueConfig, WorkQueue};
use crate::cluster::objects::ObjectKey;

fn key(name: &str) -> ObjectKey {
    ObjectKey::namespaced("default", name)
}

/// Every ready key, in the order `get` hands them out (each marked done).
async fn drain(queue: &WorkQueue<ObjectKey>) -> Vec<String> {
    let mut out = Vec::new();
    while !queue.is_empty() {
        let key = timeout(Duration::from_millis(1), queue.get())
            .await
            .expect("a ready key")
            .expect("not shut down");
        out.push(key.to_string());
        queue.done(&key);
    }
    out
}

#[tokio::test(start_paused = true)]
async fn normal_keys_overtake_the_low_backlog_and_each_priority_is_fifo() {
    let q = WorkQueue::new(QueueConfig::default());
    for name in ["l1", "l2", "l3"] {
        q.add_with(key(name), Priority::Low);
    }
    q.add(key("n1"));
    q.add_with(key("n2"), Priority::Normal);
    assert_eq!(
        (q.len_at(Priority::Low), q.len_at(Priority::Normal)),
        (3, 2)
    );
    assert_eq!(
        drain(&q).await,
        [
            "default/n1",
            "default/n2",
            "default/l1",
            "default/l2",
            "default/l3"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_key_queued_low_and_added_normal_is_promoted_and_queued_once() {
    let q = WorkQueue::new(QueueConfig::default());
    for name in ["a", "b", "c"] {
        q.add_with(key(name), Priority::Low);
    }
    q.add(key("x"));
    q.add(key("b"));
    // Added low again, or normal again: still once, no demotion.
    q.add_with(key("b"), Priority::Low);
    q.add(key("b"));
    q.add_with(key("x"), Priority::Low);
    assert_eq!(q.len(), 4);
    assert_eq!(
        drain(&q).await,
        ["default/x", "default/b", "default/a", "default/c"]
    );
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_key_in_flight_is_not_handed_out_again_and_requeues_at_its_highest_priority() {
    let q = WorkQueue::new(QueueConfig::default());
    q.add_with(key("a"), Priority::Low);
    q.add_with(key("z"), Priority::Low);
    let a = q.get().await.unwrap();
    assert_eq!(a, key("a"));
    // Re-added while in flight, low then normal: not handed out until done.
    q.add_with(key("a"), Priority::Low);
    q.add(key("a"));
    let next = q.get().await.unwrap();
    assert_eq!(next, key("z"), "only the other key while a is in flight");
    assert!(
        timeout(Duration::from_millis(5), q.get()).await.is_err(),
        "a is not handed out twice"
    );
    q.add_with(key("y"), Priority::Low);
    q.done(&a);
    // Requeued normal: ahead of the low backlog.
    assert_eq!(drain(&q).await, ["default/a", "default/y"]);
    q.done(&next);
}

#[tokio::test(start_paused = true)]
async fn delayed_and_rate_limited_adds_come_back_normal() {
    let q = WorkQueue::new(QueueConfig::default());
    q.add_with(key("backlog"), Priority::Low);
    q.add_after(key("later"), Duration::from_millis(10));
    q.add_rate_limited(key("retry"));
    tokio::time::advance(Duration::from_millis(20)).await;
    assert_eq!(q.len_at(Priority::Normal), 2);
    assert_eq!(
        drain(&q).await,
        ["default/retry", "default/later", "default/backlog"]
    );
    // The key's backoff is counted as before.
    assert_eq!(q.num_requeues(&key("retry")), 1);
}

#[tokio::test(start_paused = true)]
async fn without_priorities_every_add_is_one_fifo() {
    let q = WorkQueue::new(QueueConfig {
        priorities: false,
        ..QueueConfig::default()
    });
    q.add_with(key("l1"), Priority::Low);
    q.add(key("n1"));
    q.add_with(key("l2"), Priority::Low);
    assert_eq!(q.len_at(Priority::Low), 0);
    assert_eq!(drain(&q).await, ["default/l1", "default/n1", "default/l2"]);
}

#[tokio::test(start_paused = true)]
async fn depth_is_reported_per_priority_and_a_promotion_moves_a_key_between_them() {
    use crate::metrics::{Metrics, sample};
    let metrics = Metrics::new();
    let q = WorkQueue::with_metrics(QueueConfig::default(), metrics.workqueue("w"));
    let depth = |priority: &str| {
        let text = metrics.render();
        let at = sample(
            &text,
            &format!("reconciler_workqueue_depth{{name=\"w\",priority=\"{priority}\"}}"),
        );
        (at, sample(&text, "workqueue_depth{name=\"w\"}"))
    };
    q.add_with(key("l1"), Priority::Low);
    q.add_with(key("l2"), Priority::Low);
    q.add(key("n1"));
    assert_eq!(depth("low"), (Some(2.0), Some(3.0)));
    assert_eq!(depth("normal"), (Some(1.0), Some(3.0)));
    // A change of l2 promotes it.
    q.add(key("l2"));
    assert_eq!(depth("low"), (Some(1.0), Some(3.0)));
    assert_eq!(depth("normal"), (Some(2.0), Some(3.0)));
    assert_eq!(drain(&q).await, ["default/n1", "default/l2", "default/l1"]);
    assert_eq!(depth("low"), (Some(0.0), Some(0.0)));
    assert_eq!(depth("normal"), (Some(0.0), Some(0.0)));
}

/// A key that counts its clones: the queue must store each key once, not copy it per map.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Counted(u32);

static CLONES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Clone for Counted {
    fn clone(&self) -> Self {
        CLONES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Self(self.0)
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_is_stored_once_however_many_structures_know_it() {
    let clones = || CLONES.load(std::sync::atomic::Ordering::SeqCst);
    let q = WorkQueue::new(QueueConfig::default());
    for i in 0..100 {
        q.add_with(Counted(i), Priority::Low);
    }
    for i in 0..50 {
        q.add(Counted(i)); // promotions
    }
    for i in 100..120 {
        q.add_after(Counted(i), Duration::from_secs(1));
    }
    assert_eq!(clones(), 0, "queued keys must not be copied");
    // A failing key is also recorded by the backoff, which outlives its queue entries.
    q.add_rate_limited(Counted(200));
    assert_eq!(clones(), 1);
    tokio::time::advance(Duration::from_secs(2)).await;
    let first = timeout(Duration::from_millis(1), q.get())
        .await
        .expect("ready")
        .expect("open");
    assert_eq!(clones(), 2, "only the key handed out is copied");
    q.done(&first);
    assert_eq!(q.len(), 121 - 1 + 1 - 1, "every other key is still queued");
}
