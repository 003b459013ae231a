//! A small forward proxy for the `proxySecretRef` tests, written here: HTTP `CONNECT` and
//! SOCKS5 (RFC 1928, with RFC 1929 username/password) on one port, told apart by the first
//! byte. It records every tunnel it opened, so a test proves the scan really went through it,
//! and can demand credentials.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;

use base64::Engine as _;

pub struct Proxy {
    pub port: u16,
    tunnels: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    /// Starts the proxy on a free port of 127.0.0.1; `auth` is the username and password
    /// it demands (none: open).
    pub fn start(auth: Option<(&str, &str)>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().unwrap().port();
        let tunnels = Arc::new(Mutex::new(Vec::new()));
        let auth = auth.map(|(u, p)| (u.to_string(), p.to_string()));
        let record = tunnels.clone();
        thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let record = record.clone();
                let auth = auth.clone();
                thread::spawn(move || {
                    let _ = serve(client, auth.as_ref(), &record);
                });
            }
        });
        Self { port, tunnels }
    }

    /// `kind target` of every tunnel opened: `CONNECT 127.0.0.1:5000`, `SOCKS5 localhost:5000`.
    pub fn tunnels(&self) -> Vec<String> {
        self.tunnels.lock().unwrap().clone()
    }
}

fn serve(
    mut client: TcpStream,
    auth: Option<&(String, String)>,
    record: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    let mut first = [0u8; 1];
    client.peek(&mut first)?;
    let (kind, target) = if first[0] == 5 {
        ("SOCKS5", socks5(&mut client, auth)?)
    } else {
        ("CONNECT", connect(&mut client, auth)?)
    };
    let Some(target) = target else {
        return Ok(());
    };
    let upstream = TcpStream::connect(&target);
    let upstream = match upstream {
        Ok(upstream) => upstream,
        Err(_) => {
            if kind == "SOCKS5" {
                client.write_all(&[5, 5, 0, 1, 0, 0, 0, 0, 0, 0])?;
            } else {
                client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")?;
            }
            return Ok(());
        }
    };
    record.lock().unwrap().push(format!("{kind} {target}"));
    if kind == "SOCKS5" {
        client.write_all(&[5, 0, 0, 1, 127, 0, 0, 1, 0, 0])?;
    } else {
        client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")?;
    }
    pipe(client, upstream);
    Ok(())
}

/// Copies both ways until either side closes.
fn pipe(client: TcpStream, upstream: TcpStream) {
    let (mut c_read, mut u_write) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
    let up = thread::spawn(move || {
        let _ = std::io::copy(&mut c_read, &mut u_write);
        let _ = u_write.shutdown(Shutdown::Write);
    });
    let (mut u_read, mut c_write) = (upstream, client);
    let _ = std::io::copy(&mut u_read, &mut c_write);
    let _ = c_write.shutdown(Shutdown::Write);
    let _ = up.join();
}

/// The target of a `CONNECT`, or None after a refusal (407 without the right credentials).
fn connect(client: &mut TcpStream, auth: Option<&(String, String)>) -> std::io::Result<Option<String>> {
    let mut reader = BufReader::new(client.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let mut authorization = None;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header)?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("proxy-authorization")
        {
            authorization = Some(value.trim().to_string());
        }
    }
    if method != "CONNECT" {
        client.write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")?;
        return Ok(None);
    }
    if let Some((user, password)) = auth {
        let want = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        );
        if authorization.as_deref() != Some(want.as_str()) {
            client.write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")?;
            return Ok(None);
        }
    }
    Ok(Some(target.to_string()))
}

/// The target of a SOCKS5 CONNECT, or None after a refusal.
fn socks5(client: &mut TcpStream, auth: Option<&(String, String)>) -> std::io::Result<Option<String>> {
    let mut head = [0u8; 2];
    client.read_exact(&mut head)?;
    let mut methods = vec![0u8; usize::from(head[1])];
    client.read_exact(&mut methods)?;
    let want = if auth.is_some() { 2 } else { 0 };
    if !methods.contains(&want) {
        client.write_all(&[5, 0xff])?;
        return Ok(None);
    }
    client.write_all(&[5, want])?;
    if let Some((user, password)) = auth {
        let mut version = [0u8; 2];
        client.read_exact(&mut version)?;
        let mut given_user = vec![0u8; usize::from(version[1])];
        client.read_exact(&mut given_user)?;
        let mut len = [0u8; 1];
        client.read_exact(&mut len)?;
        let mut given_password = vec![0u8; usize::from(len[0])];
        client.read_exact(&mut given_password)?;
        if given_user != user.as_bytes() || given_password != password.as_bytes() {
            client.write_all(&[1, 1])?;
            return Ok(None);
        }
        client.write_all(&[1, 0])?;
    }
    let mut request = [0u8; 4];
    client.read_exact(&mut request)?;
    let host = match request[3] {
        1 => {
            let mut ip = [0u8; 4];
            client.read_exact(&mut ip)?;
            std::net::Ipv4Addr::from(ip).to_string()
        }
        3 => {
            let mut len = [0u8; 1];
            client.read_exact(&mut len)?;
            let mut name = vec![0u8; usize::from(len[0])];
            client.read_exact(&mut name)?;
            String::from_utf8_lossy(&name).into_owned()
        }
        _ => {
            client.write_all(&[5, 8, 0, 1, 0, 0, 0, 0, 0, 0])?;
            return Ok(None);
        }
    };
    let mut port = [0u8; 2];
    client.read_exact(&mut port)?;
    Ok(Some(format!("{host}:{}", u16::from_be_bytes(port))))
}
