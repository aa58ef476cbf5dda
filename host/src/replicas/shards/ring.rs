//! Membership and slot ownership on Leases: who is in the ring, and which replica may reconcile
//! which slots, such that no slot is ever active on two replicas at once.
//!
//! Two kinds of `coordination.k8s.io/v1` Lease, both labelled `reconciler.dev/ring=<ring>`:
//!
//! - one **member lease** per replica (`<ring>-member-<identity>`), renewed every
//!   `renew_every`. Members are the member leases that exist; one whose resourceVersion has
//!   not changed for a whole lease duration *as observed here* (local clock, like client-go's
//!   leader election, so clock skew between nodes does not matter) is stale and is deleted with
//!   a precondition on its uid and resourceVersion: if it renewed meanwhile, the delete fails.
//! - one **assignment lease** (`<ring>-shards`) whose annotation says which member lease (by
//!   uid) holds which slots. It is only ever changed with optimistic concurrency, so two
//!   replicas can never both claim a slot: this object is where claims are serialised.
//!
//! The rules, each replica, every `renew_every`:
//!
//! 1. The target is this replica's share of [`partition`] over the sorted member identities.
//! 2. Slots held but no longer in the target are released: controllers stop first (the host
//!    acknowledges through `running`), then the assignment is updated.
//! 3. Slots in the target are claimed when nobody holds them, or their holder's member lease
//!    is gone (deleted as stale, or by its own graceful shutdown). A slot held by a live member
//!    is never taken: it waits for that member to release it.
//! 4. Only slots the assignment says this replica holds are active.
//!
//! Fencing: a replica whose renewals fail stops everything `fence_margin` before its lease
//! could be taken over (`last successful renewal sent + lease duration - margin`). Another
//! replica takes over only after it has seen the lease unchanged for a whole lease duration,
//! and deletes it first (precondition), so a replica that renews late finds its lease gone,
//! knows it was evicted and rejoins with nothing. The margin must cover stopping the
//! controllers; the host closes its write fence at once and aborts them.
//!
//! Costs: per replica, one lease update and one LIST of the ring's leases every
//! `renew_every`; assignment updates only when membership changes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams, Preconditions};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::cluster::shard_ranges::{SlotSet, partition};
use crate::replicas::fence::WriteFence;
use crate::replicas::leader::{now, status_code, within};

/// Label on every lease of a ring; its value is the ring name.
pub(crate) const RING_LABEL: &str = "reconciler.dev/ring";
/// Label saying which kind of ring lease: `member` or `assignment`.
pub(crate) const ROLE_LABEL: &str = "reconciler.dev/ring-role";
/// Annotation on the assignment lease: JSON [`Assignment`].
pub(crate) const SLOTS_ANNOTATION: &str = "reconciler.dev/slots";

#[derive(Clone, Debug)]
pub struct RingOptions {
    /// The ring's name (`run --lease-name`): a label value, the prefix of every lease name.
    pub(crate) name: String,
    pub(crate) namespace: String,
    /// This replica (`run --identity`): a DNS label, unique in the ring.
    pub(crate) identity: String,
    pub(crate) lease_duration: Duration,
    pub(crate) renew_every: Duration,
    /// How long before its lease could be taken over a replica stops working.
    pub(crate) fence_margin: Duration,
}

/// Why a ring cannot be joined with these options.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    #[error(
        "ring (lease) name {0:?} must be a DNS label (lowercase letters, digits, '-', at most 63): it is a label value and the prefix of the leases' names"
    )]
    Name(String),
    #[error(
        "identity {0:?} must be a DNS label (lowercase letters, digits, '-'): it names this replica's member lease; set --identity or POD_NAME"
    )]
    Identity(String),
    #[error("lease duration {0:?} is too short for sharding; use at least 3s")]
    LeaseTooShort(Duration),
}

/// Why the assignment lease's annotation cannot be read.
#[derive(Debug, thiserror::Error)]
enum AssignmentError {
    #[error("annotation {SLOTS_ANNOTATION} does not parse: {0}")]
    Parse(serde_json::Error),
    #[error("holder {holder}: {source}")]
    Slots {
        holder: String,
        source: crate::cluster::shard_ranges::SlotsError,
    },
    #[error("slots {0} are assigned twice")]
    Twice(String),
}

