//! The fault schedule, drawn from the seed alone: the same seed, mode, duration and replicas
//! give the same schedule on any machine (ChaCha8's stream is fixed), so a failing run is
//! replayed with `./dev robustness --seed N`.
//!
//! Faults come in two lanes that run at once, so they combine: the **cluster** lane
//! (kube-apiserver or etcd killed, history compacted, a competing writer, a guest hot swap, a
//! configuration reload, a rollout of the other version through shadow and a canary) and the **replica** lane (a replica killed, paused past its lease, or
//! cut off from the API server by its relay). Within a lane one fault follows another after a
//! gap.

use std::fmt;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::history::Mode;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// kube-apiserver `SIGKILL`ed, started again after `hold`.
    ApiserverKill,
    /// etcd `SIGKILL`ed, started again after `hold`.
    EtcdKill,
    /// etcd's history compacted to now and kube-apiserver restarted gracefully (its watch
    /// cache rebuilt): watches resume from a resourceVersion nobody holds (410 Gone) and relist.
    Compaction,
    /// Another client patches the objects' status for `hold`: the guest's optimistic status
    /// writes meet 409 Conflict.
    Competitor,
    /// Every replica's guest file replaced by the other build (version 1 ↔ 2).
    HotSwap,
    /// Every replica's host.yaml rewritten with other limits: the guest's controller restarts.
    ConfigReload,
    /// Every replica's host.yaml given a rollout plan (shadow, then a canary of 50 %), then its
    /// guest file replaced by the other build: the new version rolls out beside the old one
    /// (promoted, or rolled back by a gate) while the other faults go on.
    Rollout,
    /// A replica `SIGKILL`ed, started again after `hold`.
    ReplicaKill,
    /// A replica `SIGSTOP`ped for `hold` (longer than its lease), then `SIGCONT`.
    ReplicaPause,
    /// A replica's relay forwards nothing for `hold`; its connections die.
    Blackhole,
    /// A replica's relay delays every byte by `delay` for `hold`.
    Delay,
    /// A replica's connections cut at once, then `hold` of blackhole-free service.
    Drop,
}

impl FaultKind {
    pub const ALL: [Self; 12] = [
        Self::ApiserverKill,
        Self::EtcdKill,
        Self::Compaction,
        Self::Competitor,
        Self::HotSwap,
        Self::ConfigReload,
        Self::Rollout,
        Self::ReplicaKill,
        Self::ReplicaPause,
        Self::Blackhole,
        Self::Delay,
        Self::Drop,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::ApiserverKill => "apiserver-kill",
            Self::EtcdKill => "etcd-kill",
            Self::Compaction => "compaction",
            Self::Competitor => "competitor",
            Self::HotSwap => "hot-swap",
            Self::ConfigReload => "config-reload",
            Self::Rollout => "rollout",
            Self::ReplicaKill => "replica-kill",
            Self::ReplicaPause => "replica-pause",
            Self::Blackhole => "blackhole",
            Self::Delay => "delay",
            Self::Drop => "drop",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == text)
    }

    fn on_replica(self) -> bool {
        matches!(
            self,
            Self::ReplicaKill | Self::ReplicaPause | Self::Blackhole | Self::Delay | Self::Drop
        )
    }
}

/// Which replica a replica fault hits, resolved when it starts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// Leader mode: whoever holds the lease then.
    Leader,
    /// Leader mode: a replica not holding it.
    Standby,
    Replica(String),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Leader => f.write_str("the leader"),
            Self::Standby => f.write_str("the standby"),
            Self::Replica(r) => write!(f, "replica {r}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    pub index: usize,
    /// From the start of the faulty phase.
    pub at: Duration,
    pub kind: FaultKind,
    pub target: Option<Target>,
    pub hold: Duration,
    /// `Delay`'s delay.
    pub delay: Duration,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{:<2} t+{:>6.1}s {:<14} hold {:>5.1}s",
            self.index,
            self.at.as_secs_f64(),
            self.kind.name(),
            self.hold.as_secs_f64()
        )?;
        if let Some(target) = &self.target {
            write!(f, " on {target}")?;
        }
        if self.kind == FaultKind::Delay {
            write!(f, " ({} ms)", self.delay.as_millis())?;
        }
        Ok(())
    }
}

/// What the schedule is drawn for.
#[derive(Clone, Debug)]
pub struct Plan {
    pub seed: u64,
    pub mode: Mode,
    pub duration: Duration,
    pub lease: Duration,
    pub replicas: Vec<String>,
    /// The kinds to draw from (all by default).
    pub kinds: Vec<FaultKind>,
}

