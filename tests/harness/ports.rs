//! Free loopback ports.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// A loopback port that was free a moment ago (bound to port 0 and released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind 127.0.0.1:0")
}

/// Waits until something accepts TCP connections on `addr`, for at most `timeout`.
pub fn wait_for_port(addr: SocketAddr, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// A base port such that `base + 1 ..= base + n` were all free a moment ago (kpress
/// serves broker node N on `node_port_base + N`).
pub fn free_port_range(n: u16) -> u16 {
    for _ in 0..200 {
        let first = free_port();
        let base = first - 1;
        if base < 1024 || u32::from(base) + u32::from(n) > 65535 {
            continue;
        }
        let all_free = (1..=n).all(|i| TcpListener::bind(("127.0.0.1", base + i)).is_ok());
        if all_free {
            return base;
        }
    }
    panic!("no {n} consecutive free loopback ports found")
}