impl RingOptions {
    /// Renewal at a sixth and the fence at a third of the lease duration (at least 1 s and 2 s):
    /// five renewals may fail before the replica fences itself.
    ///
    /// # Errors
    ///
    /// A ring name that is no label value, an identity that makes no valid lease name, or a
    /// lease duration under 3 s.
    pub fn new(
        name: &str,
        namespace: &str,
        identity: &str,
        lease_duration: Duration,
    ) -> Result<Self, RingError> {
        let label_ok = |s: &str| crate::cluster::validation::dns1123_label("", s).is_ok();
        if !label_ok(name) {
            return Err(RingError::Name(name.to_owned()));
        }
        if !label_ok(identity) || name.len() + identity.len() + 8 > 253 {
            return Err(RingError::Identity(identity.to_owned()));
        }
        if lease_duration < Duration::from_secs(3) {
            return Err(RingError::LeaseTooShort(lease_duration));
        }
        Ok(Self {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            identity: identity.to_owned(),
            lease_duration,
            renew_every: (lease_duration / 6).max(Duration::from_secs(1)),
            fence_margin: (lease_duration / 3).max(Duration::from_secs(2)),
        })
    }

    /// How long after a renewal was sent this replica may work without another.
    fn work_window(&self) -> Duration {
        self.lease_duration.saturating_sub(self.fence_margin)
    }

    fn member_lease(&self) -> String {
        format!("{}-member-{}", self.name, self.identity)
    }

    fn assignment_lease(&self) -> String {
        format!("{}-shards", self.name)
    }
}

/// What this replica knows of the ring.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShardState {
    /// Identities of the live members, sorted; this replica included once its lease exists.
    pub members: Vec<String>,
    /// This replica's share under the current membership.
    pub(crate) target: SlotSet,
    /// What the assignment says this replica holds.
    pub(crate) owned: SlotSet,
    /// What controllers may run with: `owned`, minus slots being released; empty when fenced.
    pub active: SlotSet,
    /// Renewals failed for too long, or the lease was taken: nothing may run.
    pub fenced: bool,
    /// How many times this replica fenced itself so far: a state after a fence differs from
    /// the one before even when the slots came back the same.
    pub(crate) fences: u64,
}

/// What one round read: the live members, the assignment, and this replica's part of it.
struct Round<'a> {
    me: &'a str,
    live: &'a BTreeMap<String, String>,
    members: usize,
    assignment: &'a Assignment,
    owned: SlotSet,
    target: SlotSet,
}

/// Who holds which slots, kept in the assignment lease's annotation.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
struct Assignment {
    holders: Vec<Holder>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct Holder {
    identity: String,
    /// The member lease's uid: a replica that rejoins gets a new lease, so slots held by an
    /// evicted incarnation are never mistaken for its own.
    lease: String,
    /// [`SlotSet::to_text`].
    slots: String,
}

impl Assignment {
    fn parse(lease: &Lease) -> Result<Self, AssignmentError> {
        let Some(text) = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SLOTS_ANNOTATION))
        else {
            return Ok(Self::default());
        };
        let assignment: Self = serde_json::from_str(text).map_err(AssignmentError::Parse)?;
        let mut seen = SlotSet::empty();
        for holder in &assignment.holders {
            let slots =
                SlotSet::from_text(&holder.slots).map_err(|source| AssignmentError::Slots {
                    holder: holder.identity.clone(),
                    source,
                })?;
            if !slots.intersection(&seen).is_empty() {
                return Err(AssignmentError::Twice(slots.intersection(&seen).to_text()));
            }
            seen = seen.union(&slots);
        }
        Ok(assignment)
    }

    fn held_by(&self, lease_uid: &str) -> SlotSet {
        self.holders
            .iter()
            .filter(|h| h.lease == lease_uid)
            .filter_map(|h| SlotSet::from_text(&h.slots).ok())
            .fold(SlotSet::empty(), |a, b| a.union(&b))
    }

    /// Slots held by a live member other than `me`.
    fn held_by_others(&self, me: &str, live: &BTreeMap<String, String>) -> SlotSet {
        self.holders
            .iter()
            .filter(|h| h.lease != me && live.contains_key(&h.lease))
            .filter_map(|h| SlotSet::from_text(&h.slots).ok())
            .fold(SlotSet::empty(), |a, b| a.union(&b))
    }

    /// This assignment with `me` holding exactly `slots`, and holders whose lease is gone
    /// dropped.
    fn with(
        &self,
        me: &str,
        identity: &str,
        slots: SlotSet,
        live: &BTreeMap<String, String>,
    ) -> Self {
        let mut holders: Vec<Holder> = self
            .holders
            .iter()
            .filter(|h| h.lease != me && live.contains_key(&h.lease))
            .cloned()
            .collect();
        if !slots.is_empty() {
            holders.push(Holder {
                identity: identity.to_owned(),
                lease: me.to_owned(),
                slots: slots.to_text(),
            });
        }
        holders.sort_by(|a, b| a.identity.cmp(&b.identity));
        Self { holders }
    }
}

