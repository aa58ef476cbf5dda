//! A TCP relay between one host replica and kube-apiserver, whose mode the robustness harness
//! switches to model that replica's network: [`Mode::Pass`] (a healthy link), [`Mode::Delay`]
//! (a slow link) and [`Mode::Blackhole`] (a partition of that replica only; the other replicas
//! reach kube-apiserver directly and are unaffected). [`Relay::cut_all`] models every
//! connection being reset at once.
//!
//! The relay copies bytes and nothing else: TLS passes through untouched, and the replica's
//! kubeconfig names `127.0.0.1:<relay port>`, a name the apiserver's certificate covers.
//!
//! What it models, and how:
//! - a partition: during a blackhole nothing crosses in either direction, not even bytes that
//!   were read before it began and still wait in the delay pipeline; new connections are
//!   accepted but never reach kube-apiserver, so a client's TLS handshake hangs. Peers see
//!   silence, not a reset, as across a real partition.
//! - a partition healing: every connection that existed during the blackhole is then closed on
//!   both sides, as TCP connections across a long partition die, so a request written into the
//!   blackhole can never reach kube-apiserver afterwards. Clients must reconnect.
//! - kube-apiserver being down: a connection whose upstream connect fails is closed at once.
//!
//! What it does not model: the late delivery of retransmitted bytes when a short partition heals
//! before TCP gives up (here a blackholed connection always dies); packet loss, reordering or
//! bandwidth limits; an asymmetric partition (one direction only); and a peer's timeout during a
//! blackhole (the relay keeps both sockets open until the blackhole ends or they are cut).

// Hand-written rather than a crate: no dependency of this workspace relays TCP with switchable
// faults, and the relay is a few hundred lines of tokio.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, sleep, sleep_until};

/// Largest chunk read at once from either side.
const READ_BUFFER: usize = 16 * 1024;

/// Chunks in flight per direction between reading and writing. Bounds memory when a peer stops
/// reading; a full pipeline makes the reader wait, and the kernel then coalesces small writes
/// into larger chunks, so a delayed link keeps its throughput.
const CHUNKS_IN_FLIGHT: usize = 1024;

/// How a relay treats the bytes of its connections; switched with [`Relay::set_mode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Bytes flow both ways at once.
    Pass,
    /// Every byte is forwarded this much later than it was read, order kept, both directions
    /// (a slow link). Applies to bytes read after the switch; bytes already queued keep their
    /// due time.
    Delay(Duration),
    /// A partition: nothing is forwarded in either direction, and new connections are accepted
    /// but nothing is forwarded on them either. Bytes read during the blackhole are never
    /// delivered: when the mode leaves `Blackhole`, every connection that existed during it is
    /// closed on both sides.
    Blackhole,
}

impl Mode {
    /// How long a byte read now waits before it is written.
    fn delay(self) -> Duration {
        match self {
            Mode::Delay(delay) => delay,
            Mode::Pass | Mode::Blackhole => Duration::ZERO,
        }
    }
}

/// What every connection task watches: the mode and the counters that let a task tell whether
/// a blackhole or a cut happened since it was accepted, even one it never saw in progress.
#[derive(Clone, Copy, Debug)]
struct State {
    mode: Mode,
    /// Blackholes begun so far.
    blackholes: u64,
    /// Calls to [`Relay::cut_all`] so far.
    cuts: u64,
}

/// A connection's view of [`State`] when it was accepted.
#[derive(Clone, Copy, Debug)]
struct Origin {
    /// Accepted during a blackhole: doomed from the start.
    in_blackhole: bool,
    blackholes: u64,
    cuts: u64,
}

impl Origin {
    fn at(state: &State) -> Origin {
        Origin {
            in_blackhole: state.mode == Mode::Blackhole,
            blackholes: state.blackholes,
            cuts: state.cuts,
        }
    }

