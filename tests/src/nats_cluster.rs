//! A JetStream cluster of real `nats-server` processes on loopback, for the
//! tests of what Chime does when NATS itself fails: a node crashes, the
//! leader of a stream dies, the cluster restarts node by node, or one node
//! is cut from the others.
//!
//! Each node has its own client port, monitoring port, storage directory
//! and log. Nodes reach each other only through [`Proxy`]s the test holds,
//! one per ordered pair of nodes (node `i` dials node `j` through the proxy
//! `i → j`), so a test can cut one node from the others without touching
//! its clients: [`NatsCluster::isolate`] closes every route of that node
//! and refuses new ones, [`NatsCluster::heal`] lets them reconnect.
//! Servers also learn each other's route addresses from gossip and would
//! dial them directly, past the proxies; every node therefore advertises an
//! address nobody listens on, so the configured (proxied) routes are the
//! only ones that ever connect.
//!
//! ```ignore
//! let mut cluster = NatsCluster::start(3).await;
//! let js = async_nats::jetstream::new(cluster.connect().await);
//! let leader = cluster.stream_leader(&js, "CHIME_FIRE").await.expect("a leader");
//! cluster.kill(leader);
//! cluster.wait_new_leader(&js, "CHIME_FIRE", leader, Duration::from_secs(20)).await;
//! cluster.start_node(leader).await;
//! cluster.wait_healthy(&js, Duration::from_secs(30)).await;
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use futures::StreamExt;
use tempfile::TempDir;

use crate::child::terminate;
use crate::logfile;
use crate::nats::nats_server_binary;
use crate::ports::free_port;
use crate::proxy::Proxy;

/// How long a node may take to answer JetStream requests after it starts;
/// recovering its streams from disk and finding a meta leader count too.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long `stop()` waits after SIGTERM: a clustered server may first hand
/// its leaderships over.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// The cluster's name in every node's configuration.
const CLUSTER_NAME: &str = "chime-test";

/// Where every node says its routes are: nothing listens on port 1, so a
/// route learnt by gossip fails and only the proxied routes connect.
const UNREACHABLE_ROUTE: &str = "127.0.0.1:1";