/// Stopping work: the host's write fence (closed at once, and held to the deadline every
/// renewal sets), a count the host's manager follows to abort its controllers, and the ring's
/// published state.
///
/// Every change of the fence is a change of the published state: raised, the state says
/// `fenced` with nothing active; lowered, it says so too, and the coordinator's next round
/// makes the slots active again. A host that looked at the state while fenced (and so ran
/// nothing) is therefore always woken when the fence lowers. Before this, the state could keep
/// the slots of before the fence (the coordinator's rounds failed all through it), lowering
/// published nothing, and the host stayed stopped on slots the ring still gave it: the
/// sharded robustness run with seed 31337 lost changes that way.
#[derive(Clone)]
struct Fence {
    fenced: Arc<std::sync::atomic::AtomicBool>,
    writes: WriteFence,
    count: Arc<watch::Sender<u64>>,
    state: Arc<watch::Sender<ShardState>>,
}

impl Fence {
    fn is_raised(&self) -> bool {
        self.fenced.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn raise(&self) -> bool {
        if self.fenced.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return false;
        }
        self.writes.close();
        self.count.send_modify(|n| *n += 1);
        let fences = *self.count.borrow();
        self.state.send_modify(|s| {
            s.fenced = true;
            s.active = SlotSet::empty();
            s.fences = fences;
        });
        true
    }

    fn lower(&self) {
        if !self.fenced.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        self.state.send_modify(|s| s.fenced = false);
    }
}

/// Whether this replica must not write now ([`Ring::fence_probe`]). The host checks it after
/// opening its write fence, so a fence decided meanwhile is never undone.
#[derive(Clone)]
pub struct FenceProbe(Arc<std::sync::atomic::AtomicBool>);

impl FenceProbe {
    pub fn is_fenced(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// This replica's own lease as the renewer last wrote it.
#[derive(Default)]
struct Own {
    uid: Option<String>,
    resource_version: Option<String>,
    /// When the last renewal that succeeded was *sent* (a conservative start for the fence).
    renewed: Option<Instant>,
}

/// A running ring membership. Dropping it stops the tasks without leaving the ring; call
/// [`Ring::leave`] on a graceful shutdown.
pub struct Ring {
    state: watch::Receiver<ShardState>,
    tasks: JoinSet<()>,
    api: Api<Lease>,
    options: RingOptions,
    own: Arc<Mutex<Own>>,
    fenced: Arc<std::sync::atomic::AtomicBool>,
    fences: watch::Receiver<u64>,
}

impl Ring {
    /// Joins the ring. `running` is the host's acknowledgement: the slots its controllers run
    /// with right now; slots are released only once they are out of it. `writes` is closed
    /// (from the renewal task) the moment this replica must stop writing, and every renewal
    /// that succeeds holds it to `sent + lease duration - margin` ([`WriteFence::hold_until`]),
    /// so a replica resumed after a stop sends nothing even before these tasks run again.
    pub fn join(
        client: kube::Client,
        options: RingOptions,
        running: watch::Receiver<SlotSet>,
        writes: WriteFence,
    ) -> Self {
        let api: Api<Lease> = Api::namespaced(client, &options.namespace);
        // Not a member until the first renewal: fenced.
        let (state_tx, state) = watch::channel(ShardState {
            fenced: true,
            ..ShardState::default()
        });
        let own = Arc::new(Mutex::new(Own::default()));
        let fenced = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (count, fence_count) = watch::channel(0);
        let state_tx = Arc::new(state_tx);
        let fence = Fence {
            fenced: fenced.clone(),
            writes,
            count: Arc::new(count),
            state: state_tx.clone(),
        };
        let mut tasks = JoinSet::new();
        tasks.spawn(renew_loop(
            api.clone(),
            options.clone(),
            own.clone(),
            fence.clone(),
        ));
        tasks.spawn(fence_loop(options.clone(), own.clone(), fence.clone()));
        tasks.spawn(
            Coordinator {
                api: api.clone(),
                options: options.clone(),
                own: own.clone(),
                fence: fence.clone(),
                seen: HashMap::new(),
                running,
            }
            .run(),
        );
        Self {
            state,
            tasks,
            api,
            options,
            own,
            fenced,
            fences: fence_count,
        }
    }

    /// Counts the times this replica fenced itself: each one means every controller must be
    /// aborted now.
    pub fn fences(&self) -> watch::Receiver<u64> {
        self.fences.clone()
    }

    pub fn state(&self) -> watch::Receiver<ShardState> {
        self.state.clone()
    }

    /// A cheap handle answering whether this replica must not write now, from another task.
    pub fn fence_probe(&self) -> FenceProbe {
        FenceProbe(self.fenced.clone())
    }

    /// Graceful exit, after the controllers have stopped: gives the slots back and deletes the
    /// member lease, so the others take over at once instead of after a lease duration.
    pub async fn leave(mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        let Some(uid) = self.own.lock().uid.clone() else {
            return;
        };
        for _ in 0..3 {
            match release_all(&self.api, &self.options, &uid).await {
                Ok(()) => break,
                Err(e) => tracing::warn!("giving the slots back failed, retrying: {e}"),
            }
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(&self.options.member_lease(), &params).await {
            Ok(_) => {
                tracing::info!(identity = %self.options.identity, "left the ring");
            }
            Err(e) => {
                tracing::warn!("deleting the member lease failed (it expires by itself): {e}");
            }
        }
    }
}

async fn release_all(
    api: &Api<Lease>,
    options: &RingOptions,
    uid: &str,
) -> Result<(), kube::Error> {
    let mut lease = api.get(&options.assignment_lease()).await?;
    let Ok(assignment) = Assignment::parse(&lease) else {
        return Ok(());
    };
    if assignment.held_by(uid).is_empty() {
        return Ok(());
    }
    let kept = Assignment {
        holders: assignment
            .holders
            .into_iter()
            .filter(|h| h.lease != uid)
            .collect(),
    };
    set_assignment(&mut lease, &kept);
    api.replace(&options.assignment_lease(), &PostParams::default(), &lease)
        .await
        .map(|_| ())
}

fn set_assignment(lease: &mut Lease, assignment: &Assignment) {
    let text = serde_json::to_string(assignment).unwrap_or_default();
    lease
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(SLOTS_ANNOTATION.to_owned(), text);
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.renew_time = Some(now());
}

fn labels(options: &RingOptions, role: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (RING_LABEL.to_owned(), options.name.clone()),
        (ROLE_LABEL.to_owned(), role.to_owned()),
    ])
}

fn is_role(lease: &Lease, role: &str) -> bool {
    lease
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(ROLE_LABEL))
        .is_some_and(|r| r == role)
}