/// Draws the schedule: every fault starts and ends within `duration`.
pub fn schedule(plan: &Plan) -> Vec<Fault> {
    let mut rng = ChaCha8Rng::seed_from_u64(plan.seed);
    let cluster: Vec<FaultKind> = plan
        .kinds
        .iter()
        .copied()
        .filter(|k| !k.on_replica())
        .collect();
    let replica: Vec<FaultKind> = plan
        .kinds
        .iter()
        .copied()
        .filter(|k| k.on_replica())
        .collect();
    let mut faults = Vec::new();
    for lane in [cluster, replica] {
        if lane.is_empty() {
            continue;
        }
        let mut at = secs(&mut rng, 2.0, 6.0);
        loop {
            let kind = lane[rng.random_range(0..lane.len())];
            let hold = hold(&mut rng, kind, plan.lease);
            if at + hold > plan.duration {
                break;
            }
            let target = kind.on_replica().then(|| target(&mut rng, plan));
            let delay = if kind == FaultKind::Delay {
                Duration::from_millis(rng.random_range(100..=500))
            } else {
                Duration::ZERO
            };
            faults.push(Fault {
                index: 0,
                at,
                kind,
                target,
                hold,
                delay,
            });
            // A gap in which the lane's last fault heals (a restarted replica rejoins).
            at += hold + secs(&mut rng, 3.0, 9.0);
        }
    }
    faults.sort_by_key(|f| f.at);
    for (i, f) in faults.iter_mut().enumerate() {
        f.index = i;
    }
    faults
}

fn secs(rng: &mut ChaCha8Rng, from: f64, to: f64) -> Duration {
    Duration::from_secs_f64(rng.random_range(from..to))
}

fn hold(rng: &mut ChaCha8Rng, kind: FaultKind, lease: Duration) -> Duration {
    let lease = lease.as_secs_f64();
    match kind {
        FaultKind::ApiserverKill | FaultKind::EtcdKill => secs(rng, 0.5, 4.0),
        FaultKind::Compaction | FaultKind::HotSwap | FaultKind::ConfigReload => Duration::ZERO,
        // The plan's steps: a shadow of 3 s and a canary of 3 s, then the promotion.
        FaultKind::Rollout => secs(rng, 6.0, 8.0),
        FaultKind::Competitor => secs(rng, 4.0, 10.0),
        FaultKind::ReplicaKill => secs(rng, 0.5, 5.0),
        // Longer than the lease: the classic stalled leader.
        FaultKind::ReplicaPause => secs(rng, lease * 1.5, lease * 2.5),
        FaultKind::Blackhole => secs(rng, lease * 0.5, lease * 2.5),
        FaultKind::Delay | FaultKind::Drop => secs(rng, 3.0, 10.0),
    }
}

fn target(rng: &mut ChaCha8Rng, plan: &Plan) -> Target {
    match plan.mode {
        Mode::Leader => {
            if rng.random_bool(0.7) {
                Target::Leader
            } else {
                Target::Standby
            }
        }
        Mode::Sharded => {
            Target::Replica(plan.replicas[rng.random_range(0..plan.replicas.len())].clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(seed: u64) -> Plan {
        Plan {
            seed,
            mode: Mode::Sharded,
            duration: Duration::from_secs(300),
            lease: Duration::from_secs(6),
            replicas: vec!["a".into(), "b".into(), "c".into()],
            kinds: FaultKind::ALL.to_vec(),
        }
    }

    #[test]
    fn a_seed_gives_one_schedule_and_another_seed_another() {
        assert_eq!(schedule(&plan(7)), schedule(&plan(7)));
        assert_ne!(schedule(&plan(7)), schedule(&plan(8)));
    }

    #[test]
    fn faults_fit_the_duration_and_both_lanes_overlap() {
        let faults = schedule(&plan(3));
        assert!(faults.len() > 10, "{} faults in 300 s", faults.len());
        assert!(
            faults
                .iter()
                .all(|f| f.at + f.hold <= Duration::from_secs(300))
        );
        let overlapping = faults.iter().enumerate().any(|(i, a)| {
            faults[i + 1..]
                .iter()
                .any(|b| b.at < a.at + a.hold.max(Duration::from_secs(1)))
        });
        assert!(overlapping, "two lanes must combine faults");
        for f in &faults {
            assert_eq!(f.target.is_some(), f.kind.on_replica(), "{f}");
        }
    }

    #[test]
    fn a_pause_outlasts_the_lease() {
        let faults = schedule(&Plan {
            kinds: vec![FaultKind::ReplicaPause],
            ..plan(11)
        });
        assert!(!faults.is_empty());
        assert!(faults.iter().all(|f| f.hold > Duration::from_secs(6)));
    }

    #[test]
    fn names_parse_back() {
        for kind in FaultKind::ALL {
            assert_eq!(FaultKind::parse(kind.name()), Some(kind));
        }
        assert_eq!(FaultKind::parse("meteor"), None);
    }
}
