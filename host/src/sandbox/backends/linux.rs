//! The Linux provider: one bridge per network, inside a chosen network namespace, over netlink.
//!
//! # What a network is in the kernel
//!
//! Network `id` is the bridge [`bridge_name`]`(prefix, id)` (e.g. `rh-3f9a0c1b2d4e`) whose
//! interface alias (`IFLA_IFALIAS`, what `ip link set … alias` sets) is the id itself, carrying
//! the gateway address with the cidr's prefix length, administratively up. Nothing is kept in
//! the host process: every `get`/`list` reads links and addresses back from the kernel, so
//! state survives host restarts and drift (a bridge deleted by hand, an address changed, the
//! link set down) shows up in the next read and is repaired by the next `ensure`.
//! Links with the prefix but without an alias are ignored by `list`, and adopted by `ensure`
//! only under the exact name of the id being ensured (an interrupted earlier `ensure`).
//!
//! # What a network must stay clear of
//!
//! Besides the shared rules ([`super::policy`]), `ensure` refuses a cidr that overlaps an
//! address of the namespace (with its subnet) or the destination of one of its routes, in
//! any routing table, read from the kernel at that moment. Left out: addresses and routes on
//! this provider's own bridges (bridges named with its prefix: a network's own address and
//! connected route, and the other networks, which the overlap check covers), and routes
//! broader than the broadest network allowed (the default route and its halves, which every
//! range overlaps). Without `netns` this is the host's own namespace: its LAN, its VPN routes,
//! its container networks.
//!
//! # How the namespace is entered
//!
//! A netlink socket talks to the network namespace of the thread that *created* it, and
//! `setns(2)` switches only the calling thread. So each [`LinuxBackend`] owns one dedicated OS
//! thread that `setns`es into `/var/run/netns/<name>` (what `ip netns add` creates) once,
//! opens the rtnetlink socket there, and runs a current-thread tokio runtime serving requests
//! from a channel. No thread of the host's main runtime ever changes namespace, so nothing
//! else in the process can be pulled into the wrong one by accident. Without `netns` the
//! thread stays in the host's namespace.
//!
//! The thread handles one request at a time. That costs nothing at controller rates and makes
//! each `ensure` (read others, check overlap, change) atomic with respect to the others, so
//! of two overlapping networks ensured at once exactly one is applied.
//!
//! # Cost
//!
//! `get` is one link lookup and one address dump; `list` dumps all links and addresses of the
//! namespace, `ensure` those and its IPv4 and IPv6 routes. An `ensure` that finds nothing to
//! change writes nothing.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use async_trait::async_trait;
use futures::TryStreamExt;
use ipnet::IpNet;
use nix::errno::Errno;
use nix::sched::CloneFlags;
use rtnetlink::packet_route::address::{AddressAttribute, AddressMessage};
use rtnetlink::packet_route::link::{InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteType,
};
use rtnetlink::{Handle, LinkBridge, LinkMessageBuilder, LinkUnspec, RouteMessageBuilder};
use tokio::sync::{mpsc, oneshot};

use super::bridge_names::{bridge_name, is_bridge_name, validate_bridge_prefix};
use super::contract::{BackendError, NetworkBackend, NetworkSpec, NetworkStatus, Result};
use super::policy::Policy;
use super::policy::{MAX_BREADTH_V4, MAX_BREADTH_V6, Reserved, check_reserved};
use super::spec::{ValidSpec, check_overlap};

/// Where `ip netns add <name>` puts its namespace handles.
pub(crate) const NETNS_DIR: &str = "/var/run/netns";

/// Networks as Linux bridges in one network namespace.
pub struct LinuxBackend {
    requests: mpsc::UnboundedSender<Request>,
    netns: Option<String>,
    prefix: String,
    policy: Policy,
}