/// Keeps this replica's member lease: creates it (again, after an eviction), renews it, and
/// fences when renewals fail for too long. Runs apart from the coordinator so that waiting for
/// controllers to drain never delays a renewal.
async fn renew_loop(api: Api<Lease>, options: RingOptions, own: Arc<Mutex<Own>>, fence: Fence) {
    let name = options.member_lease();
    let mut tick = tokio::time::interval(options.renew_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let sent = Instant::now();
        let current = {
            let own = own.lock();
            own.uid.clone().zip(own.resource_version.clone())
        };
        let lease = member_lease(&options, &name, current.clone());
        let result = match &current {
            None => {
                match within(
                    options.renew_every,
                    api.create(&PostParams::default(), &lease),
                )
                .await
                {
                    // Ours from a previous life, or another replica with our identity: it is
                    // taken over like any member once it goes stale.
                    Err(e) if status_code(&e) == Some(409) => {
                        tracing::info!(lease = %name, "a member lease with this identity exists; waiting for it to expire");
                        continue;
                    }
                    other => other,
                }
            }
            Some(_) => {
                within(
                    options.renew_every,
                    api.replace(&name, &PostParams::default(), &lease),
                )
                .await
            }
        };
        match result {
            Ok(lease) => renewed(&own, &fence, &options, &lease, sent),
            // Our resourceVersion is old: a renewal that timed out here may have gone through.
            // Still ours if the uid is: take its version, renew next round.
            Err(e) if status_code(&e) == Some(409) && current.is_some() => {
                let uid = own.lock().uid.clone();
                match within(options.renew_every, api.get_opt(&name)).await {
                    Ok(Some(lease)) if lease.metadata.uid == uid => {
                        own.lock().resource_version = lease.metadata.resource_version;
                    }
                    Ok(_) => evicted(&name, &fence, &own, &e),
                    Err(e) => tracing::warn!(lease = %name, "reading the member lease failed: {e}"),
                }
            }
            Err(e) if status_code(&e) == Some(404) => evicted(&name, &fence, &own, &e),
            Err(e) => tracing::warn!(lease = %name, "renewing the member lease failed: {e}"),
        }
    }
}

