//! A TCP relay between the processes under test and a real server, which a
//! test can cut: every open connection is shut at once and new ones are
//! closed on arrival, as clients see a database that went down, until the
//! test restores it. It lets an outage test take the machine's Postgres
//! away from one cluster without stopping the server the rest of the suite
//! uses.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

pub struct TcpProxy {
    port: u16,
    up: Arc<AtomicBool>,
    closing: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl TcpProxy {
    /// Relays 127.0.0.1:`port()` to `target`.
    pub fn start(target: SocketAddr) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let closing = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Vec::new()));
        {
            let (up, closing, open) = (up.clone(), closing.clone(), open.clone());
            thread::spawn(move || {
                for conn in listener.incoming() {
                    if closing.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(client) = conn else { continue };
                    if !up.load(Ordering::SeqCst) {
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    }
                    let Ok(server) = TcpStream::connect(target) else {
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    {
                        let mut o = open.lock().unwrap();
                        o.push(client.try_clone().unwrap());
                        o.push(server.try_clone().unwrap());
                    }
                    pump(client.try_clone().unwrap(), server.try_clone().unwrap());
                    pump(server, client);
                }
            });
        }
        TcpProxy {
            port,
            up,
            closing,
            open,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The outage: open connections die, new ones are closed at once.
    pub fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// The server is reachable again (for new connections).
    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::SeqCst);
        self.cut();
        // Wakes the accept loop so it sees `closing`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Copies `from` to `to` until either side ends.
fn pump(mut from: TcpStream, mut to: TcpStream) {
    thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}