impl fmt::Debug for LinuxBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinuxBackend")
            .field("netns", &self.netns)
            .field("prefix", &self.prefix)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl LinuxBackend {
    /// Starts the provider for namespace `netns` (a name under `/var/run/netns`; `None` = the
    /// host's own) with bridges named `<bridge_prefix>-<hash>`.
    ///
    /// Blocks briefly while its thread enters the namespace and opens the netlink socket, so
    /// a missing namespace or a bad prefix fails here with the fix in the message. Needs
    /// `CAP_SYS_ADMIN` to enter a namespace and `CAP_NET_ADMIN` in it to change links.
    pub fn new(netns: Option<&str>, bridge_prefix: &str) -> Result<Self> {
        validate_bridge_prefix(bridge_prefix)?;
        if let Some(name) = netns {
            validate_netns_name(name)?;
        }
        let place = Place(netns.map(str::to_owned));
        let (requests, inbox) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<Result<()>>(1);
        let prefix = bridge_prefix.to_owned();
        let thread_place = place.clone();
        std::thread::Builder::new()
            // Linux keeps 15 bytes of a thread name; the namespace is the useful part.
            .name(format!("nl-{}", netns.unwrap_or("host")))
            .spawn(move || match Worker::start(thread_place, prefix) {
                Ok((runtime, worker)) => {
                    let _ = ready_tx.send(Ok(()));
                    runtime.block_on(worker.serve(inbox));
                }
                Err(err) => {
                    let _ = ready_tx.send(Err(err));
                }
            })
            .map_err(|err| {
                BackendError::Other(format!(
                    "cannot start the netlink thread for {place}: {err}"
                ))
            })?;
        ready_rx.recv().map_err(|_| {
            BackendError::Other(format!(
                "the netlink thread for {place} died while starting"
            ))
        })??;
        Ok(Self {
            requests,
            netns: place.0,
            prefix: bridge_prefix.to_owned(),
            policy: Policy::default(),
        })
    }

    /// The same provider with `policy` (`allowed-cidrs`, reserved ranges) on top of the fixed
    /// rules and the namespace's own addresses and routes.
    #[must_use]
    pub(crate) fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// The namespace this provider works in; `None` = the host's own.
    pub fn netns(&self) -> Option<&str> {
        self.netns.as_deref()
    }

    /// The interface-name prefix of this provider's bridges.
    pub fn bridge_prefix(&self) -> &str {
        &self.prefix
    }

    async fn call<T>(&self, make: impl FnOnce(oneshot::Sender<Result<T>>) -> Request) -> Result<T> {
        let stopped = || {
            BackendError::Unavailable(format!(
                "the netlink thread for {} has stopped; restart the host",
                Place(self.netns.clone())
            ))
        };
        let (reply, answer) = oneshot::channel();
        self.requests.send(make(reply)).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

#[async_trait]
impl NetworkBackend for LinuxBackend {
    fn provider(&self) -> &'static str {
        "linux"
    }

    async fn get(&self, id: &str) -> Result<Option<NetworkStatus>> {
        let id = id.to_owned();
        self.call(|reply| Request::Get { id, reply }).await
    }

    async fn ensure(&self, spec: &NetworkSpec) -> Result<NetworkStatus> {
        // Validate on the caller's side: a bad spec never reaches the kernel thread.
        let spec = self.policy.validate(spec)?;
        self.call(|reply| Request::Ensure { spec, reply }).await
    }

    async fn delete(&self, id: &str) -> Result<bool> {
        let id = id.to_owned();
        self.call(|reply| Request::Delete { id, reply }).await
    }

    async fn list(&self) -> Result<Vec<NetworkStatus>> {
        self.call(|reply| Request::List { reply }).await
    }
}

enum Request {
    Get {
        id: String,
        reply: oneshot::Sender<Result<Option<NetworkStatus>>>,
    },
    Ensure {
        spec: ValidSpec,
        reply: oneshot::Sender<Result<NetworkStatus>>,
    },
    Delete {
        id: String,
        reply: oneshot::Sender<Result<bool>>,
    },
    List {
        reply: oneshot::Sender<Result<Vec<NetworkStatus>>>,
    },
}

/// Names the namespace in messages.
#[derive(Clone)]
struct Place(Option<String>);

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(name) => write!(f, "netns `{name}`"),
            None => f.write_str("the host's netns"),
        }
    }
}

