#!/usr/bin/env python3
"""Our image-reflector-controller beside Flux's (v1.2.0), in turn, on one control plane and one
registry (`make bench-images`). Not a test.

Workload: N ImageRepositories, each on its own registry repository of 100 tags, and N semver
ImagePolicies (N = 1000 x BENCH_SCALE). For each controller, in a namespace of its own with a
fresh storage directory: the objects are created, then the controller starts (cold), and the
phase ends when every ImageRepository and ImagePolicy is Ready with the newest tag. Then the
controller is stopped and started again on the same storage (restart), and the phase ends when
the new process has reconciled every ImagePolicy once (its controller_runtime_reconcile_total) and
every policy is Ready with the newest tag.

Per phase: wall time; registry requests (lines of the registry's access log); API requests
(the controller's own rest_client_requests_total); CPU seconds and peak RSS of the controller
process. Counts are read SETTLE seconds after the phase ends, so trailing work is included.

Environment: KUBECONFIG; E2E_STATE (the control plane: its kubectl); FLUX_IRC_BIN, the
directory e2e/fluxirc/build.sh prints; BENCH_IRC, our binary (default
target/release/image-reflector-controller); BENCH_SCALE (default 1); BENCH_PEERS (flux,ours).
"""

import concurrent.futures
import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAGS = [f"1.{t // 10}.{t % 10}" for t in range(100)]
NEWEST = "1.9.9"
SETTLE = 5
LIMIT = 1800


def log(msg):
    print(f"bench-images: {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kubectl(*args, stdin=None):
    bin_dir = open(os.path.join(os.environ["E2E_STATE"], "bin")).read().strip()
    out = subprocess.run([os.path.join(bin_dir, "kubectl"), *args], input=stdin,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


class Registry:
    """Debian's docker-registry with its access log on, and the pushes of the workload."""

    def __init__(self, work):
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.log_path = os.path.join(work, "registry.log")
        self.proc = subprocess.Popen(
            [os.path.join(ROOT, "e2e/registry/serve.sh"), os.path.join(work, "registry"),
             str(self.port), "--access-log"],
            stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT, start_new_session=True)
        for _ in range(100):
            try:
                self.request("GET", "/v2/")
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the registry did not start: " + open(self.log_path).read())

    def request(self, method, path, body=None, headers=None, conn=None):
        own = conn is None
        conn = conn or http.client.HTTPConnection(self.host, timeout=30)
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        if own:
            conn.close()
        if resp.status >= 300:
            raise RuntimeError(f"{method} {path}: {resp.status} {data[:200]!r}")
        return resp

    def requests(self):
        """Requests served so far (access-log lines)."""
        with open(self.log_path) as f:
            return sum(1 for line in f if re.search(r'"(GET|HEAD|POST|PUT|PATCH|DELETE) /v2', line))

    def push(self, repos):
        """Every repository gets the same two blobs (mounted after the first) and one distinct
        manifest per tag."""
        config = b'{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}'
        layer = b"bench layer\n"
        blobs = [(config, "sha256:" + hashlib.sha256(config).hexdigest()),
                 (layer, "sha256:" + hashlib.sha256(layer).hexdigest())]
        first = repos[0]
        for data, digest in blobs:
            loc = self.request("POST", f"/v2/{first}/blobs/uploads/").getheader("Location")
            loc = loc.split(self.host, 1)[-1]
            sep = "&" if "?" in loc else "?"
            self.request("PUT", f"{loc}{sep}digest={digest}", body=data,
                         headers={"Content-Type": "application/octet-stream"})

        def one(repo):
            conn = http.client.HTTPConnection(self.host, timeout=30)
            if repo != first:
                for _, digest in blobs:
                    self.request("POST", f"/v2/{repo}/blobs/uploads/?mount={digest}&from={first}",
                                 conn=conn)
            for tag in TAGS:
                manifest = json.dumps({
                    "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                               "digest": blobs[0][1], "size": len(config)},
                    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                "digest": blobs[1][1], "size": len(layer)}],
                    "annotations": {"bench.repo": repo, "bench.tag": tag}})
                self.request("PUT", f"/v2/{repo}/manifests/{tag}", body=manifest,
                             headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
                             conn=conn)
            conn.close()

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(one, repos))

    def stop(self):
        os.killpg(self.proc.pid, 15)
        self.proc.wait()