/// This replica's member lease as sent: a new one (`current` none), or the version held
/// (uid and resourceVersion) renewed.
fn member_lease(options: &RingOptions, name: &str, current: Option<(String, String)>) -> Lease {
    let (uid, resource_version) = current.unzip();
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            uid,
            resource_version,
            labels: Some(labels(options, "member")),
            ..ObjectMeta::default()
        },
        spec: Some(member_spec(options)),
    }
}

/// The member `lease`, sent at `sent`, was written: it is ours, and writes may go on for the
/// work window after `sent`.
fn renewed(own: &Mutex<Own>, fence: &Fence, options: &RingOptions, lease: &Lease, sent: Instant) {
    let mut own = own.lock();
    if own.uid.is_none() {
        tracing::info!(identity = %options.identity, lease = %options.member_lease(), "joined the ring");
    }
    own.uid.clone_from(&lease.metadata.uid);
    own.resource_version
        .clone_from(&lease.metadata.resource_version);
    own.renewed = Some(sent);
    fence.writes.hold_until(sent + options.work_window());
    // A renewal that succeeded means nobody removed the lease, so nobody took the slots:
    // working again is safe.
    if sent + options.work_window() > Instant::now() {
        fence.lower();
    }
}

/// Our member lease is gone (deleted as stale) or is someone else's: this incarnation is out.
/// Everything stops now; the next round joins again with a new lease, owning nothing.
fn evicted(name: &str, fence: &Fence, own: &Mutex<Own>, why: &kube::Error) {
    tracing::error!(lease = %name, "this replica's member lease was taken over (renewals came too late); stopping all work and rejoining: {why}");
    fence.raise();
    *own.lock() = Own::default();
}

/// Fences at `last renewal sent + lease duration - margin`, to the moment, whatever the
/// renewals are doing (a request may hang).
async fn fence_loop(options: RingOptions, own: Arc<Mutex<Own>>, fence: Fence) {
    loop {
        let renewed = own.lock().renewed;
        let Some(renewed) = renewed else {
            tokio::time::sleep(options.renew_every).await;
            continue;
        };
        let deadline = renewed + options.work_window();
        tokio::time::sleep_until(deadline.into()).await;
        if own.lock().renewed.is_some_and(|r| r > renewed) {
            continue;
        }
        if fence.raise() {
            tracing::error!(identity = %options.identity, "member lease not renewed in time; stopping all work until it is");
        }
        // Until a renewal succeeds (or the lease is re-created).
        while own.lock().renewed.is_some_and(|r| r == renewed) {
            tokio::time::sleep(options.renew_every / 4).await;
        }
    }
}

fn member_spec(options: &RingOptions) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(options.identity.clone()),
        lease_duration_seconds: i32::try_from(options.lease_duration.as_secs()).ok(),
        renew_time: Some(now()),
        ..LeaseSpec::default()
    }
}

struct Coordinator {
    api: Api<Lease>,
    options: RingOptions,
    own: Arc<Mutex<Own>>,
    /// Read before each round, and by every publication: the state never shows active slots
    /// while the fence is up.
    fence: Fence,
    /// Member lease uid → (resourceVersion, when this replica first saw that version).
    seen: HashMap<String, (String, Instant)>,
    running: watch::Receiver<SlotSet>,
}

impl Coordinator {
    async fn run(mut self) {
        let mut tick = tokio::time::interval(self.options.renew_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = self.round().await {
                tracing::warn!(ring = %self.options.name, "ring round failed, retrying: {e}");
            }
        }
    }

    /// Publishes a change of the state; while the fence is up, whatever the round found, with
    /// nothing active (the fence's own publications say when it rises and lowers).
    fn publish(&self, update: impl FnOnce(&mut ShardState)) {
        self.fence.state.send_if_modified(|state| {
            let before = state.clone();
            update(state);
            if self.fence.is_raised() {
                state.fenced = true;
                state.active = SlotSet::empty();
            }
            *state != before
        });
    }