/// The same rule as `ip netns`: a plain file name under /var/run/netns.
fn validate_netns_name(name: &str) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(BackendError::Other(format!(
            "netns `{name}` is not a namespace name; use the name given to `ip netns add` \
             (a file under {NETNS_DIR}), or omit `netns` for the host's own namespace"
        )));
    }
    Ok(())
}

/// Moves the calling thread (only it) into the named network namespace.
fn enter_netns(name: &str) -> Result<()> {
    let path = Path::new(NETNS_DIR).join(name);
    let handle = File::open(&path).map_err(|err| {
        BackendError::Unavailable(format!(
            "cannot open network namespace {}: {err}; create it with `ip netns add {name}`",
            path.display()
        ))
    })?;
    nix::sched::setns(&handle, CloneFlags::CLONE_NEWNET).map_err(|err| {
        BackendError::Unavailable(format!(
            "cannot enter network namespace {}: {err} (it must be a netns handle, and the \
             host needs CAP_SYS_ADMIN)",
            path.display()
        ))
    })
}

/// A link as far as this provider cares.
struct Link {
    index: u32,
    name: String,
    alias: Option<String>,
    kind: Option<InfoKind>,
    up: bool,
}

impl Link {
    fn from_message(msg: LinkMessage) -> Self {
        let mut link = Link {
            index: msg.header.index,
            name: String::new(),
            alias: None,
            kind: None,
            up: msg.header.flags.contains(LinkFlags::Up),
        };
        for attr in msg.attributes {
            match attr {
                LinkAttribute::IfName(name) => link.name = name,
                // The kernel reports an empty alias after `ip link set … alias ""`.
                LinkAttribute::IfAlias(alias) if !alias.is_empty() => link.alias = Some(alias),
                LinkAttribute::LinkInfo(infos) => {
                    link.kind = infos.into_iter().find_map(|info| match info {
                        LinkInfo::Kind(kind) => Some(kind),
                        _ => None,
                    });
                }
                _ => {}
            }
        }
        link
    }

    fn is_bridge(&self) -> bool {
        self.kind == Some(InfoKind::Bridge)
    }
}

/// The address an address message assigns (IPv4 `IFA_LOCAL`, else `IFA_ADDRESS`) with its
/// prefix length, or `None` for IPv6 link-local, which the kernel adds to every interface that
/// comes up and is neither reported nor removed.
fn assigned(msg: &AddressMessage) -> Option<(IpAddr, u8)> {
    let mut address = None;
    for attr in &msg.attributes {
        match attr {
            AddressAttribute::Local(ip) => address = Some(*ip),
            AddressAttribute::Address(ip) if address.is_none() => address = Some(*ip),
            _ => {}
        }
    }
    match address? {
        IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => None,
        ip => Some((ip, msg.header.prefix_len)),
    }
}

fn status_of(link: &Link, id: String, addresses: &[AddressMessage]) -> NetworkStatus {
    let first = addresses
        .iter()
        .filter(|msg| msg.header.index == link.index)
        .find_map(assigned);
    let (cidr, gateway) = match first {
        Some((ip, len)) => (
            IpNet::new(ip, len)
                .map(|net| net.trunc().to_string())
                .unwrap_or_default(),
            ip.to_string(),
        ),
        None => (String::new(), String::new()),
    };
    NetworkStatus {
        id,
        cidr,
        gateway,
        interface_name: link.name.clone(),
        up: link.up,
    }
}

/// The broadest prefix a network of `ip`'s family may have.
fn max_breadth(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => MAX_BREADTH_V4,
        IpAddr::V6(_) => MAX_BREADTH_V6,
    }
}

