//! A recording TCP relay: it sits between real clients and a Kafka listener (a broker
//! or `kpress run`), copies bytes both ways untouched, and records every request and
//! response frame with the API key and version of the request it belongs to. The
//! fuzz corpora are seeded from these recordings (`capture_corpus.rs`), and the
//! per-request benches' inputs from them (`capture_requests.rs`).

use crate::cluster::KafkaCluster;
use crate::kpress::KpressProxy;
use crate::ports::{free_port, free_port_range};
use anyhow::Context;
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Which way a frame went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Request,
    Response,
}

/// One recorded frame.
#[derive(Debug, Clone)]
pub struct Frame {
    pub direction: Direction,
    /// The API key and version of the request (for a response: of the request it
    /// answers, matched by correlation id on its connection).
    pub api_key: i16,
    pub api_version: i16,
    /// The whole frame: size prefix, header, body.
    pub bytes: Vec<u8>,
}

/// Frames recorded by one or more relays, in the order each connection saw them.
#[derive(Debug, Default)]
pub struct Recording {
    frames: Mutex<Vec<Frame>>,
}

impl Recording {
    pub fn new() -> Arc<Recording> {
        Arc::new(Recording::default())
    }

    /// A copy of every frame recorded so far.
    pub fn frames(&self) -> Vec<Frame> {
        self.frames
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn push(&self, frame: Frame) {
        self.frames
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(frame);
    }
}

/// kpress listens on 127.0.0.1 and advertises 127.0.0.2, where the relays listen on
/// the same ports: every connection a client makes after bootstrap goes through them.
const ADVERTISED: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// `kpress run` with `rules` in front of a one-node cluster, behind recording relays
/// on its bootstrap and node ports. Dropped (or [`RecordedKpress::stop`]ped), the
/// relays stop before kpress.
#[derive(Debug)]
pub struct RecordedKpress {
    relays: Vec<CaptureRelay>,
    /// Held so kpress runs as long as the relays in front of it.
    _proxy: KpressProxy,
    /// Every frame through the relays so far.
    pub recording: Arc<Recording>,
}

impl RecordedKpress {
    pub fn start(cluster: &KafkaCluster, rules: &str) -> anyhow::Result<RecordedKpress> {
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let node_port_base = free_port_range(1);
        let broker = cluster.node_addresses()[0];
        let config = format!(
            "[listener]\n\
             bind = \"{listen}\"\n\
             advertised_host = \"{ADVERTISED}\"\n\
             node_port_base = {node_port_base}\n\
             [upstream]\n\
             bootstrap_servers = [\"{broker}\"]\n\
             {rules}\n"
        );
        let proxy = KpressProxy::start(&config, listen).context("starting kpress")?;
        let recording = Recording::new();
        let relays = [listen.port(), node_port_base + 1]
            .into_iter()
            .map(|port| {
                let front = SocketAddr::new(IpAddr::V4(ADVERTISED), port);
                let back = SocketAddr::from(([127, 0, 0, 1], port));
                CaptureRelay::start(front, back, recording.clone())
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(RecordedKpress {
            relays,
            _proxy: proxy,
            recording,
        })
    }

    /// The bootstrap clients are given: the relay in front of kpress's listener.
    pub fn bootstrap(&self) -> String {
        self.relays[0].listen().to_string()
    }

    /// Stops the relays, then kpress; what was recorded.
    pub fn stop(self) -> Arc<Recording> {
        self.recording.clone()
    }
}

/// The frames' API keys and versions by correlation id, per connection.
type InFlight = Arc<Mutex<HashMap<i32, (i16, i16)>>>;

/// A running relay from `listen` to `upstream`; stopped (and its connections closed)
/// on drop.
#[derive(Debug)]
pub struct CaptureRelay {
    listen: SocketAddr,
    stop: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<JoinHandle<()>>,
}

impl CaptureRelay {
    /// Listens on `listen` and relays each connection to `upstream`, recording into
    /// `recording`.
    pub fn start(
        listen: SocketAddr,
        upstream: SocketAddr,
        recording: Arc<Recording>,
    ) -> anyhow::Result<CaptureRelay> {
        let listener =
            TcpListener::bind(listen).with_context(|| format!("relay binding {listen}"))?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let streams = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let (stop, streams) = (stop.clone(), streams.clone());
            std::thread::spawn(move || accept_loop(listener, upstream, recording, stop, streams))
        };
        Ok(CaptureRelay {
            listen,
            stop,
            streams,
            accept: Some(accept),
        })
    }

    pub fn listen(&self) -> SocketAddr {
        self.listen
    }
}

impl Drop for CaptureRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for stream in self
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = stream.shutdown(Shutdown::Both);
        }
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    recording: Arc<Recording>,
    stop: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
) {
    while !stop.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(_) => continue,
        };
        let Ok(server) = TcpStream::connect(upstream) else {
            // The client sees the connection close, as it would with no listener.
            continue;
        };
        let _ = client.set_nonblocking(false);
        let (Ok(client_in), Ok(server_in)) = (client.try_clone(), server.try_clone()) else {
            continue;
        };
        {
            let mut open = streams.lock().unwrap_or_else(|e| e.into_inner());
            open.extend(client.try_clone().ok());
            open.extend(server.try_clone().ok());
        }
        let in_flight = InFlight::default();
        let requests = Pipe {
            direction: Direction::Request,
            recording: recording.clone(),
            in_flight: in_flight.clone(),
        };
        let responses = Pipe {
            direction: Direction::Response,
            recording: recording.clone(),
            in_flight,
        };
        std::thread::spawn(move || requests.run(client_in, server));
        std::thread::spawn(move || responses.run(server_in, client));
    }
}