    /// One look at the ring and at most one assignment change.
    async fn round(&mut self) -> Result<(), kube::Error> {
        let my_uid = self.own.lock().uid.clone();
        // One LIST: the members and the assignment as of one resourceVersion.
        let selector = format!("{RING_LABEL}={}", self.options.name);
        let leases = within(
            self.options.renew_every * 2,
            self.api.list(&ListParams::default().labels(&selector)),
        )
        .await?;
        let (Some(me), false) = (my_uid.clone(), self.fence.is_raised()) else {
            self.outside(&leases.items, my_uid.as_deref().unwrap_or(""))
                .await;
            return Ok(());
        };
        let (live, assignment_lease) = self.scan(leases.items, &me).await;
        let members: Vec<String> = live
            .values()
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let index = members
            .iter()
            .position(|m| *m == self.options.identity)
            .unwrap_or(usize::MAX);
        let target = partition(members.len(), index);
        self.publish(|s| {
            s.members.clone_from(&members);
            s.target = target;
        });

        let Some(mut lease) = assignment_lease else {
            self.create_assignment().await?;
            return Ok(());
        };
        let assignment = match Assignment::parse(&lease) {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(lease = %self.options.assignment_lease(), "the ring's assignment is unreadable, so nothing is claimed; delete that lease with every replica stopped to reset the ring: {e}");
                self.publish(|s| s.active = SlotSet::empty());
                return Ok(());
            }
        };
        let owned = assignment.held_by(&me);
        self.publish(|s| {
            s.owned = owned;
            s.fenced = false;
        });

