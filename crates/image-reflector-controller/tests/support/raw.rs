//! A hostile registry for bounds tests: raw HTTP/1.1 on a free port of 127.0.0.1, one
//! response per connection, chosen by path. Not evidence of compatibility, only of limits.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A response: its head (status line and headers, without the blank line) and a body chunk
/// written `repeat` times.
pub struct Reply {
    pub head: String,
    pub chunk: Vec<u8>,
    pub repeat: usize,
}

impl Reply {
    pub fn new(status: &str, content_type: &str, body: &str) -> Self {
        Self {
            head: format!(
                "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}",
                body.len()
            ),
            chunk: body.as_bytes().to_vec(),
            repeat: 1,
        }
    }
}

/// Serves `handler(path)` until the returned task is dropped or aborted; returns the port.
pub async fn serve(handler: fn(&str) -> Reply) -> (u16, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&request);
                let path = line
                    .split(' ')
                    .nth(1)
                    .unwrap_or("/")
                    .split('?')
                    .next()
                    .unwrap_or("/");
                let reply = handler(path);
                let head = format!("{}\r\nconnection: close\r\n\r\n", reply.head);
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                for _ in 0..reply.repeat {
                    if stream.write_all(&reply.chunk).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, task)
}