    /// The connection has existed during a blackhole: it must forward nothing more, and it
    /// closes once no blackhole is in progress. A blackhole begun since the accept shows in the
    /// counter even if it already ended, so a short one the task never saw still dooms it.
    fn doomed(self, now: &State) -> bool {
        self.in_blackhole || now.blackholes != self.blackholes
    }

    /// [`Relay::cut_all`] was called since the connection was accepted.
    fn cut(self, now: &State) -> bool {
        now.cuts != self.cuts
    }

    /// Checked before every write, so nothing is forwarded once the connection is doomed or
    /// cut, whatever the connection task is doing when that happens.
    fn may_forward(self, now: &State) -> io::Result<()> {
        if self.doomed(now) || self.cut(now) {
            Err(io::Error::other(
                "connection partitioned or cut by the relay",
            ))
        } else {
            Ok(())
        }
    }
}

/// Connection counts shared by the accept task, the connection tasks and [`Relay`].
#[derive(Default)]
struct Counters {
    open: AtomicUsize,
    accepted: AtomicU64,
}

/// Counts a connection as open for as long as its task (or the task's unstarted future) lives.
struct Open(Arc<Counters>);

impl Open {
    fn new(counters: &Arc<Counters>) -> Open {
        counters.open.fetch_add(1, Ordering::SeqCst);
        Open(Arc::clone(counters))
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A TCP relay on `127.0.0.1` that forwards every connection to one upstream address (a
/// kube-apiserver) according to its [`Mode`], for the robustness harness to partition, slow
/// down or reset one replica's link. Dropping it stops everything: the listener and every
/// connection are closed.
pub struct Relay {
    port: u16,
    state: watch::Sender<State>,
    counters: Arc<Counters>,
    /// Owns the listener and, through a `JoinSet`, every connection task.
    accept: JoinHandle<()>,
}

impl Relay {
    /// Listens on `127.0.0.1:0` and forwards every accepted connection to `upstream`, starting
    /// in [`Mode::Pass`].
    pub async fn start(upstream: SocketAddr) -> Result<Relay> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .context("binding the relay's listener on 127.0.0.1")?;
        let port = listener.local_addr()?.port();
        let (state, watcher) = watch::channel(State {
            mode: Mode::Pass,
            blackholes: 0,
            cuts: 0,
        });
        let counters = Arc::new(Counters::default());
        let accept = tokio::spawn(accept_loop(
            listener,
            upstream,
            watcher,
            Arc::clone(&counters),
        ));
        Ok(Relay {
            port,
            state,
            counters,
            accept,
        })
    }

    /// The port the relay listens on, on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Switches the mode for every connection, open or future. Leaving [`Mode::Blackhole`]
    /// closes every connection that existed during the blackhole.
    pub fn set_mode(&self, mode: Mode) {
        self.state.send_if_modified(|state| {
            if state.mode == mode {
                return false;
            }
            if mode == Mode::Blackhole {
                state.blackholes += 1;
            }
            state.mode = mode;
            true
        });
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.state.borrow().mode
    }

    /// Cuts every open connection at once (both sides closed; a client sees a reset or EOF), to
    /// model connections being reset. New connections are served normally afterwards, per the
    /// current mode.
    pub fn cut_all(&self) {
        self.state.send_modify(|state| state.cuts += 1);
    }

    /// Connections open now, for tests and the harness's report.
    pub fn open_connections(&self) -> usize {
        self.counters.open.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.counters.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        // Dropping the accept task drops its `JoinSet`, which aborts every connection task.
        self.accept.abort();
    }
}

/// Accepts connections until the relay is dropped, one task each.
async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    state: watch::Receiver<State>,
    counters: Arc<Counters>,
) {
    let mut connections = JoinSet::new();
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(_) => {
                // Transient (out of file descriptors, a connection reset before accept): retry.
                sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        counters.accepted.fetch_add(1, Ordering::SeqCst);
        let open = Open::new(&counters);
        let origin = Origin::at(&state.borrow());
        let state = state.clone();
        connections.spawn(async move {
            let _open = open;
            serve(client, upstream, state, origin).await;
        });
        while connections.try_join_next().is_some() {}
    }
}

/// Waits until `done` holds for the state, or the relay is gone.
async fn until(state: &mut watch::Receiver<State>, done: impl FnMut(&State) -> bool) {
    let _ = state.wait_for(done).await;
}

/// Runs one connection: connects upstream, forwards until either side closes, a cut or a
/// blackhole; a connection doomed by a blackhole is held, silent, until the blackhole ends.
/// Both sockets close when this returns.
async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut state: watch::Receiver<State>,
    origin: Origin,
) {
    let _ = client.set_nodelay(true);
    let stop = |now: &State| origin.doomed(now) || origin.cut(now);
    // The upstream connect is not made during a blackhole: a partition stops the SYN too.
    let upstream = tokio::select! {
        biased;
        () = until(&mut state, stop) => None,
        connected = TcpStream::connect(upstream) => match connected {
            Ok(upstream) => Some(upstream),
            // kube-apiserver is down: close the client at once so that it retries.
            Err(_) => return,
        },
    };
    // Kept open (silent) through a blackhole, then dropped with the client.
    let _upstream = match upstream {
        Some(mut upstream) => {
            let _ = upstream.set_nodelay(true);
            let forwarding = state.clone();
            tokio::select! {
                biased;
                () = until(&mut state, stop) => {}
                _ = pump(&mut client, &mut upstream, &forwarding, origin) => {}
            }
            Some(upstream)
        }
        None => None,
    };
    let now = *state.borrow();
    if origin.doomed(&now) && !origin.cut(&now) {
        until(&mut state, |now| {
            now.mode != Mode::Blackhole || origin.cut(now)
        })
        .await;
    }
}