/// One `nats-server` of the cluster.
struct Node {
    name: String,
    port: u16,
    cluster_port: u16,
    monitor_port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

/// A route from one node to another, through a proxy the test controls.
struct Route {
    from: usize,
    to: usize,
    proxy: Proxy,
}

/// A running JetStream cluster; dropping it kills every node and removes
/// their storage.
pub struct NatsCluster {
    binary: &'static Path,
    nodes: Vec<Node>,
    routes: Vec<Route>,
    /// Holds each node's configuration, storage and log; removed on drop.
    _dir: TempDir,
}

impl NatsCluster {
    /// Starts `size` nodes (at least 3 for replicated streams to survive a
    /// node) and waits until every one answers JetStream requests and the
    /// cluster can place a stream with `size` replicas.
    pub async fn start(size: usize) -> NatsCluster {
        assert!(size >= 2, "a cluster has at least two nodes");
        let dir = tempfile::Builder::new()
            .prefix("chime-nats-cluster-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let mut nodes: Vec<Node> = (0..size)
            .map(|i| {
                let node_dir = dir.path().join(format!("n{i}"));
                std::fs::create_dir_all(&node_dir)
                    .unwrap_or_else(|e| panic!("cannot create {}: {e}", node_dir.display()));
                Node {
                    name: format!("n{i}"),
                    port: free_port(),
                    cluster_port: free_port(),
                    monitor_port: free_port(),
                    dir: node_dir,
                    child: None,
                }
            })
            .collect();
        let mut routes = Vec::new();
        for from in 0..size {
            for to in (0..size).filter(|to| *to != from) {
                let target = ([127, 0, 0, 1], nodes[to].cluster_port).into();
                routes.push(Route {
                    from,
                    to,
                    proxy: Proxy::start(target).await,
                });
            }
        }
        for (i, node) in nodes.iter_mut().enumerate() {
            let through: Vec<String> = routes
                .iter()
                .filter(|r| r.from == i)
                .map(|r| format!("nats-route://{}", r.proxy.addr()))
                .collect();
            write_config(node, &through);
        }
        let mut cluster = NatsCluster {
            binary: nats_server_binary(),
            nodes,
            routes,
            _dir: dir,
        };
        for i in 0..size {
            cluster.spawn(i);
        }
        for i in 0..size {
            if let Err(reason) = cluster.wait_ready(i).await {
                cluster.fail(i, &reason);
            }
        }
        cluster.wait_placement().await;
        cluster
    }

    /// How many nodes the cluster has.
    pub fn size(&self) -> usize {
        self.nodes.len()
    }

    /// Every node's client URL, comma-separated, as Chime's `--nats-url` takes them.
    pub fn urls(&self) -> String {
        (0..self.nodes.len())
            .map(|i| self.url(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `nats://127.0.0.1:PORT` of node `i`; stays the same across restarts.
    pub fn url(&self, i: usize) -> String {
        format!("nats://127.0.0.1:{}", self.nodes[i].port)
    }

    /// `http://127.0.0.1:PORT` of node `i`'s monitoring endpoints (`/jsz`, `/routez`, …).
    pub fn monitor_url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.nodes[i].monitor_port)
    }

    /// The server name of node `i` (`n<i>`), as JetStream reports leaders.
    pub fn name(&self, i: usize) -> &str {
        &self.nodes[i].name
    }

    /// The node called `name`, if it is one of ours.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// A client that knows every node and fails over between them.
    pub async fn connect(&self) -> async_nats::Client {
        let servers: Vec<async_nats::ServerAddr> = (0..self.nodes.len())
            .map(|i| {
                self.url(i)
                    .parse()
                    .expect("a nats:// URL of 127.0.0.1 parses")
            })
            .collect();
        async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connect(servers)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the cluster at {}: {e}", self.urls()))
    }

    /// A client of node `i` alone, to watch the cluster from one side of a
    /// partition.
    pub async fn connect_node(&self, i: usize) -> async_nats::Client {
        async_nats::connect(self.url(i))
            .await
            .unwrap_or_else(|e| panic!("cannot connect to node {} at {}: {e}", i, self.url(i)))
    }

    /// Whether node `i`'s process is alive.
    pub fn is_running(&mut self, i: usize) -> bool {
        match &mut self.nodes[i].child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// SIGKILL of node `i`: a crash, nothing flushed. Does nothing if it is
    /// not running.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM to node `i` and wait until it exits (a clean shutdown, as a
    /// rolling upgrade does). Panics if it outlives the stop timeout.
    pub async fn stop(&mut self, i: usize) {
        let Some(mut child) = self.nodes[i].child.take() else {
            return;
        };
        if let Err(reason) = terminate(&mut child, STOP_TIMEOUT).await {
            panic!(
                "nats-server {} {reason}\n{}",
                self.nodes[i].name,
                self.log_section(i)
            );
        }
    }

    /// Starts node `i` again (after [`kill`](Self::kill) or
    /// [`stop`](Self::stop)) on its ports and storage, and waits until it
    /// answers JetStream requests. Its streams may still be catching up:
    /// [`wait_healthy`](Self::wait_healthy) waits for that.
    pub async fn start_node(&mut self, i: usize) {
        assert!(!self.is_running(i), "node {i} is already running");
        self.spawn(i);
        if let Err(reason) = self.wait_ready(i).await {
            self.fail(i, &format!("after restart: {reason}"));
        }
    }

    /// Stops node `i` cleanly and starts it again.
    pub async fn restart(&mut self, i: usize) {
        self.stop(i).await;
        self.start_node(i).await;
    }

    /// Cuts node `i` from every other node: its routes close and new ones
    /// are refused until [`heal`](Self::heal). Its clients stay connected
    /// to it.
    pub fn isolate(&self, i: usize) {
        for route in self.routes.iter().filter(|r| r.from == i || r.to == i) {
            route.proxy.cut();
        }
    }

    /// Lets node `i`'s routes connect again.
    pub fn heal(&self, i: usize) {
        for route in self.routes.iter().filter(|r| r.from == i || r.to == i) {
            route.proxy.unblock();
        }
    }

    /// The node that leads stream `stream` (a KV bucket `b` is stream
    /// `KV_b`), as the cluster answers now; None while it has no leader or
    /// cannot answer.
    pub async fn stream_leader(&self, js: &jetstream::Context, stream: &str) -> Option<usize> {
        let info = stream_info(js, stream).await?;
        let leader = info.cluster?.leader?;
        self.index_of(&leader)
    }

    /// The node that leads the JetStream meta group (stream and consumer
    /// placement), as the running nodes' `/jsz` report it; None while the
    /// group has no leader or no node answers.
    pub async fn meta_leader(&mut self) -> Option<usize> {
        for i in 0..self.size() {
            if !self.is_running(i) {
                continue;
            }
            let url = format!("{}/jsz", self.monitor_url(i));
            let Ok(reply) = reqwest::get(&url).await else {
                continue;
            };
            let Ok(body) = reply.bytes().await else {
                continue;
            };
            let Ok(jsz) = serde_json::from_slice::<serde_json::Value>(&body) else {
                continue;
            };
            if let Some(leader) = jsz["meta_cluster"]["leader"].as_str() {
                return self.index_of(leader);
            }
        }
        None
    }

    /// Waits until stream `stream` is led by a node other than `old`, and
    /// returns it. Panics after `timeout`.
    pub async fn wait_new_leader(
        &self,
        js: &jetstream::Context,
        stream: &str,
        old: usize,
        timeout: Duration,
    ) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(leader) = self.stream_leader(js, stream).await {
                if leader != old {
                    return leader;
                }
            }
            assert!(
                Instant::now() < deadline,
                "stream {stream} got no leader other than {} within {timeout:?}",
                self.nodes[old].name
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until every stream of the account (KV buckets included) has a
    /// leader and every replica of it is online and current, that is, the
    /// cluster could lose any one node again. Panics after `timeout`,
    /// naming the streams that are not.
    pub async fn wait_healthy(&self, js: &jetstream::Context, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let unhealthy = self.unhealthy_streams(js).await;
            if unhealthy.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "streams not healthy within {timeout:?}: {unhealthy:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The streams without a leader or with a replica offline or behind,
    /// each with the reason; one entry naming the error when the list
    /// itself cannot be had.
    async fn unhealthy_streams(&self, js: &jetstream::Context) -> Vec<String> {
        let mut names = js.stream_names();
        let mut all = Vec::new();
        while let Some(name) = names.next().await {
            match name {
                Ok(name) => all.push(name),
                Err(e) => return vec![format!("cannot list streams: {e}")],
            }
        }
        let mut unhealthy = Vec::new();
        for name in all {
            let Some(info) = stream_info(js, &name).await else {
                unhealthy.push(format!("{name}: no answer"));
                continue;
            };
            let Some(cluster) = info.cluster else {
                unhealthy.push(format!("{name}: no cluster information"));
                continue;
            };
            if cluster.leader.is_none() {
                unhealthy.push(format!("{name}: no leader"));
                continue;
            }
            let expected = info.config.num_replicas.saturating_sub(1);
            let current = cluster
                .replicas
                .iter()
                .filter(|p| p.current && !p.offline)
                .count();
            if current < expected {
                unhealthy.push(format!(
                    "{name}: {current} of {expected} followers current ({:?})",
                    cluster.replicas
                ));
            }
        }
        unhealthy
    }

    /// The last `lines` lines of node `i`'s log.
    pub fn log_tail(&self, i: usize, lines: usize) -> String {
        logfile::tail(&self.log_path(i), lines)
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self.nodes[i].dir.join("nats-server.log")
    }

    fn spawn(&mut self, i: usize) {
        let config = self.nodes[i].dir.join("nats-server.conf");
        let mut command = Command::new(self.binary);
        command.arg("-c").arg(&config);
        let (stdout, stderr) = logfile::open_for_child(&self.log_path(i));
        command.stdin(Stdio::null()).stdout(stdout).stderr(stderr);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.binary.display()));
        self.nodes[i].child = Some(child);
    }

    /// Polls node `i` until a client can connect and JetStream answers
    /// (which needs a meta leader), or its process exits, or the timeout.
    async fn wait_ready(&mut self, i: usize) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let url = self.url(i);
        loop {
            if let Some(child) = &mut self.nodes[i].child {
                if let Ok(Some(status)) = child.try_wait() {
                    self.nodes[i].child = None;
                    return Err(format!("exited during start-up with {status}"));
                }
            }
            let last_error = match probe(&url).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "did not become ready within {READY_TIMEOUT:?} (last error: {last_error})"
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the cluster places a stream on every node: each node
    /// answering is not enough, the meta group must know them all.
    async fn wait_placement(&mut self) {
        let js = jetstream::new(self.connect().await);
        let config = jetstream::stream::Config {
            name: "CHIME_TEST_PLACEMENT".into(),
            subjects: vec!["chime-test.placement".into()],
            storage: jetstream::stream::StorageType::Memory,
            num_replicas: self.nodes.len(),
            ..Default::default()
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut last_error = String::new();
        while Instant::now() < deadline {
            match js.get_or_create_stream(config.clone()).await {
                Ok(_) => {
                    let _ = js.delete_stream("CHIME_TEST_PLACEMENT").await;
                    return;
                }
                Err(e) => last_error = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.fail(
            0,
            &format!(
                "the cluster could not place a stream on all {} nodes within {READY_TIMEOUT:?}: {last_error}",
                self.nodes.len()
            ),
        );
    }

    fn fail(&mut self, i: usize, reason: &str) -> ! {
        let logs: Vec<String> = (0..self.nodes.len()).map(|n| self.log_section(n)).collect();
        for n in 0..self.nodes.len() {
            self.kill(n);
        }
        panic!(
            "nats-server {} ({}) {reason}\n{}",
            self.nodes[i].name,
            self.binary.display(),
            logs.join("\n")
        );
    }

    fn log_section(&self, i: usize) -> String {
        format!(
            "--- last lines of {} ---\n{}\n---",
            self.log_path(i).display(),
            self.log_tail(i, logfile::TAIL_LINES)
        )
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
        if std::thread::panicking() {
            for i in 0..self.nodes.len() {
                eprintln!("{}", self.log_section(i));
            }
        }
    }
}

/// Writes node `node`'s configuration: its routes are `routes`, the proxies
/// it dials the others through.
fn write_config(node: &Node, routes: &[String]) {
    let store = node.dir.join("store");
    let routes = routes
        .iter()
        .map(|r| format!("    \"{r}\""))
        .collect::<Vec<_>>()
        .join("\n");
    let text = format!(
        r#"server_name: "{name}"
listen: "127.0.0.1:{port}"
http: "127.0.0.1:{monitor}"
jetstream {{
  store_dir: "{store}"
}}
cluster {{
  name: "{CLUSTER_NAME}"
  listen: "127.0.0.1:{cluster}"
  advertise: "{UNREACHABLE_ROUTE}"
  routes: [
{routes}
  ]
}}
"#,
        name = node.name,
        port = node.port,
        monitor = node.monitor_port,
        store = store.display(),
        cluster = node.cluster_port,
    );
    let path = node.dir.join("nats-server.conf");
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

/// One connection to `url` and a JetStream account query.
async fn probe(url: &str) -> Result<(), String> {
    let client = async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(1))
        .connect(url)
        .await
        .map_err(|e| e.to_string())?;
    let js = jetstream::new(client);
    tokio::time::timeout(Duration::from_secs(2), js.query_account())
        .await
        .map_err(|_| "JetStream account query timed out".to_owned())?
        .map_err(|e| format!("JetStream not ready: {e}"))?;
    Ok(())
}

/// `$JS.API.STREAM.INFO.<stream>`, bounded so a cluster without a meta
/// leader does not hang the caller.
async fn stream_info(js: &jetstream::Context, stream: &str) -> Option<jetstream::stream::Info> {
    let ask = async {
        let mut handle = js.get_stream(stream).await.ok()?;
        handle.info().await.ok().cloned()
    };
    tokio::time::timeout(Duration::from_secs(3), ask)
        .await
        .ok()
        .flatten()
}