def metrics(port):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        return text
    except OSError:
        return ""


def metric_sum(text, name, where=lambda labels: True):
    total = 0.0
    for m in re.finditer(rf"^{name}{{([^}}]*)}} (\S+)$", text, re.M):
        if where(m.group(1)):
            total += float(m.group(2))
    return total


def reconciled(text, controller):
    """Reconciles of `controller` that did not end in an error."""
    return metric_sum(text, "controller_runtime_reconcile_total",
                      lambda l: f'controller="{controller}"' in l and 'result="error"' not in l)


def usage(pid):
    """CPU seconds (user + system) and peak RSS in KiB, from /proc."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    hwm = re.search(r"VmHWM:\s+(\d+)", open(f"/proc/{pid}/status").read())
    return cpu, int(hwm.group(1))


class Controller:
    def __init__(self, peer, binary, ns, storage, logs):
        self.metrics_port = free_port()
        self.log_file = os.path.join(logs, f"{ns}.log")
        self.proc = subprocess.Popen(
            [binary, "--watch-all-namespaces=false", "--enable-leader-election=false",
             "--log-level=error", "--log-encoding=json", f"--storage-path={storage}",
             f"--metrics-addr=127.0.0.1:{self.metrics_port}",
             f"--health-addr=127.0.0.1:{free_port()}"],
            env={**os.environ, "RUNTIME_NAMESPACE": ns},
            stdout=open(self.log_file, "a"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.peer = peer

    def check(self):
        if self.proc.poll() is not None:
            tail = open(self.log_file).read().splitlines()[-5:]
            raise RuntimeError(f"{self.peer} exited ({self.proc.returncode}): {' | '.join(tail)}")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def objects(ns, registry, n):
    items = []
    for i in range(n):
        name = f"app-{i}"
        items.append({"apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImageRepository",
                      "metadata": {"name": name, "namespace": ns},
                      "spec": {"image": f"{registry.host}/bench/{name}", "interval": "1h"}})
        items.append({"apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImagePolicy",
                      "metadata": {"name": name, "namespace": ns},
                      "spec": {"imageRepositoryRef": {"name": name},
                               "policy": {"semver": {"range": ">=1.0.0"}}}})
    return {"apiVersion": "v1", "kind": "List", "items": items}


def ready(obj):
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               and obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
               for c in obj.get("status", {}).get("conditions", []))


def not_done(ns):
    """How many ImageRepositories and ImagePolicies are not yet Ready (policies: at NEWEST)."""
    listed = json.loads(kubectl("get", "imagerepositories,imagepolicies", "-n", ns, "-o", "json"))
    left = 0
    for obj in listed["items"]:
        done = ready(obj)
        if obj["kind"] == "ImagePolicy":
            done = done and obj["status"].get("latestRef", {}).get("tag") == NEWEST
        left += not done
    return left


def measure(controller, registry, done):
    """Runs from the controller's start until `done()`; then settles and reads the counts."""
    registry_before = registry.requests()
    started = time.monotonic()
    while True:
        controller.check()
        if done():
            break
        if time.monotonic() - started > LIMIT:
            raise RuntimeError(f"{controller.peer}: not done after {LIMIT} s")
        time.sleep(2)
    wall = time.monotonic() - started
    time.sleep(SETTLE)
    cpu, rss = usage(controller.proc.pid)
    api = metric_sum(metrics(controller.metrics_port), "rest_client_requests_total")
    return {"wall": wall, "registry": registry.requests() - registry_before, "api": api,
            "cpu": cpu, "rss": rss}