        let round = Round {
            me: &me,
            live: &live,
            members: members.len(),
            assignment: &assignment,
            owned,
            target,
        };
        if owned.difference(&target).is_empty() {
            self.claim(&round, &mut lease).await
        } else {
            self.release(&round, &mut lease).await
        }
    }

    /// Stops reconciling the owned slots outside the target, waits for their in-flight
    /// reconciles, then writes the assignment without them.
    async fn release(&mut self, round: &Round<'_>, lease: &mut Lease) -> Result<(), kube::Error> {
        let losing = round.owned.difference(&round.target);
        let keep = round.owned.intersection(&round.target);
        self.publish(|s| s.active = keep);
        if !self.wait_stopped(&keep).await {
            return Ok(());
        }
        let next = round
            .assignment
            .with(round.me, &self.options.identity, keep, round.live);
        self.write_assignment(lease, &next).await?;
        tracing::info!(released = %losing, keeps = %keep, members = round.members, "handed slots over");
        self.publish(|s| s.owned = keep);
        Ok(())
    }

    /// Claims the target's slots no live member holds (and rewrites an assignment naming a
    /// member that is gone); with nothing to change, reconciles what it owns.
    async fn claim(&mut self, round: &Round<'_>, lease: &mut Lease) -> Result<(), kube::Error> {
        let taken = round.assignment.held_by_others(round.me, round.live);
        let gaining = round.target.difference(&round.owned).difference(&taken);
        let orphaned = round
            .assignment
            .holders
            .iter()
            .any(|h| !round.live.contains_key(&h.lease));
        if gaining.is_empty() && !orphaned {
            let owned = round.owned;
            self.publish(|s| s.active = owned);
            return Ok(());
        }
        let claim = round.owned.union(&gaining);
        let next = round
            .assignment
            .with(round.me, &self.options.identity, claim, round.live);
        self.write_assignment(lease, &next).await?;
        if !gaining.is_empty() {
            tracing::info!(gained = %gaining, owns = %claim, members = round.members, "claimed slots");
        }
        self.publish(|s| {
            s.owned = claim;
            s.active = claim;
        });
        Ok(())
    }

    /// A round while not a member (yet): nothing is owned, and the others' leases are still
    /// timed, so that a lease left by a previous life of this identity expires and this
    /// replica can join.
    async fn outside(&mut self, leases: &[Lease], my_uid: &str) {
        let now = Instant::now();
        for lease in leases {
            if is_role(lease, "member") {
                self.check_member(lease, my_uid, now).await;
            }
        }
        self.publish(|s| {
            s.fenced = true;
            s.active = SlotSet::empty();
            s.owned = SlotSet::empty();
        });
    }

    /// The live members (lease uid → identity), stale ones deleted, and the assignment lease.
    async fn scan(
        &mut self,
        leases: Vec<Lease>,
        me: &str,
    ) -> (BTreeMap<String, String>, Option<Lease>) {
        let now = Instant::now();
        let mut live = BTreeMap::new();
        let mut assignment = None;
        for lease in leases {
            if is_role(&lease, "assignment") {
                assignment = Some(lease);
            } else if is_role(&lease, "member")
                && let Some(identity) = self.check_member(&lease, me, now).await
            {
                live.insert(lease.metadata.uid.clone().unwrap_or_default(), identity);
            }
        }
        self.seen.retain(|uid, _| live.contains_key(uid));
        (live, assignment)
    }

    /// Replaces the assignment, on the condition that it is still the version read.
    async fn write_assignment(
        &self,
        lease: &mut Lease,
        assignment: &Assignment,
    ) -> Result<(), kube::Error> {
        set_assignment(lease, assignment);
        let (name, params) = (self.options.assignment_lease(), PostParams::default());
        let write = self.api.replace(&name, &params, lease);
        within(self.options.renew_every * 2, write)
            .await
            .map(|_| ())
    }

    /// A member lease's identity if it is live. One unchanged for a whole lease duration (as
    /// seen here) is deleted, on the condition that it still is that version.
    async fn check_member(&mut self, lease: &Lease, me: &str, now: Instant) -> Option<String> {
        let uid = lease.metadata.uid.clone()?;
        let identity = self.member_identity(lease)?;
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        if uid == me {
            return Some(identity);
        }
        let first_seen = match self.seen.get(&uid) {
            Some((seen_version, at)) if *seen_version == version => *at,
            _ => {
                self.seen.insert(uid, (version, now));
                return Some(identity);
            }
        };
        if now.duration_since(first_seen) < self.options.lease_duration {
            return Some(identity);
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.clone()),
                resource_version: Some(version),
            }),
            ..DeleteParams::default()
        };
        let name = lease.metadata.name.clone().unwrap_or_default();
        match within(
            self.options.renew_every * 2,
            self.api.delete(&name, &params),
        )
        .await
        {
            Ok(_) => {
                tracing::warn!(member = %identity, lease = %name, "member lease expired; removed it and taking over its slots");
                self.seen.remove(&uid);
                None
            }
            Err(e) if status_code(&e) == Some(404) => None,
            // It renewed after all (409), or the API server is unwell: still a member.
            Err(e) => {
                tracing::info!(member = %identity, "removing an expired member lease failed: {e}");
                Some(identity)
            }
        }
    }

    /// The identity a member lease claims, if it is one a replica could have written: a DNS
    /// label, and the lease named after it. Anything else in the ring (a hand-made lease) is no
    /// member, so its text never reaches the partition, `/shards` or a log line unchecked.
    fn member_identity(&self, lease: &Lease) -> Option<String> {
        let identity = lease.spec.as_ref()?.holder_identity.as_deref()?;
        let named = lease.metadata.name.as_deref()
            == Some(format!("{}-member-{identity}", self.options.name).as_str());
        if named && crate::cluster::validation::dns1123_label("", identity).is_ok() {
            return Some(identity.to_owned());
        }
        tracing::debug!(lease = ?lease.metadata.name, "not a member lease of this ring; ignored");
        None
    }

    /// Waits until the host's controllers run with no more than `keep`. False if they did
    /// not stop within a lease duration (retried next round).
    async fn wait_stopped(&mut self, keep: &SlotSet) -> bool {
        let stopped = self.running.wait_for(|running| running.is_subset(keep));
        match tokio::time::timeout(self.options.lease_duration, stopped).await {
            Ok(Ok(_)) => true,
            Ok(Err(_)) => false,
            Err(_) => {
                tracing::warn!(
                    "controllers did not stop within a lease duration; the handover waits"
                );
                false
            }
        }
    }

    async fn create_assignment(&self) -> Result<(), kube::Error> {
        let mut lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.options.assignment_lease()),
                labels: Some(labels(&self.options, "assignment")),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec::default()),
        };
        set_assignment(&mut lease, &Assignment::default());
        match within(
            self.options.renew_every * 2,
            self.api.create(&PostParams::default(), &lease),
        )
        .await
        {
            Err(e) if status_code(&e) != Some(409) => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(identity: &str, lease: &str, slots: &str) -> Holder {
        Holder {
            identity: identity.into(),
            lease: lease.into(),
            slots: slots.into(),
        }
    }

    fn lease_with(annotation: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                annotations: Some(BTreeMap::from([(
                    SLOTS_ANNOTATION.to_owned(),
                    annotation.to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            spec: None,
        }
    }

    fn fence() -> (Fence, watch::Receiver<ShardState>, watch::Receiver<u64>) {
        let (state, state_rx) = watch::channel(ShardState::default());
        let (count, count_rx) = watch::channel(0);
        let fence = Fence {
            fenced: Arc::default(),
            writes: WriteFence::default(),
            count: Arc::new(count),
            state: Arc::new(state),
        };
        (fence, state_rx, count_rx)
    }

    /// The host decides what to run from the state and the probe, and looks again only when
    /// the state changes: each change of the fence must be one, or a host that looked while
    /// fenced stays stopped (seed 31337's lost changes).
    #[test]
    fn raising_and_lowering_the_fence_are_both_published() {
        let (fence, mut state, count) = fence();
        fence
            .state
            .send_modify(|s| s.active = SlotSet::range(0, 128));
        state.mark_unchanged();

        assert!(fence.raise());
        assert!(!fence.writes.is_open());
        assert_eq!(*count.borrow(), 1);
        assert!(state.has_changed().unwrap());
        let seen = state.borrow_and_update().clone();
        assert!(seen.fenced);
        assert!(seen.active.is_empty(), "nothing runs while fenced");
        assert_eq!(seen.fences, 1);
        assert!(!fence.raise(), "raised once");
        assert!(!state.has_changed().unwrap());

        fence.lower();
        assert!(state.has_changed().unwrap(), "lowering wakes the host");
        assert!(!state.borrow_and_update().fenced);
        fence.lower();
        assert!(!state.has_changed().unwrap(), "lowered once");
    }

    #[tokio::test]
    async fn the_coordinator_publishes_no_active_slot_while_fenced() {
        let (fence, mut state, _count) = fence();
        let coordinator = Coordinator {
            api: Api::namespaced(
                kube::Client::new(
                    tower::service_fn(|_| async {
                        Err::<http::Response<kube::client::Body>, _>(std::io::Error::other("none"))
                    }),
                    "default",
                ),
                "default",
            ),
            options: RingOptions::new("ring", "default", "r1", Duration::from_secs(6)).unwrap(),
            own: Arc::default(),
            fence: fence.clone(),
            seen: HashMap::new(),
            running: watch::channel(SlotSet::empty()).1,
        };
        fence.raise();
        state.mark_unchanged();
        // A round that listed before the fence rose publishes what it found: never active.
        coordinator.publish(|s| {
            s.active = SlotSet::all();
            s.owned = SlotSet::all();
            s.fenced = false;
        });
        let seen = state.borrow_and_update().clone();
        assert_eq!(seen.owned, SlotSet::all());
        assert!(seen.fenced && seen.active.is_empty(), "{seen:?}");
        fence.lower();
        coordinator.publish(|s| s.active = SlotSet::all());
        assert!(state.has_changed().unwrap());
        assert_eq!(state.borrow().active, SlotSet::all());
    }

    #[test]
    fn options_refuse_names_that_make_no_lease() {
        assert!(
            RingOptions::new("reconciler-host", "default", "r1", Duration::from_secs(15)).is_ok()
        );
        assert!(RingOptions::new("Ring", "default", "r1", Duration::from_secs(15)).is_err());
        assert!(RingOptions::new("ring", "default", "a/b", Duration::from_secs(15)).is_err());
        assert!(RingOptions::new("ring", "default", "r1", Duration::from_secs(1)).is_err());
        let options = RingOptions::new("ring", "default", "r1", Duration::from_secs(6)).unwrap();
        assert_eq!(options.member_lease(), "ring-member-r1");
        assert!(options.renew_every < options.fence_margin);
        assert!(options.fence_margin < options.lease_duration);
    }

    #[test]
    fn an_assignment_that_gives_a_slot_twice_is_refused() {
        let good = Assignment {
            holders: vec![holder("a", "u1", "0-9"), holder("b", "u2", "10-20")],
        };
        let lease = lease_with(&serde_json::to_string(&good).unwrap());
        assert_eq!(Assignment::parse(&lease).unwrap(), good);
        let bad = Assignment {
            holders: vec![holder("a", "u1", "0-10"), holder("b", "u2", "10-20")],
        };
        let err =
            Assignment::parse(&lease_with(&serde_json::to_string(&bad).unwrap())).unwrap_err();
        assert!(err.to_string().contains("assigned twice"), "{err}");
        assert!(Assignment::parse(&lease_with("{")).is_err());
    }

    #[test]
    fn holders_whose_lease_is_gone_are_dropped_and_others_kept() {
        let assignment = Assignment {
            holders: vec![holder("a", "u1", "0-9"), holder("dead", "u9", "10-20")],
        };
        let live = BTreeMap::from([
            ("u1".to_owned(), "a".to_owned()),
            ("u2".to_owned(), "b".to_owned()),
        ]);
        assert_eq!(
            assignment.held_by_others("u2", &live),
            SlotSet::range(0, 10)
        );
        let next = assignment.with("u2", "b", SlotSet::range(10, 30), &live);
        assert_eq!(
            next.holders,
            vec![holder("a", "u1", "0-9"), holder("b", "u2", "10-29")]
        );
        assert_eq!(next.held_by("u2"), SlotSet::range(10, 30));
        // Giving everything back removes the holder.
        assert_eq!(
            next.with("u2", "b", SlotSet::empty(), &live).holders.len(),
            1
        );
    }
}
