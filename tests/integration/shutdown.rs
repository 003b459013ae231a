//! SIGTERM while a build runs: the controller cancels the build and exits well within its
//! graceful period (issue 28, finding 8: it waited for running builds forever, still alive 10
//! minutes later; then it left them at the end of the period), pruning and writing nothing
//! on the way out.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::controller::Scenario;

const REV1: &str = "main@sha1:1111111111111111111111111111111111111111";
const REV2: &str = "main@sha1:2222222222222222222222222222222222222222";

/// controller-runtime's default graceful shutdown timeout, which Flux's controllers keep.
const GRACE: Duration = Duration::from_secs(30);

/// A Git smart-HTTP server on 127.0.0.1 that answers every request with a 200 whose body
/// comes one byte a second, so a fetch from it never ends and never trips a read timeout.
/// Says on `arrived` when a request came in. Returns the repository's URL.
fn trickling_git_server(arrived: mpsc::Sender<()>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/repo.git", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let arrived = arrived.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                if stream.read(&mut buf).unwrap_or(0) == 0 {
                    return;
                }
                let _ = arrived.send(());
                let head = "HTTP/1.1 200 OK\r\nContent-Type: application/x-git-upload-pack-advertisement\r\nContent-Length: 1000000\r\n\r\n";
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
                // Ten minutes at most; the write fails once the controller is gone.
                for _ in 0..600 {
                    if stream.write_all(b"0").is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            });
        }
    });
    url
}

#[tokio::test]
async fn sigterm_cancels_a_running_build_and_exits_pruning_nothing() {
    let s = Scenario::new("shutdown-build").await;
    let mut controller = s.start_controller(&[]);
    let local = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: local\ndata:\n  value: x\n";
    s.publish(
        "repo",
        REV1,
        &[
            ("kustomization.yaml", "resources: [local.yaml]\n"),
            ("local.yaml", local),
        ],
    )
    .await;
    s.apply("app", json!({"timeout": "10m"})).await;
    let applied = s.wait_applied(&controller, "app", REV1).await;

    // The next revision drops local.yaml (a pass that ran to the end would prune it) for a
    // remote base whose fetch takes the whole ten minutes of the build.
    let (arrived, requests) = mpsc::channel();
    let url = trickling_git_server(arrived);
    let kustomization = format!("resources:\n  - {url}//base?timeout=10m\n");
    s.publish("repo", REV2, &[("kustomization.yaml", &kustomization)])
        .await;
    let fetching = tokio::task::spawn_blocking(move || requests.recv_timeout(Duration::from_secs(120)));
    assert!(
        fetching.await.unwrap().is_ok(),
        "the build never reached the remote base:\n{}",
        controller.logs()
    );

    controller.signal("TERM");
    let signalled = Instant::now();
    // A last-resort guard only: the graceful period, then as long again and more for a
    // loaded machine. Before, the process never exited.
    let bound = GRACE * 3;
    let status = loop {
        if let Some(status) = controller.exited() {
            break status;
        }
        assert!(
            signalled.elapsed() < bound,
            "still running {bound:?} after SIGTERM:\n{}",
            controller.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let took = signalled.elapsed();
    eprintln!("exited {took:?} after SIGTERM");
    let logs = controller.logs();
    assert!(status.success(), "exited with {status}:\n{logs}");
    // The build stopped on its thread, told so, and was waited for: the period did not run
    // out (before, the process left the build running at its end, 30 s after the signal).
    let build_stopped = logs.lines().any(|line| {
        line.contains("build stopped")
            && line.contains("the build was canceled: the controller is shutting down")
    });
    assert!(build_stopped, "the build did not say it was canceled:\n{logs}");
    assert!(
        logs.contains("reconciliation canceled: the controller is shutting down"),
        "the pass did not say it was canceled:\n{logs}"
    );
    assert!(
        !logs.contains("graceful shutdown period over"),
        "the build was abandoned, not canceled:\n{logs}"
    );

    // Nothing pruned, the inventory and the last applied revision kept, and no failure
    // written for the canceled pass (Flux's status patch fails on its canceled context).
    assert_eq!(s.config_map_value("local").await.as_deref(), Some("x"));
    let status = s.get("app").await.unwrap().status.unwrap();
    assert_eq!(status.last_applied_revision.as_deref(), Some(REV1));
    assert_eq!(status.inventory, applied.status.unwrap().inventory);
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
    assert_ne!(ready.map(|c| c.status.as_str()), Some("False"), "{ready:?}");
    s.delete().await;
}