/// The namespace's own addresses (each with its subnet) and route destinations, which no
/// network may overlap; see the module docs for what is left out and why.
fn namespace_reserved(
    links: &[Link],
    addresses: &[AddressMessage],
    routes: &[RouteMessage],
    prefix: &str,
    place: &Place,
) -> Vec<Reserved> {
    let names: BTreeMap<u32, &str> = links.iter().map(|l| (l.index, l.name.as_str())).collect();
    let ours = |index: u32| {
        links
            .iter()
            .any(|l| l.index == index && l.is_bridge() && is_bridge_name(prefix, &l.name))
    };
    let name = |index: u32| names.get(&index).copied().unwrap_or("?");
    let mut reserved = Vec::new();

    for msg in addresses.iter().filter(|msg| !ours(msg.header.index)) {
        let Some((ip, len)) = assigned(msg) else {
            continue;
        };
        let dev = name(msg.header.index);
        // A subnet broader than any network may be (/0 to /7 for IPv4) would overlap nearly
        // every range, as the routes skipped below would: such an address reserves only itself.
        match IpNet::new(ip, len).map(|net| net.trunc()) {
            Ok(subnet) if len >= max_breadth(ip) && subnet != IpNet::from(ip) => {
                reserved.push(Reserved {
                    range: subnet,
                    what: format!(
                        "{subnet}, the subnet of address {ip}/{len} on interface `{dev}` in {place}"
                    ),
                });
            }
            _ => reserved.push(Reserved {
                range: IpNet::from(ip),
                what: format!("address {ip} of interface `{dev}` in {place}"),
            }),
        }
    }

    for msg in routes {
        // Local, broadcast, anycast and multicast entries describe addresses held, which the
        // loop above covers.
        let kind = match msg.header.kind {
            RouteType::Unicast => "",
            RouteType::BlackHole => "blackhole ",
            RouteType::Unreachable => "unreachable ",
            RouteType::Prohibit => "prohibit ",
            RouteType::Throw => "throw ",
            _ => continue,
        };
        let len = msg.header.destination_prefix_length;
        let (destination, devices, table) = route_parts(msg);
        // No destination: a default route, which every range overlaps.
        let Some(destination) = destination else {
            continue;
        };
        if len < max_breadth(destination)
            || (!devices.is_empty() && devices.iter().all(|&i| ours(i)))
        {
            continue;
        }
        let Ok(range) = IpNet::new(destination, len).map(|net| net.trunc()) else {
            continue;
        };
        let mut text = format!("{kind}{range}");
        // Named by a device that is not ours: our bridges are guests' networks, and a guest
        // is never told another's.
        if let Some(&dev) = devices.iter().find(|&&i| !ours(i)) {
            let _ = write!(text, " dev {}", name(dev));
        }
        if table != u32::from(RouteHeader::RT_TABLE_MAIN) {
            let _ = write!(text, " table {table}");
        }
        reserved.push(Reserved {
            range,
            what: format!("route `{text}` in {place}"),
        });
    }
    reserved
}

/// A route's destination (none: a default route), the interfaces it leaves through and its
/// table.
fn route_parts(msg: &RouteMessage) -> (Option<IpAddr>, Vec<u32>, u32) {
    let mut destination = None;
    let mut devices = Vec::new();
    let mut table = u32::from(msg.header.table);
    for attr in &msg.attributes {
        match attr {
            RouteAttribute::Destination(RouteAddress::Inet(ip)) => {
                destination = Some(IpAddr::V4(*ip));
            }
            RouteAttribute::Destination(RouteAddress::Inet6(ip)) => {
                destination = Some(IpAddr::V6(*ip));
            }
            RouteAttribute::Oif(index) => devices.push(*index),
            RouteAttribute::MultiPath(hops) => {
                devices.extend(hops.iter().map(|hop| hop.interface_index));
            }
            RouteAttribute::Table(id) => table = *id,
            _ => {}
        }
    }
    (destination, devices, table)
}