/// One direction of one connection.
struct Pipe {
    direction: Direction,
    recording: Arc<Recording>,
    in_flight: InFlight,
}

impl Pipe {
    /// Copies `from` to `to` until either side closes, recording whole frames.
    fn run(self, mut from: TcpStream, mut to: TcpStream) {
        let mut chunk = vec![0u8; 64 * 1024];
        let mut pending = Vec::new();
        loop {
            let n = match from.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // Recorded before it is forwarded: a request's correlation id must be
            // known before its response can arrive.
            pending.extend_from_slice(&chunk[..n]);
            self.record_whole_frames(&mut pending);
            if to.write_all(&chunk[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
        let _ = from.shutdown(Shutdown::Read);
    }

    fn record_whole_frames(&self, pending: &mut Vec<u8>) {
        loop {
            let Some(prefix) = pending.first_chunk::<4>() else {
                return;
            };
            let Ok(size) = usize::try_from(i32::from_be_bytes(*prefix)) else {
                // Not Kafka framing: nothing more on this connection can be recorded.
                pending.clear();
                return;
            };
            if pending.len() < 4 + size {
                return;
            }
            let bytes: Vec<u8> = pending.drain(..4 + size).collect();
            if let Some(frame) = self.frame(bytes) {
                self.recording.push(frame);
            }
        }
    }

    fn frame(&self, bytes: Vec<u8>) -> Option<Frame> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        let (api_key, api_version) = match self.direction {
            Direction::Request => {
                let header = bytes.get(4..12)?;
                let api_key = i16::from_be_bytes([header[0], header[1]]);
                let api_version = i16::from_be_bytes([header[2], header[3]]);
                let correlation_id =
                    i32::from_be_bytes([header[4], header[5], header[6], header[7]]);
                in_flight.insert(correlation_id, (api_key, api_version));
                (api_key, api_version)
            }
            Direction::Response => {
                let id = bytes.get(4..8)?;
                let correlation_id = i32::from_be_bytes([id[0], id[1], id[2], id[3]]);
                in_flight.remove(&correlation_id)?
            }
        };
        Some(Frame {
            direction: self.direction,
            api_key,
            api_version,
            bytes,
        })
    }
}