def run(peer, binary, registry, n, work):
    ns = f"bench-images-{peer}-{os.getpid()}"
    kubectl("create", "namespace", ns)
    log(f"{peer}: creating {n} ImageRepositories and {n} ImagePolicies in {ns}")
    kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(objects(ns, registry, n)))
    storage = os.path.join(work, f"data-{peer}")
    os.makedirs(storage)
    log(f"{peer}: cold start")
    controller = Controller(peer, binary, ns, storage, work)
    try:
        cold = measure(controller, registry, lambda: not_done(ns) == 0)
    finally:
        controller.stop()
    log(f"{peer}: restart")
    controller = Controller(peer, binary, ns, storage, work)

    def restarted():
        text = metrics(controller.metrics_port)
        # Ours counts no reconcile for a repository whose scan is not due: policies only.
        return reconciled(text, "imagepolicy") >= n and not_done(ns) == 0

    try:
        restart = measure(controller, registry, restarted)
    finally:
        controller.stop()
    return cold, restart


def table(n, rows):
    def ratio(a, b):
        return f"{a / b:.1f}x" if b else "n/a"

    lines = [f"N = {n} (ImageRepositories x 100 tags, and ImagePolicies)", "",
             "| phase | controller | wall | registry requests | API requests | CPU | peak RSS |",
             "|---|---|---|---|---|---|---|"]
    for phase, samples in rows:
        for peer in ("flux", "ours"):
            s = samples.get(peer)
            if s is None:
                continue
            if isinstance(s, str):
                lines.append(f"| {phase} | {peer} | FAILED: {s} | | | | |")
                continue
            lines.append(f"| {phase} | {peer} | {s['wall']:.1f} s | {s['registry']} | "
                         f"{s['api']:.0f} | {s['cpu']:.1f} s | {s['rss'] / 1024:.0f} MiB |")
        f, o = samples.get("flux"), samples.get("ours")
        if isinstance(f, dict) and isinstance(o, dict):
            lines.append(f"| {phase} | Flux / ours | {ratio(f['wall'], o['wall'])} | "
                         f"{ratio(f['registry'], o['registry'])} | {ratio(f['api'], o['api'])} | "
                         f"{ratio(f['cpu'], o['cpu'])} | {ratio(f['rss'], o['rss'])} |")
    return "\n".join(lines)


def main():
    flux_dir = os.environ.get("FLUX_IRC_BIN")
    if not flux_dir:
        sys.exit("FLUX_IRC_BIN is unset: `make bench-images` sets it from e2e/fluxirc/build.sh")
    binaries = {"flux": os.path.join(flux_dir, "image-reflector-controller"),
                "ours": os.environ.get("BENCH_IRC",
                                       os.path.join(ROOT, "target/release/image-reflector-controller"))}
    for peer, path in binaries.items():
        if not os.access(path, os.X_OK):
            sys.exit(f"{peer}'s controller {path} is missing")
    scale = float(os.environ.get("BENCH_SCALE", "1"))
    peers = os.environ.get("BENCH_PEERS", "flux,ours").split(",")
    n = max(1, round(1000 * scale))
    work = tempfile.mkdtemp(prefix="bench-images-")
    for plural in ("imagerepositories", "imagepolicies"):
        kubectl("apply", "--server-side", "--force-conflicts", "-f",
                os.path.join(ROOT, f"crds/image.toolkit.fluxcd.io_{plural}.yaml"))
        kubectl("wait", "--for=condition=Established", "--timeout=60s",
                f"crd/{plural}.image.toolkit.fluxcd.io")
    registry = Registry(work)
    try:
        log(f"pushing {n} repositories x {len(TAGS)} tags to {registry.host}")
        started = time.monotonic()
        registry.push([f"bench/app-{i}" for i in range(n)])
        log(f"pushed in {time.monotonic() - started:.0f} s")
        rows = [("cold start to all Ready", {}), ("restart to every policy reconciled", {})]
        for peer in ("flux", "ours"):
            if peer not in peers:
                continue
            try:
                cold, restart = run(peer, binaries[peer], registry, n, work)
                rows[0][1][peer], rows[1][1][peer] = cold, restart
            except RuntimeError as e:
                rows[0][1][peer] = str(e)
        print(table(n, rows))
        log(f"logs and storage in {work}")
    finally:
        registry.stop()
    # The registry's data is large at full scale; the logs are kept.
    shutil.rmtree(os.path.join(work, "registry"), ignore_errors=True)


if __name__ == "__main__":
    main()
