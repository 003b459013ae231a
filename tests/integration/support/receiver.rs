//! The Go event receiver built by e2e/fluxpeer/build.sh: notification-controller's event
//! endpoint as the tests see it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::flux_deployment::fluxpeer_bin;

/// The Go event receiver: decodes each POST with Flux's `eventv1.Event`, unknown fields
/// refused; accepted events land one JSON per line in `out`, refusals in `out.rejected`.
pub struct EventReceiver {
    child: Child,
    /// The URL to give a controller as `--events-addr`.
    pub addr: String,
    out: PathBuf,
}

impl EventReceiver {
    pub fn start(dir: &Path) -> Self {
        let out = dir.join("events.jsonl");
        let addr_file = dir.join("receiver.addr");
        let child = Command::new(fluxpeer_bin().join("event-receiver"))
            .arg(format!("-out={}", out.display()))
            .arg(format!("-addr-file={}", addr_file.display()))
            .stdout(Stdio::null())
            .spawn()
            .expect("start event-receiver (built by e2e/fluxpeer/build.sh)");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let addr = loop {
            if let Ok(addr) = std::fs::read_to_string(&addr_file) {
                break addr;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "event-receiver did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Self {
            child,
            addr: format!("http://{addr}/"),
            out,
        }
    }

    pub fn accepted(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    pub fn rejected(&self) -> String {
        std::fs::read_to_string(self.out.with_extension("jsonl.rejected")).unwrap_or_default()
    }
}

impl Drop for EventReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