/// Copies both directions through a delay pipeline each until both sides have closed their
/// write halves, or an error (including a refusal to forward: see [`Origin::may_forward`]).
async fn pump(
    client: &mut TcpStream,
    upstream: &mut TcpStream,
    state: &watch::Receiver<State>,
    origin: Origin,
) -> io::Result<()> {
    let (mut client_read, mut client_write) = client.split();
    let (mut upstream_read, mut upstream_write) = upstream.split();
    let (to_upstream, mut for_upstream) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let (to_client, mut for_client) = mpsc::channel(CHUNKS_IN_FLIGHT);
    tokio::try_join!(
        read_chunks(&mut client_read, to_upstream, state),
        write_chunks(&mut for_upstream, &mut upstream_write, state, origin),
        read_chunks(&mut upstream_read, to_client, state),
        write_chunks(&mut for_client, &mut client_write, state, origin),
    )?;
    Ok(())
}

/// Bytes read from one side and the time they are due on the other.
struct Chunk {
    due: Instant,
    bytes: Vec<u8>,
}

/// Reads continuously, stamping each chunk with its due time (read time plus the current
/// delay), until end of stream; dropping `chunks` then tells the writer to shut down.
async fn read_chunks(
    from: &mut (impl AsyncRead + Unpin),
    chunks: mpsc::Sender<Chunk>,
    state: &watch::Receiver<State>,
) -> io::Result<()> {
    let mut buffer = vec![0; READ_BUFFER];
    loop {
        let read = from.read(&mut buffer).await?;
        if read == 0 {
            return Ok(());
        }
        let due = Instant::now() + state.borrow().mode.delay();
        let chunk = Chunk {
            due,
            bytes: buffer[..read].to_vec(),
        };
        if chunks.send(chunk).await.is_err() {
            // The writer has failed; `try_join!` reports its error.
            return Ok(());
        }
    }
}

