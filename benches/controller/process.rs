//! The controllers under test: how each is started, and what its process used.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The flags both controllers get, in one place: Flux's default concurrency, one namespace,
/// no leader election, quiet logs (`BENCH_LOG_LEVEL` overrides that, to profile a run), ports
/// picked by the system.
pub(crate) fn flags() -> Vec<String> {
    let level = std::env::var("BENCH_LOG_LEVEL").unwrap_or_else(|_| "error".into());
    [
        "--concurrent=4",
        "--watch-all-namespaces=false",
        "--enable-leader-election=false",
        &format!("--log-level={level}"),
        "--metrics-addr=127.0.0.1:0",
        "--health-addr=127.0.0.1:0",
    ]
    .map(String::from)
    .to_vec()
}

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Peer {
    Flux,
    Ours,
}

impl Peer {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Peer::Flux => "flux",
            Peer::Ours => "ours",
        }
    }

    /// Whether `BENCH_PEERS` (comma-separated names, default both) asks for this controller:
    /// one alone is for profiling, never for a ratio.
    pub(crate) fn selected(self) -> bool {
        std::env::var("BENCH_PEERS").map_or(true, |peers| peers.split(',').any(|p| p.trim() == self.name()))
    }
}

/// What a phase of a controller left out by `BENCH_PEERS` reports.
pub(crate) const NOT_SELECTED: &str = "not run (BENCH_PEERS)";

pub(crate) struct Binaries {
    pub(crate) flux_dir: PathBuf,
    pub(crate) ours: PathBuf,
}

impl Binaries {
    pub(crate) fn command(&self, peer: Peer) -> Command {
        // Both take the same arguments: ours reads Flux's flags without a subcommand.
        match peer {
            Peer::Flux => Command::new(self.flux_dir.join("kustomize-controller")),
            Peer::Ours => Command::new(&self.ours),
        }
    }
}

/// One controller process and where its log goes.
pub(crate) struct Controller {
    child: Child,
    log: PathBuf,
}

impl Controller {
    pub(crate) fn start(binaries: &Binaries, peer: Peer, ns: &str, logs: &Path) -> Controller {
        let log = logs.join(format!("{ns}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = binaries
            .command(peer)
            .args(flags())
            .env("RUNTIME_NAMESPACE", ns)
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start the {} controller: {e}", peer.name()));
        Controller { child, log }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Why the controller is no longer usable, if it exited.
    pub(crate) fn exited(&mut self) -> Option<String> {
        let status = self.child.try_wait().ok()??;
        Some(format!(
            "controller exited ({status}); log tail: {}",
            self.log_tail()
        ))
    }

    pub(crate) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    pub(crate) fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU seconds (user + system) and peak RSS in KiB of a process, from /proc.
pub(crate) fn usage(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    // After the command name: state is field 3, utime 14 and stime 15, in clock ticks.
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    let cpu = (ticks(11) + ticks(12)) / 100.0;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    (cpu, rss)
}

/// CPU seconds used so far by the control plane's processes (etcd, kube-apiserver,
/// kube-controller-manager, the fake kubelet), from the pid files `e2e/cluster.sh` keeps in
/// `E2E_STATE`; 0 when that is unset. What the API server and the rollouts cost beside the
/// controller tells which of them bounds a workload.
pub(crate) fn control_plane_cpu() -> f64 {
    let Ok(state) = std::env::var("E2E_STATE") else {
        return 0.0;
    };
    let Ok(entries) = std::fs::read_dir(state) else {
        return 0.0;
    };
    entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "pid"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok()?.trim().parse::<u32>().ok())
        .map(|pid| usage(pid).0)
        .sum()
}