fn is_errno(err: &rtnetlink::Error, errno: Errno) -> bool {
    matches!(err, rtnetlink::Error::NetlinkError(msg) if msg.raw_code() == -(errno as i32))
}

/// The state that lives on the netlink thread.
struct Worker {
    handle: Handle,
    prefix: String,
    place: Place,
}

impl Worker {
    /// Runs on the new thread: enter the namespace first, then open the socket, so the socket
    /// belongs to the namespace.
    fn start(place: Place, prefix: String) -> Result<(tokio::runtime::Runtime, Self)> {
        if let Some(name) = &place.0 {
            enter_netns(name)?;
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .map_err(|err| {
                BackendError::Other(format!(
                    "cannot start the netlink runtime for {place}: {err}"
                ))
            })?;
        let handle = runtime.block_on(async {
            let (connection, handle, _) = rtnetlink::new_connection().map_err(|err| {
                BackendError::Unavailable(format!("cannot open a netlink socket in {place}: {err}"))
            })?;
            tokio::spawn(connection);
            Ok::<_, BackendError>(handle)
        })?;
        Ok((
            runtime,
            Worker {
                handle,
                prefix,
                place,
            },
        ))
    }

    /// Serves until every [`LinuxBackend`] sender is gone, then the thread ends.
    async fn serve(self, mut inbox: mpsc::UnboundedReceiver<Request>) {
        while let Some(request) = inbox.recv().await {
            // A caller that gave up still gets its change finished: a half-applied ensure
            // would be worse than an unread answer.
            match request {
                Request::Get { id, reply } => {
                    let _ = reply.send(self.get(&id).await);
                }
                Request::Ensure { spec, reply } => {
                    let _ = reply.send(self.ensure(&spec).await);
                }
                Request::Delete { id, reply } => {
                    let _ = reply.send(self.delete(&id).await);
                }
                Request::List { reply } => {
                    let _ = reply.send(self.list().await);
                }
            }
        }
    }

    fn failed(&self, action: &str, bridge: &str, err: &rtnetlink::Error) -> BackendError {
        let hint = if is_errno(err, Errno::EPERM) || is_errno(err, Errno::EACCES) {
            "; the host needs CAP_NET_ADMIN in that namespace"
        } else {
            ""
        };
        BackendError::Unavailable(format!(
            "netlink: cannot {action} bridge `{bridge}` in {}: {err}{hint}",
            self.place
        ))
    }

    async fn link_by_name(&self, name: &str) -> Result<Option<Link>> {
        let result = self
            .handle
            .link()
            .get()
            .match_name(name.to_owned())
            .execute()
            .try_next()
            .await;
        match result {
            Ok(msg) => Ok(msg.map(Link::from_message)),
            Err(err) if is_errno(&err, Errno::ENODEV) => Ok(None),
            Err(err) => Err(self.failed("look up", name, &err)),
        }
    }

    /// Every link of the namespace.
    async fn links(&self) -> Result<Vec<Link>> {
        let messages: Vec<LinkMessage> = self
            .handle
            .link()
            .get()
            .execute()
            .try_collect()
            .await
            .map_err(|err| self.failed("list links for", &format!("{}-*", self.prefix), &err))?;
        Ok(messages.into_iter().map(Link::from_message).collect())
    }

    /// Every IPv4 and IPv6 route of the namespace, in every table.
    async fn routes(&self) -> Result<Vec<RouteMessage>> {
        let mut routes = Vec::new();
        for (family, query) in [
            ("IPv4", RouteMessageBuilder::<Ipv4Addr>::new().build()),
            ("IPv6", RouteMessageBuilder::<Ipv6Addr>::new().build()),
        ] {
            match self
                .handle
                .route()
                .get(query)
                .execute()
                .try_collect::<Vec<_>>()
                .await
            {
                Ok(found) => routes.extend(found),
                // A kernel booted without IPv6 has no IPv6 routes to keep clear of.
                Err(err) if is_errno(&err, Errno::EAFNOSUPPORT) => {}
                Err(err) => {
                    return Err(BackendError::Unavailable(format!(
                        "netlink: cannot read the {family} routes of {}: {err}",
                        self.place
                    )));
                }
            }
        }
        Ok(routes)
    }

    /// Our networks among `links`, read from `addresses` (a dump of every link's).
    fn statuses(&self, links: &[Link], addresses: &[AddressMessage]) -> Vec<NetworkStatus> {
        let mut statuses: Vec<NetworkStatus> = links
            .iter()
            .filter(|link| link.is_bridge() && is_bridge_name(&self.prefix, &link.name))
            .filter_map(|link| {
                let id = link.alias.clone()?;
                Some(status_of(link, id, addresses))
            })
            .collect();
        statuses.sort_by(|a, b| a.id.cmp(&b.id));
        statuses
    }

    /// Addresses of one link, or of every link with `None`.
    async fn addresses(&self, index: Option<u32>, bridge: &str) -> Result<Vec<AddressMessage>> {
        let mut request = self.handle.address().get();
        if let Some(index) = index {
            request = request.set_link_index_filter(index);
        }
        request
            .execute()
            .try_collect()
            .await
            .map_err(|err| self.failed("read addresses of", bridge, &err))
    }

    async fn get(&self, id: &str) -> Result<Option<NetworkStatus>> {
        let name = bridge_name(&self.prefix, id);
        let Some(link) = self.link_by_name(&name).await? else {
            return Ok(None);
        };
        if !link.is_bridge() || link.alias.as_deref() != Some(id) {
            return Ok(None);
        }
        let addresses = self.addresses(Some(link.index), &name).await?;
        Ok(Some(status_of(&link, id.to_owned(), &addresses)))
    }

    async fn list(&self) -> Result<Vec<NetworkStatus>> {
        let links = self.links().await?;
        if !links
            .iter()
            .any(|link| is_bridge_name(&self.prefix, &link.name))
        {
            return Ok(Vec::new());
        }
        let addresses = self.addresses(None, &format!("{}-*", self.prefix)).await?;
        Ok(self.statuses(&links, &addresses))
    }

    async fn ensure(&self, spec: &ValidSpec) -> Result<NetworkStatus> {
        let links = self.links().await?;
        let addresses = self.addresses(None, &format!("{}-*", self.prefix)).await?;
        check_overlap(spec, &self.statuses(&links, &addresses))?;
        let routes = self.routes().await?;
        check_reserved(
            spec,
            &namespace_reserved(&links, &addresses, &routes, &self.prefix, &self.place),
        )?;
        let name = bridge_name(&self.prefix, &spec.id);

        let link = if let Some(link) = self.link_by_name(&name).await? {
            if !link.is_bridge() {
                let kind = link
                    .kind
                    .map_or("device without a kind".into(), |k| k.to_string());
                return Err(BackendError::Other(format!(
                    "network `{}`: interface `{name}` in {} is a {kind}, not a bridge this \
                     host made; remove it or use another bridge-prefix",
                    spec.id, self.place
                )));
            }
            if let Some(owner) = link.alias.as_deref().filter(|owner| *owner != spec.id) {
                return Err(BackendError::NameTaken {
                    id: spec.id.clone(),
                    bridge: name,
                    place: self.place.to_string(),
                    owner: owner.to_owned(),
                });
            }
            link
        } else {
            self.handle
                .link()
                .add(LinkMessageBuilder::<LinkBridge>::new(&name).build())
                .execute()
                .await
                .map_err(|err| self.failed("create", &name, &err))?;
            self.link_by_name(&name).await?.ok_or_else(|| {
                BackendError::Unavailable(format!(
                    "bridge `{name}` in {} vanished right after it was created; retry",
                    self.place
                ))
            })?
        };

        // The alias goes on before any address, so a bridge that carries our address always
        // also says whose it is.
        if link.alias.as_deref() != Some(spec.id.as_str()) || !link.up {
            let message = LinkUnspec::new_with_index(link.index)
                .append_extra_attribute(LinkAttribute::IfAlias(spec.id.clone()))
                .up()
                .build();
            self.handle
                .link()
                .set(message)
                .execute()
                .await
                .map_err(|err| self.failed("set alias and up on", &name, &err))?;
        }

        self.converge_address(spec, link.index, &name).await?;

        let link = self.link_by_name(&name).await?.ok_or_else(|| {
            BackendError::Unavailable(format!(
                "bridge `{name}` in {} vanished while it was being configured; retry",
                self.place
            ))
        })?;
        let addresses = self.addresses(Some(link.index), &name).await?;
        Ok(status_of(&link, spec.id.clone(), &addresses))
    }

    /// Leaves exactly the gateway (with the cidr's prefix length) on the bridge, besides IPv6
    /// link-local.
    async fn converge_address(&self, spec: &ValidSpec, index: u32, name: &str) -> Result<()> {
        let wanted = (spec.gateway, spec.cidr.prefix_len());
        let before = self.addresses(Some(index), name).await?;
        let mut changed = false;
        for msg in &before {
            if assigned(msg).is_some_and(|have| have != wanted) {
                match self.handle.address().del(msg.clone()).execute().await {
                    Ok(()) => changed = true,
                    // Already gone: removing an IPv4 primary also drops its secondaries.
                    Err(err) if is_errno(&err, Errno::EADDRNOTAVAIL) => changed = true,
                    Err(err) => return Err(self.failed("remove an address from", name, &err)),
                }
            }
        }
        // Re-read rather than trust the first dump: deleting an IPv4 primary address removes
        // the secondaries of the same subnet with it (unless promote_secondaries is set), and
        // the wanted address may have been one of them.
        let present = if changed {
            self.addresses(Some(index), name).await?
        } else {
            before
        };
        if !present.iter().any(|msg| assigned(msg) == Some(wanted)) {
            self.handle
                .address()
                .add(index, spec.gateway, spec.cidr.prefix_len())
                .execute()
                .await
                .map_err(|err| {
                    self.failed(&format!("add {}/{} to", wanted.0, wanted.1), name, &err)
                })?;
        }
        Ok(())
    }

    async fn delete(&self, id: &str) -> Result<bool> {
        let name = bridge_name(&self.prefix, id);
        let Some(link) = self.link_by_name(&name).await? else {
            return Ok(false);
        };
        // Only our own: a bridge of the same name owned by another id (a hash collision) or
        // a device that is not a bridge is left alone. An alias-less bridge under this id's
        // exact name is a leftover of an interrupted ensure and is removed.
        if !link.is_bridge() || link.alias.as_deref().is_some_and(|owner| owner != id) {
            return Ok(false);
        }
        match self.handle.link().del(link.index).execute().await {
            Ok(()) => Ok(true),
            Err(err) if is_errno(&err, Errno::ENODEV) => Ok(false),
            Err(err) => Err(self.failed("delete", &name, &err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netns_names_follow_ip_netns() {
        validate_netns_name("rh-demo").unwrap();
        for bad in ["", ".", "..", "a/b", "../etc"] {
            assert!(validate_netns_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_missing_namespace_fails_at_construction_with_the_fix() {
        let err = LinuxBackend::new(Some("reconciler-host-no-such-netns"), "rh").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("ip netns add reconciler-host-no-such-netns"),
            "{msg}"
        );
    }

    fn link(index: u32, name: &str, kind: InfoKind) -> Link {
        Link {
            index,
            name: name.into(),
            alias: None,
            kind: Some(kind),
            up: true,
        }
    }

    fn address(index: u32, ip: &str, len: u8) -> AddressMessage {
        let mut msg = AddressMessage::default();
        msg.header.index = index;
        msg.header.prefix_len = len;
        msg.attributes
            .push(AddressAttribute::Local(ip.parse().unwrap()));
        msg
    }

    fn route(kind: RouteType, destination: Option<(&str, u8)>, oif: Option<u32>) -> RouteMessage {
        let mut msg = RouteMessage::default();
        msg.header.kind = kind;
        msg.header.table = RouteHeader::RT_TABLE_MAIN;
        if let Some((ip, len)) = destination {
            msg.header.destination_prefix_length = len;
            let ip: IpAddr = ip.parse().unwrap();
            msg.attributes
                .push(RouteAttribute::Destination(RouteAddress::from(ip)));
        }
        msg.attributes.extend(oif.map(RouteAttribute::Oif));
        msg
    }

    /// What the kernel tests in `tests/linux_backend.rs` check for real, here without root.
    #[test]
    fn the_namespace_reserves_foreign_addresses_and_routes_but_not_our_bridges() {
        let ours = bridge_name("rh", "ns/a");
        let links = [
            link(1, "lo", InfoKind::Other("loopback".into())),
            link(2, "eth0", InfoKind::Veth),
            link(3, &ours, InfoKind::Bridge),
            // Our name on something that is not a bridge is not ours.
            link(4, &bridge_name("rh", "ns/b"), InfoKind::Veth),
        ];
        let addresses = [
            address(2, "192.168.1.10", 24),
            address(2, "10.9.9.9", 32),
            address(2, "11.0.0.1", 7),
            address(2, "fe80::1", 64),
            address(3, "10.1.0.1", 24),
            address(4, "10.2.0.1", 24),
        ];
        let mut other_table = route(RouteType::BlackHole, Some(("10.30.0.0", 16)), None);
        other_table.attributes.push(RouteAttribute::Table(100));
        let routes = [
            route(RouteType::Unicast, None, Some(2)),
            route(RouteType::Unicast, Some(("0.0.0.0", 1)), Some(2)),
            route(RouteType::Unicast, Some(("10.20.0.0", 16)), Some(2)),
            route(RouteType::Unicast, Some(("10.1.0.0", 24)), Some(3)),
            route(RouteType::Local, Some(("192.168.1.10", 32)), Some(2)),
            other_table,
        ];
        let place = Place(None);
        let reserved = namespace_reserved(&links, &addresses, &routes, "rh", &place);
        let shown: Vec<(String, &str)> = reserved
            .iter()
            .map(|r| (r.range.to_string(), r.what.as_str()))
            .collect();
        let veth = bridge_name("rh", "ns/b");
        assert_eq!(
            shown,
            [
                (
                    "192.168.1.0/24".into(),
                    "192.168.1.0/24, the subnet of address 192.168.1.10/24 on interface `eth0` \
                     in the host's netns"
                ),
                (
                    "10.9.9.9/32".into(),
                    "address 10.9.9.9 of interface `eth0` in the host's netns"
                ),
                (
                    "11.0.0.1/32".into(),
                    "address 11.0.0.1 of interface `eth0` in the host's netns"
                ),
                (
                    "10.2.0.0/24".into(),
                    &*format!(
                        "10.2.0.0/24, the subnet of address 10.2.0.1/24 on interface `{veth}` in \
                         the host's netns"
                    )
                ),
                (
                    "10.20.0.0/16".into(),
                    "route `10.20.0.0/16 dev eth0` in the host's netns"
                ),
                (
                    "10.30.0.0/16".into(),
                    "route `blackhole 10.30.0.0/16 table 100` in the host's netns"
                ),
            ]
        );
    }

    #[test]
    fn a_bad_prefix_fails_before_any_thread_starts() {
        let err = LinuxBackend::new(None, "too-long-prefix").unwrap_err();
        assert!(err.to_string().contains("bridge-prefix"), "{err}");
    }
}