/// Writes chunks in order, each no earlier than its due time, then shuts down the write half
/// (forwarding a half-close).
async fn write_chunks(
    chunks: &mut mpsc::Receiver<Chunk>,
    to: &mut (impl AsyncWrite + Unpin),
    state: &watch::Receiver<State>,
    origin: Origin,
) -> io::Result<()> {
    while let Some(Chunk { due, bytes }) = chunks.recv().await {
        if due > Instant::now() {
            sleep_until(due).await;
        }
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            origin.may_forward(&state.borrow())?;
            let written = to.write(rest).await?;
            if written == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            rest = &rest[written..];
        }
    }
    origin.may_forward(&state.borrow())?;
    to.shutdown().await
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::wait::wait_until;

    /// Generous bound for things that must happen: a hang fails the test instead of blocking it.
    /// Never used to assert speed.
    const EVENTUALLY: Duration = Duration::from_secs(10);

    /// What an echo server received: each read, with the time it arrived.
    type Received = Arc<Mutex<Vec<(Instant, Vec<u8>)>>>;

    /// A TCP echo server that records everything it receives, with the time it arrived.
    struct Echo {
        addr: SocketAddr,
        received: Received,
        connections: Arc<AtomicUsize>,
        task: JoinHandle<()>,
    }

    impl Echo {
        async fn start() -> Echo {
            let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
            let addr = listener.local_addr().unwrap();
            let received = Received::default();
            let connections = Arc::new(AtomicUsize::new(0));
            let task = tokio::spawn({
                let received = Arc::clone(&received);
                let connections = Arc::clone(&connections);
                async move {
                    let mut tasks = JoinSet::new();
                    loop {
                        let (mut stream, _) = listener.accept().await.unwrap();
                        connections.fetch_add(1, Ordering::SeqCst);
                        let received = Arc::clone(&received);
                        tasks.spawn(async move {
                            let mut buffer = vec![0; 4096];
                            loop {
                                let read = match stream.read(&mut buffer).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(read) => read,
                                };
                                let bytes = buffer[..read].to_vec();
                                received
                                    .lock()
                                    .unwrap()
                                    .push((Instant::now(), bytes.clone()));
                                if stream.write_all(&bytes).await.is_err() {
                                    return;
                                }
                            }
                        });
                    }
                }
            });
            Echo {
                addr,
                received,
                connections,
                task,
            }
        }

        /// Everything received so far, across connections.
        fn bytes(&self) -> Vec<u8> {
            self.received
                .lock()
                .unwrap()
                .iter()
                .flat_map(|(_, bytes)| bytes.iter().copied())
                .collect()
        }

        fn first_arrival(&self) -> Option<Instant> {
            self.received.lock().unwrap().first().map(|(at, _)| *at)
        }

        fn connections(&self) -> usize {
            self.connections.load(Ordering::SeqCst)
        }
    }

    impl Drop for Echo {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    async fn connect(relay: &Relay) -> TcpStream {
        TcpStream::connect(("127.0.0.1", relay.port()))
            .await
            .unwrap()
    }

    async fn read_exactly(stream: &mut TcpStream, len: usize) -> Vec<u8> {
        let mut bytes = vec![0; len];
        tokio::time::timeout(EVENTUALLY, stream.read_exact(&mut bytes))
            .await
            .expect("the bytes arrive")
            .expect("the connection stays open");
        bytes
    }

    /// A round trip through the relay and the echo server, proving the connection forwards.
    async fn round_trip(stream: &mut TcpStream, message: &[u8]) {
        stream.write_all(message).await.unwrap();
        assert_eq!(read_exactly(stream, message.len()).await, message);
    }

    /// Nothing arrives, and the connection is not closed either, for `silence`.
    async fn assert_silent(stream: &mut TcpStream, silence: Duration) {
        let mut byte = [0; 1];
        if let Ok(read) = tokio::time::timeout(silence, stream.read(&mut byte)).await {
            panic!("expected silence, but the read returned {read:?} (byte {byte:?})");
        }
    }

    /// The relay closes the connection (end of stream or a reset) without delivering anything.
    async fn assert_closed(stream: &mut TcpStream) {
        let mut buffer = [0; 64];
        match tokio::time::timeout(EVENTUALLY, stream.read(&mut buffer)).await {
            Err(_) => panic!("the connection was not closed within {EVENTUALLY:?}"),
            Ok(Ok(0) | Err(_)) => {}
            Ok(Ok(read)) => panic!(
                "expected the connection closed, but received {:?}",
                String::from_utf8_lossy(&buffer[..read])
            ),
        }
    }

    async fn no_open_connections(relay: &Relay) {
        wait_until("the relay to have no open connection", EVENTUALLY, || {
            let open = relay.open_connections();
            async move {
                anyhow::ensure!(open == 0, "{open} open");
                Ok(())
            }
        })
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn pass_forwards_bytes_both_ways() {
        let echo = Echo::start().await;
        let relay = Relay::start(echo.addr).await.unwrap();
        assert_eq!(relay.mode(), Mode::Pass);
        let mut stream = connect(&relay).await;
        // More than a socket buffer, written while reading, so both directions stream at once.
        let payload: Vec<u8> = (0..512 * 1024).map(|i| (i % 251) as u8).collect();
        let (mut read, mut write) = stream.split();
        let mut echoed = vec![0; payload.len()];
        let (written, read) = tokio::join!(
            write.write_all(&payload),
            tokio::time::timeout(EVENTUALLY, read.read_exact(&mut echoed)),
        );
        written.unwrap();
        read.expect("the echo arrives").unwrap();
        assert!(echoed == payload, "the echo differs from what was sent");
        assert!(echo.bytes() == payload, "the server got other bytes");
        assert_eq!(relay.accepted(), 1);
        assert_eq!(relay.open_connections(), 1);
        drop(stream);
        no_open_connections(&relay).await;
    }

    #[tokio::test]
    async fn delay_holds_every_byte_back_in_both_directions() {
        let echo = Echo::start().await;
        let relay = Relay::start(echo.addr).await.unwrap();
        let delay = Duration::from_millis(200);
        relay.set_mode(Mode::Delay(delay));
        assert_eq!(relay.mode(), Mode::Delay(delay));
        let mut stream = connect(&relay).await;
        let sent = Instant::now();
        round_trip(&mut stream, b"slow").await;
        let returned = sent.elapsed();
        let one_way = echo.first_arrival().unwrap() - sent;
        // Lower bounds only, with a margin for timer granularity.
        assert!(
            one_way >= Duration::from_millis(180),
            "reached the server after {one_way:?}"
        );
        assert!(
            returned >= Duration::from_millis(380),
            "came back after {returned:?}"
        );
    }

    #[tokio::test]
    async fn delay_keeps_order_across_small_writes_and_a_switch_to_pass() {
        let echo = Echo::start().await;
        let relay = Relay::start(echo.addr).await.unwrap();
        relay.set_mode(Mode::Delay(Duration::from_millis(300)));
        let mut stream = connect(&relay).await;
        let mut expected = Vec::new();
        for i in 0..200 {
            if i == 100 {
                // Later chunks are due before the queued ones; they must still come after them.
                relay.set_mode(Mode::Pass);
            }
            let message = format!("{i},");
            stream.write_all(message.as_bytes()).await.unwrap();
            expected.extend_from_slice(message.as_bytes());
            sleep(Duration::from_millis(1)).await;
        }
        let echoed = read_exactly(&mut stream, expected.len()).await;
        assert_eq!(
            String::from_utf8_lossy(&echoed),
            String::from_utf8_lossy(&expected)
        );
        assert_eq!(
            String::from_utf8_lossy(&echo.bytes()),
            String::from_utf8_lossy(&expected)
        );
    }

    #[tokio::test]
    async fn blackhole_forwards_nothing_and_its_connections_die_when_it_ends() {
        let echo = Echo::start().await;
        let relay = Relay::start(echo.addr).await.unwrap();
        let mut before = connect(&relay).await;
        round_trip(&mut before, b"hello").await;

        relay.set_mode(Mode::Blackhole);
        assert_eq!(relay.mode(), Mode::Blackhole);
        before.write_all(b"lost").await.unwrap();
        let mut during = connect(&relay).await;
        during.write_all(b"never").await.unwrap();
        assert_silent(&mut before, Duration::from_millis(300)).await;
        assert_silent(&mut during, Duration::from_millis(300)).await;
        assert_eq!(
            relay.accepted(),
            2,
            "connections are accepted in a blackhole"
        );
        assert_eq!(relay.open_connections(), 2);

        relay.set_mode(Mode::Pass);
        assert_closed(&mut before).await;
        assert_closed(&mut during).await;
        no_open_connections(&relay).await;

        let mut after = connect(&relay).await;
        round_trip(&mut after, b"again").await;
        assert_eq!(
            String::from_utf8_lossy(&echo.bytes()),
            "helloagain",
            "bytes written into the blackhole reached the server"
        );
        assert_eq!(
            echo.connections(),
            2,
            "the connection made in the blackhole reached the server"
        );
    }

    #[tokio::test]
    async fn blackhole_drops_bytes_already_queued_by_a_delay() {
        let echo = Echo::start().await;
        let relay = Relay::start(echo.addr).await.unwrap();
        let delay = Duration::from_secs(2);
        relay.set_mode(Mode::Delay(delay));
        let mut stream = connect(&relay).await;
        stream.write_all(b"one").await.unwrap();
        // Once the server has "one", its echo waits in the relay's server-to-client queue.
        let deadline = Instant::now() + EVENTUALLY;
        while echo.bytes().is_empty() {
            assert!(Instant::now() < deadline, "the server never got \"one\"");
            sleep(Duration::from_millis(10)).await;
        }
        stream.write_all(b"two").await.unwrap();
        // "two" now waits in the client-to-server queue (read at once, due after `delay`).
        sleep(Duration::from_millis(50)).await;
        relay.set_mode(Mode::Blackhole);
        // Past both chunks' due times.
        assert_silent(&mut stream, delay + Duration::from_millis(500)).await;
        assert_eq!(String::from_utf8_lossy(&echo.bytes()), "one");

        relay.set_mode(Mode::Pass);
        assert_closed(&mut stream).await;
        sleep(Duration::from_millis(100)).await;
        assert_eq!(
            String::from_utf8_lossy(&echo.bytes()),
            "one",
            "a chunk queued before the blackhole was delivered after it"
        );
    }

    #[tokio::test]
    async fn cut_all_closes_open_connections_and_new_ones_work() {
        let echo = Echo::start().await;
        let relay = Relay::start(echo.addr).await.unwrap();
        let mut first = connect(&relay).await;
        let mut second = connect(&relay).await;
        round_trip(&mut first, b"a").await;
        round_trip(&mut second, b"b").await;
        assert_eq!(relay.open_connections(), 2);

        relay.cut_all();
        assert_closed(&mut first).await;
        assert_closed(&mut second).await;
        no_open_connections(&relay).await;

        let mut third = connect(&relay).await;
        round_trip(&mut third, b"c").await;
        assert_eq!(relay.accepted(), 3);
        assert_eq!(relay.open_connections(), 1);
    }

    #[tokio::test]
    async fn upstream_down_closes_the_client_connection() {
        // A port nothing listens on any more.
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let down = listener.local_addr().unwrap();
        drop(listener);
        let relay = Relay::start(down).await.unwrap();
        let mut stream = connect(&relay).await;
        assert_closed(&mut stream).await;
        no_open_connections(&relay).await;
        assert_eq!(relay.accepted(), 1);
    }

    #[tokio::test]
    async fn dropping_the_relay_closes_its_connections_and_listener() {
        let echo = Echo::start().await;
        let relay = Relay::start(echo.addr).await.unwrap();
        let port = relay.port();
        let mut stream = connect(&relay).await;
        round_trip(&mut stream, b"bye").await;
        drop(relay);
        assert_closed(&mut stream).await;
        wait_until(
            "the relay's port to refuse connections",
            EVENTUALLY,
            || async {
                match TcpStream::connect(("127.0.0.1", port)).await {
                    Err(_) => Ok(()),
                    Ok(_) => Err(anyhow::anyhow!("still accepting")),
                }
            },
        )
        .await
        .unwrap();
    }
}
