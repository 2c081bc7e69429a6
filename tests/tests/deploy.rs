//! Keeps `deploy/` honest: what can be checked without a container engine is
//! checked for real.
//!
//! - Every YAML and JSON file parses.
//! - `promtool` accepts the Prometheus configuration and the alert rules, and
//!   the rules' unit tests pass; the Kubernetes PrometheusRule holds the same
//!   rules.
//! - The environment variables, ports and grace periods of the Dockerfile, the
//!   Compose file and the Kubernetes manifests are ones the binaries accept
//!   (their `[env: …]` names from `--help`), and the binaries started with
//!   those settings get past their configuration checks.
//! - A real Prometheus, configured from `deploy/prometheus/prometheus.yml`,
//!   scrapes a running scheduler and worker with traffic, and every query of
//!   the dashboard returns data; every metric the dashboard and the rules name
//!   is exported; the rules evaluate without error; the KEDA consumers exist.
//!
//! Needs `promtool` and `prometheus` on PATH (Debian: `apt-get install -y
//! prometheus`); the tests fail, saying so, when they are missing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chime_common::client::Client;
use chime_tests::{
    free_port, init_tracing, until_ok, Binary, ChimeProcess, NatsServer, SqliteDatabase,
};
use serde_json::json;
use serde_yaml_ng::Value as Yaml;

const INSTALL_HINT: &str = "install it with `apt-get update && apt-get install -y prometheus` \
     (Debian's package brings both promtool and prometheus)";

/// Metrics Prometheus itself creates for every target.
const PROMETHEUS_OWN_METRICS: &[&str] =
    &["up", "scrape_duration_seconds", "scrape_samples_scraped"];

// --- Files ------------------------------------------------------------------------

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lies in the repository")
        .to_path_buf()
}

fn deploy_dir() -> PathBuf {
    repo_root().join("deploy")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Files under `dir` (recursively), sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Every YAML document of `path`, with merge keys (`<<: *anchor`) applied.
fn yaml_docs(path: &Path) -> Vec<Yaml> {
    use serde::Deserialize;
    let text = read(path);
    let mut docs = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let mut value = Yaml::deserialize(document)
            .unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", path.display()));
        value
            .apply_merge()
            .unwrap_or_else(|e| panic!("{}: bad merge key: {e}", path.display()));
        if !value.is_null() {
            docs.push(value);
        }
    }
    docs
}

fn yaml_doc(path: &Path) -> Yaml {
    let mut docs = yaml_docs(path);
    assert_eq!(
        docs.len(),
        1,
        "{} should hold one YAML document",
        path.display()
    );
    docs.remove(0)
}

/// A scalar as text (YAML numbers and booleans too).
fn scalar(value: &Yaml) -> Option<String> {
    match value {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Number(n) => Some(n.to_string()),
        Yaml::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn str_of<'a>(value: &'a Yaml, what: &str) -> &'a str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("{what} should be a string, found {value:?}"))
}

fn seq(value: &Yaml) -> &[Yaml] {
    value.as_sequence().map(Vec::as_slice).unwrap_or(&[])
}

fn duration(text: &str, what: &str) -> Duration {
    chime_common::duration::parse_duration(&serde_json::Value::String(text.to_string()))
        .unwrap_or_else(|e| panic!("{what}: {text:?} is not a duration: {e}"))
}

// --- The binaries' settings -----------------------------------------------------------

/// The environment variables a binary reads: the `[env: NAME=…]` of its
/// `--help` (`[env: NAME]` for a secret, whose value help hides).
fn accepted_env(binary: Binary) -> BTreeSet<String> {
    let output = binary
        .command()
        .arg("--help")
        .env_clear()
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} --help: {e}", binary.name()));
    assert!(
        output.status.success(),
        "{} --help failed: {output:?}",
        binary.name()
    );
    let help = String::from_utf8_lossy(&output.stdout);
    let names: BTreeSet<String> = help
        .split("[env: ")
        .skip(1)
        .filter_map(|rest| rest.split(['=', ']']).next())
        .map(str::to_string)
        .collect();
    assert!(
        !names.is_empty(),
        "{} --help names no [env: …] variables:\n{help}",
        binary.name()
    );
    names
}

struct Accepted {
    scheduler: BTreeSet<String>,
    worker: BTreeSet<String>,
    ctl: BTreeSet<String>,
}

impl Accepted {
    fn load() -> Self {
        Accepted {
            scheduler: accepted_env(Binary::Scheduler),
            worker: accepted_env(Binary::Worker),
            ctl: accepted_env(Binary::Ctl),
        }
    }

    fn of(&self, binary: Binary) -> &BTreeSet<String> {
        match binary {
            Binary::Scheduler => &self.scheduler,
            Binary::Worker => &self.worker,
            Binary::Ctl => &self.ctl,
        }
    }
}

/// Settings for one binary, as a deployment file gives them.
struct Settings {
    /// Where they come from, for messages.
    origin: String,
    binary: Binary,
    env: BTreeMap<String, String>,
}

impl Settings {
    fn assert_accepted(&self, accepted: &Accepted) {
        let names = accepted.of(self.binary);
        let unknown: Vec<&String> = self.env.keys().filter(|k| !names.contains(*k)).collect();
        assert!(
            unknown.is_empty(),
            "{}: {} does not read {unknown:?}; it reads {names:?}",
            self.origin,
            self.binary.name()
        );
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.env.get(name).map(String::as_str)
    }

    /// The port of CHIME_METRICS_ADDR, which a container must bind beyond loopback.
    fn metrics_port(&self) -> u16 {
        let addr = self.get("CHIME_METRICS_ADDR").unwrap_or_else(|| {
            panic!(
                "{}: CHIME_METRICS_ADDR must be set (the default listens on 127.0.0.1 only)",
                self.origin
            )
        });
        let addr: std::net::SocketAddr = addr
            .parse()
            .unwrap_or_else(|e| panic!("{}: CHIME_METRICS_ADDR={addr:?}: {e}", self.origin));
        assert!(
            addr.ip().is_unspecified(),
            "{}: CHIME_METRICS_ADDR={addr} is not reachable from outside the container; use 0.0.0.0",
            self.origin
        );
        addr.port()
    }
}

/// Starts the binary with `settings` (NATS pointed at a closed port, the metrics
/// port at a free one) and checks that it got past its configuration checks:
/// it is still running (retrying NATS) or it stopped at connecting to NATS. A
/// setting it rejects makes it exit first, naming the flag.
async fn assert_starts_with(settings: &Settings) {
    let mut cmd = settings.binary.command();
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("CHIME_") {
            cmd.env_remove(key);
        }
    }
    cmd.envs(&settings.env);
    cmd.env(
        "CHIME_NATS_URL",
        format!("nats://127.0.0.1:{}", free_port()),
    );
    if let Some(addr) = settings.get("CHIME_METRICS_ADDR") {
        let host = addr
            .rsplit_once(':')
            .map(|(host, _)| host)
            .unwrap_or("127.0.0.1");
        cmd.env("CHIME_METRICS_ADDR", format!("{host}:{}", free_port()));
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    cmd.current_dir(dir.path());
    // A mounted secret (Compose secrets, Kubernetes volumes) is a file here.
    if let Some(path) = settings.get("CHIME_DATABASE_PASSWORD_FILE") {
        let file = dir.path().join("database-password");
        std::fs::write(&file, "test-password\n").expect("password file");
        assert!(
            path.starts_with("/run/secrets/"),
            "{}: {path}",
            settings.origin
        );
        cmd.env("CHIME_DATABASE_PASSWORD_FILE", &file);
    }
    if settings.binary == Binary::Ctl {
        cmd.arg("workers");
    }
    let mut process = ChimeProcess::spawn(cmd);
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = process.try_status() {
            break Some(status);
        }
        if Instant::now() >= deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let Some(status) = status else {
        return; // still running: configuration accepted, waiting for NATS
    };
    let log = process.log();
    assert!(
        status.code() != Some(2) && log.contains("NATS"),
        "{}: {} rejected these settings ({status}) instead of trying to connect to NATS:\n{log}\nsettings: {:?}",
        settings.origin,
        settings.binary.name(),
        settings.env
    );
}

// --- Dockerfile ---------------------------------------------------------------------------

#[derive(Debug, Default, Clone)]
struct Stage {
    name: String,
    base: String,
    user: Option<String>,
    env: BTreeMap<String, String>,
    expose: Vec<u16>,
    healthcheck: Option<String>,
    entrypoint: Option<String>,
}

/// The stages of a Dockerfile, with what each inherits from a stage it builds on.
fn dockerfile_stages(path: &Path) -> BTreeMap<String, Stage> {
    let text = read(path);
    let mut logical = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        if trimmed.starts_with('#') {
            continue; // a comment inside a continued instruction
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
        } else {
            current.push_str(trimmed);
            logical.push(std::mem::take(&mut current));
        }
    }
    let mut stages: BTreeMap<String, Stage> = BTreeMap::new();
    let mut stage: Option<Stage> = None;
    for instruction in logical {
        let (keyword, rest) = instruction
            .split_once(char::is_whitespace)
            .unwrap_or((&instruction, ""));
        let rest = rest.trim();
        match keyword.to_ascii_uppercase().as_str() {
            "FROM" => {
                if let Some(done) = stage.take() {
                    stages.insert(done.name.clone(), done);
                }
                let words: Vec<&str> = rest
                    .split_whitespace()
                    .filter(|w| !w.starts_with("--"))
                    .collect();
                let base = words[0].to_string();
                let name = match words.as_slice() {
                    [_, as_, name] if as_.eq_ignore_ascii_case("as") => name.to_string(),
                    _ => format!("#{}", stages.len()),
                };
                let mut next = stages.get(&base).cloned().unwrap_or_default();
                next.name = name;
                next.base = base;
                stage = Some(next);
            }
            "ENV" => {
                let s = stage.as_mut().expect("ENV after FROM");
                for pair in rest.split_whitespace() {
                    let (k, v) = pair
                        .split_once('=')
                        .unwrap_or_else(|| panic!("ENV {rest}: use KEY=VALUE"));
                    s.env.insert(k.to_string(), v.trim_matches('"').to_string());
                }
            }
            "EXPOSE" => {
                let s = stage.as_mut().expect("EXPOSE after FROM");
                for port in rest.split_whitespace() {
                    let port = port.split('/').next().unwrap_or(port);
                    s.expose
                        .push(port.parse().unwrap_or_else(|_| panic!("EXPOSE {rest}")));
                }
            }
            "USER" => stage.as_mut().expect("USER after FROM").user = Some(rest.to_string()),
            "HEALTHCHECK" => {
                stage.as_mut().expect("HEALTHCHECK after FROM").healthcheck = Some(rest.to_string())
            }
            "ENTRYPOINT" => {
                stage.as_mut().expect("ENTRYPOINT after FROM").entrypoint = Some(rest.to_string())
            }
            _ => {}
        }
    }
    if let Some(done) = stage.take() {
        stages.insert(done.name.clone(), done);
    }
    stages
}

fn dockerfile() -> PathBuf {
    deploy_dir().join("docker/Dockerfile")
}

/// The image targets and the binary each runs.
const IMAGE_TARGETS: &[(&str, Binary)] = &[
    ("scheduler", Binary::Scheduler),
    ("worker", Binary::Worker),
    ("worker-debian", Binary::Worker),
    ("chimectl", Binary::Ctl),
];

#[tokio::test]
async fn images_run_the_binaries_as_non_root_with_health_checks_and_accepted_settings() {
    let accepted = Accepted::load();
    let stages = dockerfile_stages(&dockerfile());
    for (target, binary) in IMAGE_TARGETS {
        let stage = stages
            .get(*target)
            .unwrap_or_else(|| panic!("deploy/docker/Dockerfile has no stage {target}"));
        let user = stage
            .user
            .as_deref()
            .unwrap_or_else(|| panic!("stage {target} sets no USER"));
        let uid: u32 = user
            .split(':')
            .next()
            .and_then(|u| u.parse().ok())
            .unwrap_or_else(|| panic!("stage {target}: USER {user} should be numeric (Kubernetes' runAsNonRoot checks it)"));
        assert_ne!(uid, 0, "stage {target} runs as root");
        let entrypoint = stage
            .entrypoint
            .as_deref()
            .unwrap_or_else(|| panic!("stage {target} has no ENTRYPOINT"));
        assert!(
            entrypoint.contains(binary.name()),
            "stage {target} does not run {}: {entrypoint}",
            binary.name()
        );
        let settings = Settings {
            origin: format!("Dockerfile stage {target}"),
            binary: *binary,
            env: stage.env.clone(),
        };
        settings.assert_accepted(&accepted);
        let healthcheck = stage
            .healthcheck
            .as_deref()
            .unwrap_or_else(|| panic!("stage {target} has no HEALTHCHECK"));
        if *binary == Binary::Ctl {
            assert_eq!(healthcheck, "NONE", "chimectl is a one-shot command");
            continue;
        }
        assert!(
            healthcheck.contains("/healthz"),
            "stage {target}: the health check should ask /healthz: {healthcheck}"
        );
        assert!(
            healthcheck.contains("CHIME_METRICS_ADDR"),
            "stage {target}: the health check should follow CHIME_METRICS_ADDR: {healthcheck}"
        );
        let port = settings.metrics_port();
        assert_eq!(
            stage.expose,
            vec![port],
            "stage {target} should EXPOSE its metrics port {port}"
        );
        assert_starts_with(&settings).await;
    }
}

// --- Compose --------------------------------------------------------------------------------

fn compose_file() -> PathBuf {
    deploy_dir().join("compose/compose.yaml")
}

/// A Compose value with its required variables (`${NAME:?message}`) given
/// test values, as Compose would from `.env`; any other `${` is an error,
/// since a default would put a password in the file.
fn interpolate(value: &str, what: &str) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find('}')
            .unwrap_or_else(|| panic!("{what}: unclosed ${{ in {value:?}"));
        let inner = &rest[start + 2..start + end];
        let (name, _) = inner.split_once(":?").unwrap_or_else(|| {
            panic!("{what}: {value:?} must use ${{NAME:?message}}, which refuses to start without NAME")
        });
        out.push_str(&format!("test-value-of-{name}"));
        rest = &rest[start + end + 1..];
    }
    out.push_str(rest);
    out
}

fn compose_env(service: &Yaml, name: &str) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    match &service["environment"] {
        Yaml::Mapping(map) => {
            for (k, v) in map {
                let key = str_of(k, "an environment name").to_string();
                let value = scalar(v)
                    .unwrap_or_else(|| panic!("service {name}: {key} has no scalar value"));
                let value = interpolate(&value, &format!("service {name}: {key}"));
                env.insert(key, value);
            }
        }
        Yaml::Sequence(items) => {
            for item in items {
                let item = str_of(item, "an environment entry");
                let (k, v) = item.split_once('=').unwrap_or((item, ""));
                env.insert(k.to_string(), v.to_string());
            }
        }
        Yaml::Null => {}
        other => panic!("service {name}: environment should be a mapping, found {other:?}"),
    }
    assert!(
        service.get("env_file").is_none(),
        "service {name}: keep settings in compose.yaml, not env_file"
    );
    env
}

/// Seconds of a Compose duration such as `45s` or `1m30s`.
fn compose_duration(value: &Yaml, what: &str) -> Duration {
    let text = scalar(value).unwrap_or_else(|| panic!("{what} is not set"));
    duration(&text, what)
}

#[tokio::test]
async fn compose_settings_ports_and_topology_are_ones_the_binaries_accept() {
    let accepted = Accepted::load();
    let compose = yaml_doc(&compose_file());
    let services = compose["services"]
        .as_mapping()
        .expect("compose.yaml has services");
    let stages = dockerfile_stages(&dockerfile());
    let prometheus = yaml_doc(&deploy_dir().join("prometheus/prometheus.yml"));

    let nats_services: Vec<String> = services
        .iter()
        .map(|(k, _)| str_of(k, "a service name").to_string())
        .filter(|name| name.starts_with("nats-"))
        .collect();
    assert_eq!(
        nats_services.len(),
        3,
        "the Compose stack runs a 3-node NATS cluster: {nats_services:?}"
    );
    for name in &nats_services {
        let command: Vec<&str> = seq(&services[name.as_str()]["command"])
            .iter()
            .map(|c| str_of(c, "a command word"))
            .collect();
        assert!(
            command.contains(&"--jetstream"),
            "{name} must enable JetStream: {command:?}"
        );
        let routes = command
            .iter()
            .find_map(|c| c.strip_prefix("--routes="))
            .unwrap_or_else(|| panic!("{name} has no --routes"));
        for other in &nats_services {
            assert!(
                routes.contains(&format!("nats://{other}:6222")),
                "{name}'s routes miss {other}: {routes}"
            );
        }
        assert!(
            command.contains(&format!("--server_name={name}").as_str()),
            "{name} must name itself: {command:?}"
        );
    }

    let mut seen = BTreeSet::new();
    for (name, service) in services {
        let name = str_of(name, "a service name");
        let Some(target) = service["build"]["target"].as_str() else {
            continue;
        };
        let (_, binary) = IMAGE_TARGETS
            .iter()
            .find(|(t, _)| *t == target)
            .unwrap_or_else(|| {
                panic!("service {name} builds target {target}, which is no Chime image")
            });
        assert!(
            stages.contains_key(target),
            "service {name}: the Dockerfile has no stage {target}"
        );
        assert_eq!(
            service["build"]["dockerfile"].as_str(),
            Some("deploy/docker/Dockerfile"),
            "service {name} should build deploy/docker/Dockerfile"
        );
        seen.insert(binary.name());
        let settings = Settings {
            origin: format!("compose service {name}"),
            binary: *binary,
            env: compose_env(service, name),
        };
        settings.assert_accepted(&accepted);
        let nats_url = settings
            .get("CHIME_NATS_URL")
            .unwrap_or_else(|| panic!("service {name} sets no CHIME_NATS_URL"));
        for node in &nats_services {
            assert!(
                nats_url.contains(&format!("nats://{node}:4222")),
                "service {name}: CHIME_NATS_URL misses {node}"
            );
        }
        match binary {
            Binary::Scheduler => {
                assert_eq!(
                    settings.get("CHIME_STREAM_REPLICAS"),
                    Some("3"),
                    "service {name}: R3 on a 3-node cluster"
                );
                let db = settings.get("CHIME_DATABASE_URL").unwrap_or("");
                assert!(
                    db.starts_with("postgres://"),
                    "service {name}: several replicas need PostgreSQL, found {db:?}"
                );
                let replicas = service["deploy"]["replicas"].as_u64().unwrap_or(1);
                assert!(
                    replicas >= 2,
                    "the Compose stack runs 2 schedulers, found {replicas}"
                );
                let drain = duration(
                    settings.get("CHIME_SHUTDOWN_DRAIN").unwrap_or("10s"),
                    "CHIME_SHUTDOWN_DRAIN",
                );
                let grace =
                    compose_duration(&service["stop_grace_period"], "scheduler stop_grace_period");
                assert!(grace > drain, "service {name}: stop_grace_period {grace:?} must exceed CHIME_SHUTDOWN_DRAIN {drain:?}");
            }
            Binary::Worker => {
                let drain = duration(
                    settings.get("CHIME_DRAIN_GRACE").unwrap_or("30s"),
                    "CHIME_DRAIN_GRACE",
                );
                let grace =
                    compose_duration(&service["stop_grace_period"], "worker stop_grace_period");
                assert!(
                    grace >= drain + Duration::from_secs(10),
                    "service {name}: stop_grace_period {grace:?} must exceed CHIME_DRAIN_GRACE {drain:?} plus time to report"
                );
                assert!(
                    service
                        .get("deploy")
                        .and_then(|d| d.get("replicas"))
                        .is_none(),
                    "service {name}: leave replicas to --scale"
                );
                assert!(
                    service.get("container_name").is_none(),
                    "service {name}: container_name prevents --scale"
                );
                assert!(
                    service.get("ports").is_none(),
                    "service {name}: published ports prevent --scale"
                );
            }
            Binary::Ctl => {}
        }
        if *binary != Binary::Ctl {
            let port = settings.metrics_port();
            // Prometheus finds each container of the service by its DNS name.
            let scraped = seq(&prometheus["scrape_configs"]).iter().any(|job| {
                seq(&job["dns_sd_configs"]).iter().any(|sd| {
                    seq(&sd["names"]).iter().any(|n| n.as_str() == Some(name))
                        && sd["port"].as_u64() == Some(port as u64)
                })
            });
            assert!(
                scraped,
                "deploy/prometheus/prometheus.yml does not scrape service {name} on port {port}"
            );
        }
        assert_starts_with(&settings).await;
    }
    assert_eq!(
        seen.len(),
        3,
        "the Compose stack should run all three binaries, found {seen:?}"
    );

    let postgres = &services["postgres"];
    assert!(postgres.is_mapping(), "the Compose stack runs PostgreSQL");
    for volume in [
        "../prometheus/prometheus.yml",
        "../prometheus/rules",
        "../grafana/provisioning",
        "../grafana/dashboards",
    ] {
        let mounted = services.iter().any(|(_, s)| {
            seq(&s["volumes"]).iter().any(|v| {
                v.as_str()
                    .is_some_and(|v| v.starts_with(&format!("{volume}:")))
            })
        });
        assert!(mounted, "compose.yaml mounts nothing from {volume}");
        assert!(
            compose_file().parent().expect("dir").join(volume).exists(),
            "{volume} does not exist"
        );
    }
}

// --- Kubernetes ------------------------------------------------------------------------------

fn kubernetes_objects(dir: &str) -> Vec<(PathBuf, Yaml)> {
    let mut out = Vec::new();
    for path in files_under(&deploy_dir().join("kubernetes").join(dir)) {
        if !matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            continue;
        }
        for doc in yaml_docs(&path) {
            if doc.get("apiVersion").is_some()
                && doc.get("kind").is_some()
                && doc["kind"] != "Kustomization"
            {
                out.push((path.clone(), doc));
            }
        }
    }
    out
}

fn find<'a>(objects: &'a [(PathBuf, Yaml)], kind: &str, name: &str) -> &'a Yaml {
    objects
        .iter()
        .map(|(_, o)| o)
        .find(|o| o["kind"].as_str() == Some(kind) && o["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name} in deploy/kubernetes"))
}

/// Every resource a kustomization.yaml lists exists, and every manifest
/// beside it is listed (so `kubectl apply -k` applies what the docs describe).
fn assert_kustomizations_complete() {
    for path in files_under(&deploy_dir().join("kubernetes")) {
        if path.file_name().and_then(|n| n.to_str()) != Some("kustomization.yaml") {
            continue;
        }
        let dir = path.parent().expect("a directory");
        let kustomization = yaml_doc(&path);
        let listed: BTreeSet<String> = seq(&kustomization["resources"])
            .iter()
            .map(|r| str_of(r, "a resource").to_string())
            .collect();
        for resource in &listed {
            assert!(
                dir.join(resource).exists(),
                "{} lists {resource}, which does not exist",
                path.display()
            );
        }
        for file in std::fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("entry").path())
        {
            let name = file
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_string();
            if file.is_dir() || name == "kustomization.yaml" || !name.ends_with(".yaml") {
                continue;
            }
            let is_object = yaml_docs(&file).iter().any(|d| d.get("kind").is_some());
            assert_eq!(
                is_object,
                listed.contains(&name),
                "{}: {name} {} a Kubernetes object but {} listed",
                path.display(),
                if is_object { "is" } else { "is not" },
                if listed.contains(&name) {
                    "is"
                } else {
                    "is not"
                }
            );
        }
    }
}

/// The settings of a Deployment's first container, from its env and envFrom.
fn container_settings(objects: &[(PathBuf, Yaml)], deployment: &Yaml, binary: Binary) -> Settings {
    let name = deployment["metadata"]["name"].as_str().unwrap_or("?");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let mut env = BTreeMap::new();
    for from in seq(&container["envFrom"]) {
        let (kind, source) = if from.get("configMapRef").is_some() {
            ("ConfigMap", &from["configMapRef"])
        } else {
            ("Secret", &from["secretRef"])
        };
        let object = find(objects, kind, str_of(&source["name"], "envFrom name"));
        for key in ["data", "stringData"] {
            if let Some(map) = object[key].as_mapping() {
                for (k, v) in map {
                    env.insert(
                        str_of(k, "a key").to_string(),
                        scalar(v).unwrap_or_default(),
                    );
                }
            }
        }
    }
    for var in seq(&container["env"]) {
        let key = str_of(&var["name"], "an env name").to_string();
        let value = match scalar(&var["value"]) {
            Some(v) => v,
            // A field of the pod (its name): a valid id for the test.
            None => format!("{name}-7d9f8c6b5-x2x4q"),
        };
        env.insert(key, value);
    }
    Settings {
        origin: format!("Deployment {name}"),
        binary,
        env,
    }
}

fn labels_match(selector: &Yaml, labels: &Yaml) -> bool {
    let Some(wanted) = selector.as_mapping() else {
        return false;
    };
    !wanted.is_empty() && wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[tokio::test]
async fn kubernetes_settings_ports_probes_and_autoscalers_fit_the_binaries() {
    let accepted = Accepted::load();
    assert_kustomizations_complete();
    let objects = kubernetes_objects("");
    let scheduler = find(&objects, "Deployment", "chime-scheduler");
    let worker = find(&objects, "Deployment", "chime-worker");

    for (deployment, binary) in [(scheduler, Binary::Scheduler), (worker, Binary::Worker)] {
        let settings = container_settings(&objects, deployment, binary);
        settings.assert_accepted(&accepted);
        let origin = &settings.origin;
        let pod = &deployment["spec"]["template"];
        let container = &pod["spec"]["containers"][0];
        let image = str_of(&container["image"], "image");
        assert!(
            image.contains(binary.name()),
            "{origin} runs image {image}, not {}",
            binary.name()
        );
        let port = settings.metrics_port();
        let ports = seq(&container["ports"]);
        assert!(
            ports.iter().any(|p| p["name"] == "metrics" && p["containerPort"].as_u64() == Some(port as u64)),
            "{origin}: containerPort `metrics` should be {port} (CHIME_METRICS_ADDR)"
        );
        assert_eq!(
            scalar(&pod["metadata"]["annotations"]["prometheus.io/port"]),
            Some(port.to_string()),
            "{origin}: annotation prometheus.io/port"
        );
        for probe in ["readinessProbe", "livenessProbe"] {
            let get = &container[probe]["httpGet"];
            let probe_port =
                scalar(&get["port"]).unwrap_or_else(|| panic!("{origin} has no {probe}"));
            assert!(
                probe_port == "metrics" || probe_port == port.to_string(),
                "{origin}: {probe} port {probe_port}"
            );
        }
        assert_eq!(
            container["livenessProbe"]["httpGet"]["path"].as_str(),
            Some("/healthz"),
            "{origin}: liveness on /healthz"
        );
        assert_eq!(
            container["readinessProbe"]["httpGet"]["path"].as_str(),
            Some("/readyz"),
            "{origin}: readiness on /readyz"
        );
        assert_eq!(
            pod["spec"]["securityContext"]["runAsNonRoot"].as_bool(),
            Some(true),
            "{origin}: runAsNonRoot"
        );
        let grace = Duration::from_secs(
            pod["spec"]["terminationGracePeriodSeconds"]
                .as_u64()
                .unwrap_or_else(|| panic!("{origin}: set terminationGracePeriodSeconds")),
        );
        match binary {
            Binary::Scheduler => {
                assert_eq!(
                    deployment["spec"]["replicas"].as_u64(),
                    Some(3),
                    "{origin}: 3 replicas"
                );
                assert_eq!(
                    settings.get("CHIME_STREAM_REPLICAS"),
                    Some("3"),
                    "{origin}: R3 streams on a NATS cluster"
                );
                let db = settings.get("CHIME_DATABASE_URL").unwrap_or("");
                assert!(
                    db.starts_with("postgres://"),
                    "{origin}: several replicas need PostgreSQL, found {db:?}"
                );
                let drain = duration(
                    settings.get("CHIME_SHUTDOWN_DRAIN").unwrap_or("10s"),
                    "CHIME_SHUTDOWN_DRAIN",
                );
                assert!(grace > drain, "{origin}: terminationGracePeriodSeconds {grace:?} must exceed CHIME_SHUTDOWN_DRAIN {drain:?}");
            }
            _ => {
                let drain = duration(
                    settings.get("CHIME_DRAIN_GRACE").unwrap_or("30s"),
                    "CHIME_DRAIN_GRACE",
                );
                assert!(
                    grace >= drain + Duration::from_secs(10),
                    "{origin}: terminationGracePeriodSeconds {grace:?} must exceed CHIME_DRAIN_GRACE {drain:?} plus time to report"
                );
            }
        }
        // The NATS URL names the external service.
        let nats_url = settings.get("CHIME_NATS_URL").unwrap_or("");
        let nats_host = nats_url
            .trim_start_matches("nats://")
            .split(':')
            .next()
            .unwrap_or("");
        let nats_service = find(&objects, "Service", nats_host);
        assert_eq!(
            nats_service["spec"]["type"].as_str(),
            Some("ExternalName"),
            "NATS is an external service"
        );
        assert_starts_with(&settings).await;
    }
    let db = container_settings(&objects, scheduler, Binary::Scheduler);
    let db_host = db
        .get("CHIME_DATABASE_URL")
        .unwrap_or("")
        .rsplit('@')
        .next()
        .unwrap_or("")
        .split(':')
        .next()
        .unwrap_or("");
    assert_eq!(
        find(&objects, "Service", db_host)["spec"]["type"].as_str(),
        Some("ExternalName"),
        "PostgreSQL is an external service"
    );

    // The PodDisruptionBudget covers the schedulers.
    let pdb = objects
        .iter()
        .map(|(_, o)| o)
        .find(|o| o["kind"] == "PodDisruptionBudget")
        .expect("a PodDisruptionBudget");
    assert!(labels_match(
        &pdb["spec"]["selector"]["matchLabels"],
        &scheduler["spec"]["template"]["metadata"]["labels"]
    ));

    // Services and ServiceMonitors reach the metrics ports; the job label is
    // the Service's name, as the rules and the dashboard expect.
    for (deployment, job) in [(scheduler, "chime-scheduler"), (worker, "chime-worker")] {
        let service = find(&objects, "Service", job);
        assert!(
            labels_match(
                &service["spec"]["selector"],
                &deployment["spec"]["template"]["metadata"]["labels"]
            ),
            "Service {job} selects its pods"
        );
        assert!(
            seq(&service["spec"]["ports"])
                .iter()
                .any(|p| p["name"] == "metrics" && p["targetPort"] == "metrics"),
            "Service {job} port metrics"
        );
        let monitor = find(&objects, "ServiceMonitor", job);
        assert!(
            labels_match(
                &monitor["spec"]["selector"]["matchLabels"],
                &service["metadata"]["labels"]
            ),
            "ServiceMonitor {job} selects Service {job}"
        );
        assert!(
            seq(&monitor["spec"]["endpoints"])
                .iter()
                .all(|e| e["port"] == "metrics"),
            "ServiceMonitor {job} scrapes port metrics"
        );
    }
    let worker_monitor = find(&objects, "ServiceMonitor", "chime-worker");
    let group_label = worker["spec"]["template"]["metadata"]["labels"]["chime.dev/group"]
        .as_str()
        .expect("worker pods carry chime.dev/group");
    let worker_settings = container_settings(&objects, worker, Binary::Worker);
    assert_eq!(
        Some(group_label),
        worker_settings.get("CHIME_GROUP"),
        "label chime.dev/group is the worker's CHIME_GROUP"
    );
    assert!(
        seq(&worker_monitor["spec"]["endpoints"][0]["relabelings"])
            .iter()
            .any(|r| r["targetLabel"] == "group"
                && seq(&r["sourceLabels"])
                    .iter()
                    .any(|s| s == "__meta_kubernetes_pod_label_chime_dev_group")),
        "ServiceMonitor chime-worker turns the pod's chime.dev/group into label group"
    );

    // KEDA watches the worker group's consumers, one per band.
    let group = worker_settings.get("CHIME_GROUP").unwrap_or("default");
    let scaled = find(&objects, "ScaledObject", "chime-worker");
    assert_eq!(scaled["spec"]["scaleTargetRef"]["name"], "chime-worker");
    let consumers: BTreeSet<String> = seq(&scaled["spec"]["triggers"])
        .iter()
        .map(|t| {
            assert_eq!(t["type"], "nats-jetstream");
            assert_eq!(t["metadata"]["stream"], "CHIME_FIRE");
            assert!(
                str_of(&t["metadata"]["natsServerMonitoringEndpoint"], "endpoint")
                    .ends_with(":8222")
            );
            str_of(&t["metadata"]["consumer"], "consumer").to_string()
        })
        .collect();
    let expected: BTreeSet<String> = ["high", "normal", "low"]
        .iter()
        .map(|b| format!("fire_g_{group}_{b}"))
        .collect();
    assert_eq!(
        consumers, expected,
        "the ScaledObject should watch every band of group {group}"
    );

    let hpa = find(&objects, "HorizontalPodAutoscaler", "chime-worker");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], "chime-worker");
    let adapter =
        yaml_doc(&deploy_dir().join("kubernetes/autoscaling/hpa/prometheus-adapter-values.yaml"));
    let served: BTreeSet<String> = ["custom", "external"]
        .iter()
        .flat_map(|kind| seq(&adapter["rules"][*kind]).iter())
        .map(|r| str_of(&r["name"]["as"], "adapter metric name").to_string())
        .collect();
    for metric in seq(&hpa["spec"]["metrics"]) {
        let kind = if metric["type"] == "External" {
            "external"
        } else {
            "pods"
        };
        let name = str_of(&metric[kind]["metric"]["name"], "HPA metric");
        assert!(
            served.contains(name),
            "the HPA scales on {name}, which prometheus-adapter-values.yaml does not serve"
        );
    }
}

// --- Prometheus and Grafana files --------------------------------------------------------

#[test]
fn deploy_yaml_and_json_files_parse() {
    let mut checked = 0;
    for path in files_under(&deploy_dir()) {
        // deploy/local belongs to the local quick start.
        if path.starts_with(deploy_dir().join("local")) {
            continue;
        }
        match path.extension().and_then(|e| e.to_str()) {
            Some("yaml" | "yml") => {
                assert!(!yaml_docs(&path).is_empty(), "{} is empty", path.display());
            }
            Some("json") => {
                serde_json::from_str::<serde_json::Value>(&read(&path))
                    .unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", path.display()));
            }
            _ => continue,
        }
        checked += 1;
    }
    assert!(
        checked >= 10,
        "only {checked} YAML and JSON files under deploy/"
    );
}

fn tool(name: &str) -> PathBuf {
    let found = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .unwrap_or_default();
    found.unwrap_or_else(|| panic!("`{name}` is not on PATH: {INSTALL_HINT}"))
}

fn run_tool(cmd: &mut Command) -> String {
    let output = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "{cmd:?} failed ({}):\n{text}",
        output.status
    );
    text
}

fn rules_file() -> PathBuf {
    deploy_dir().join("prometheus/rules/chime.yml")
}

/// deploy/prometheus/prometheus.yml with its rule files at their place in the
/// repository and, if given, its Chime jobs pointed at local targets.
fn local_prometheus_config(targets: Option<(&str, &str, &str)>) -> String {
    let mut config = yaml_doc(&deploy_dir().join("prometheus/prometheus.yml"));
    let rules = deploy_dir().join("prometheus/rules/*.yml");
    config["rule_files"] = Yaml::Sequence(vec![Yaml::String(rules.display().to_string())]);
    if let Some((scheduler, worker, own)) = targets {
        config["global"]["scrape_interval"] = Yaml::String("1s".into());
        config["global"]["evaluation_interval"] = Yaml::String("1s".into());
        let jobs = config["scrape_configs"]
            .as_sequence_mut()
            .expect("scrape_configs");
        for job in jobs.iter_mut() {
            let target = match job["job_name"].as_str() {
                Some("chime-scheduler") => scheduler,
                Some("chime-worker") => worker,
                _ => own,
            };
            let map = job.as_mapping_mut().expect("a scrape job");
            map.remove("dns_sd_configs");
            let static_configs: Yaml =
                serde_yaml_ng::from_str(&format!("[{{targets: ['{target}']}}]")).expect("yaml");
            map.insert(Yaml::String("static_configs".into()), static_configs);
        }
    }
    serde_yaml_ng::to_string(&config).expect("serialise")
}

#[test]
fn promtool_accepts_the_config_the_rules_and_their_unit_tests() {
    let promtool = tool("promtool");
    let shipped = deploy_dir().join("prometheus/prometheus.yml");
    run_tool(
        Command::new(&promtool)
            .arg("check")
            .arg("config")
            .arg(&shipped),
    );
    // Once more with the rule files where the glob finds them.
    let dir = tempfile::tempdir().expect("temporary directory");
    let local = dir.path().join("prometheus.yml");
    std::fs::write(&local, local_prometheus_config(None)).expect("write config");
    let out = run_tool(
        Command::new(&promtool)
            .arg("check")
            .arg("config")
            .arg(&local),
    );
    assert!(
        out.contains("chime.yml"),
        "promtool did not load the rules: {out}"
    );
    run_tool(
        Command::new(&promtool)
            .arg("check")
            .arg("rules")
            .arg(rules_file()),
    );
    run_tool(
        Command::new(&promtool)
            .current_dir(deploy_dir().join("prometheus/tests"))
            .args(["test", "rules", "chime.test.yml"]),
    );
}

#[test]
fn kubernetes_prometheus_rule_holds_the_same_rules_as_the_rule_file() {
    let rules = yaml_doc(&rules_file());
    let objects = kubernetes_objects("monitoring");
    let rule = find(&objects, "PrometheusRule", "chime");
    assert_eq!(
        rule["spec"]["groups"], rules["groups"],
        "deploy/kubernetes/monitoring/prometheusrule.yaml differs from deploy/prometheus/rules/chime.yml; copy the groups over"
    );
}

/// Every PromQL expression of the dashboard's panels, with their titles.
fn dashboard_queries() -> Vec<(String, String)> {
    let path = deploy_dir().join("grafana/dashboards/chime.json");
    let dashboard: serde_json::Value = serde_json::from_str(&read(&path)).expect("dashboard JSON");
    let mut out = Vec::new();
    let mut panels: Vec<&serde_json::Value> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .collect();
    while let Some(panel) = panels.pop() {
        if let Some(inner) = panel["panels"].as_array() {
            panels.extend(inner);
        }
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"]
                .as_str()
                .expect("a target's expr")
                .to_string();
            out.push((panel["title"].as_str().unwrap_or("?").to_string(), expr));
        }
    }
    assert!(
        out.len() >= 20,
        "the dashboard has only {} queries",
        out.len()
    );
    out
}

#[test]
fn dashboard_panels_are_grouped_described_and_have_units() {
    let path = deploy_dir().join("grafana/dashboards/chime.json");
    let dashboard: serde_json::Value = serde_json::from_str(&read(&path)).expect("dashboard JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let rows: Vec<&str> = panels
        .iter()
        .filter(|p| p["type"] == "row")
        .filter_map(|p| p["title"].as_str())
        .collect();
    assert!(
        rows.len() >= 6,
        "panels should be grouped in rows, found {rows:?}"
    );
    let mut ids = BTreeSet::new();
    for panel in panels {
        assert!(
            ids.insert(panel["id"].as_u64().expect("panel id")),
            "duplicate panel id {}",
            panel["id"]
        );
        if panel["type"] == "row" {
            continue;
        }
        let title = panel["title"].as_str().expect("title");
        assert!(
            panel["description"].as_str().is_some_and(|d| d.len() > 20),
            "panel {title} needs a description"
        );
        let unit = panel["fieldConfig"]["defaults"]["unit"].as_str();
        assert!(
            unit.is_some_and(|u| !u.is_empty()),
            "panel {title} needs a unit"
        );
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "panel {title} should use the datasource variable"
        );
    }
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(variables, ["datasource", "group"]);
    let provisioning = yaml_doc(&deploy_dir().join("grafana/provisioning/dashboards/chime.yaml"));
    assert_eq!(
        provisioning["providers"][0]["options"]["path"],
        "/var/lib/grafana/dashboards"
    );
}

/// Metric names (`chime_…`, and Prometheus's own `up`) in a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut word = String::new();
    let mut in_string = false;
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c == '"' {
            in_string = !in_string;
            word.clear();
            continue;
        }
        if in_string {
            continue;
        }
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
            continue;
        }
        if word.starts_with("chime_") || PROMETHEUS_OWN_METRICS.contains(&word.as_str()) {
            // A following `=` or `!` makes it a label name; a `(` a function.
            if c != '=' && c != '!' && c != '(' {
                names.insert(word.clone());
            }
        }
        word.clear();
    }
    names
}

/// The families a /metrics page declares (`# TYPE name type`), with the
/// series names a histogram family adds.
fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(name), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        names.insert(name.to_string());
        if kind == "histogram" || kind == "summary" {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{name}{suffix}"));
            }
        }
    }
    names
}

fn rule_expressions() -> Vec<(String, String)> {
    let rules = yaml_doc(&rules_file());
    seq(&rules["groups"])
        .iter()
        .flat_map(|g| seq(&g["rules"]).iter())
        .map(|r| {
            let name = r["alert"]
                .as_str()
                .or(r["record"].as_str())
                .unwrap_or("?")
                .to_string();
            (name, str_of(&r["expr"], "a rule's expr").to_string())
        })
        .collect()
}

#[test]
fn metric_names_are_read_from_expressions() {
    let names = metric_names(
        r#"max by (group) (chime_firings{state="published", group=~"chime_x"} and on (instance) (chime_leader == 1)) unless count(up{job="chime-scheduler"})"#,
    );
    let expected: BTreeSet<String> = ["chime_firings", "chime_leader", "up"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(names, expected);
}

// --- Live: a real Prometheus scraping a real scheduler and worker ----------------------------

async fn http_get(client: &reqwest::Client, url: &str) -> Option<String> {
    let response = client.get(url).send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    response.text().await.ok()
}

/// A Prometheus API call's `data`, or why not.
async fn prometheus_api(
    client: &reqwest::Client,
    base: &str,
    path: &str,
    params: &[(&str, String)],
) -> Result<serde_json::Value, String> {
    let response = client
        .get(format!("{base}{path}"))
        .query(params)
        .send()
        .await
        .map_err(|e| format!("{path}: {e}"))?;
    let text = response.text().await.map_err(|e| format!("{path}: {e}"))?;
    let body: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{path}: {e}: {text}"))?;
    if body["status"] != "success" {
        return Err(format!("{path} {params:?}: {body}"));
    }
    Ok(body["data"].clone())
}

/// A dashboard expression as Grafana would send it, with the variables set.
fn substitute_variables(expr: &str) -> String {
    expr.replace("$__rate_interval", "30s")
        .replace("$group", ".*")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_alert_queries_return_data_from_a_live_scheduler_and_worker() {
    init_tracing();
    let began = Instant::now();
    let step = |what: &str| eprintln!("[{:5.1}s] {what}", began.elapsed().as_secs_f64());
    let prometheus_bin = tool("prometheus");
    let nats = NatsServer::start().await;
    step("NATS started");
    let _ = Binary::Scheduler.path();
    step("binaries built");
    let db = SqliteDatabase::create();
    let scheduler_addr = format!("127.0.0.1:{}", free_port());
    let worker_addr = format!("127.0.0.1:{}", free_port());

    // A webhook nothing answers: its alerts are given up on after one try,
    // and the webhook series the rules read exist.
    let webhook = format!("http://127.0.0.1:{}/chime", free_port());
    let mut cmd = Binary::Scheduler.command();
    cmd.env("CHIME_NATS_URL", nats.url())
        .env("CHIME_DATABASE_URL", db.url())
        .env("CHIME_METRICS_ADDR", &scheduler_addr)
        .env("CHIME_NOT_STARTED_AFTER", "2s")
        .env("CHIME_ALERT_WEBHOOKS", &webhook)
        .env("CHIME_ALERT_WEBHOOK_TRIES", "1");
    let mut scheduler = ChimeProcess::spawn(cmd);
    scheduler
        .wait_for_log_line("chime-scheduler ready", Duration::from_secs(20))
        .await;
    step("scheduler ready");

    let mut cmd = Binary::Worker.command();
    cmd.env("CHIME_NATS_URL", nats.url())
        .env("CHIME_GROUP", "default")
        .env("CHIME_THREADS", "4")
        .env("CHIME_ALLOW_SHELL", "true")
        .env("CHIME_METRICS_ADDR", &worker_addr);
    let mut worker = ChimeProcess::spawn(cmd);
    worker
        .wait_for_log_line("chime-worker ready", Duration::from_secs(20))
        .await;
    step("worker ready");

    // Traffic for every panel: successes, failures with a retry, overlap
    // refusals while a run is executing, a backlog in a group without
    // workers, and an API error.
    let client = Client::new(nats.connect().await);
    let jobs = [
        json!({"id": "ok", "schedule": {"every": "1s"}, "handler": "shell", "payload": {"argv": ["true"]}}),
        json!({"id": "fails", "schedule": {"every": "1s"}, "handler": "shell", "payload": {"argv": ["false"]},
               "retry": {"max_attempts": 2, "initial": "100ms"}}),
        json!({"id": "slow", "schedule": {"every": "1s"}, "handler": "shell", "payload": {"argv": ["sleep", "3"]},
               "overlap": "forbid"}),
        json!({"id": "orphan", "group": "orphans", "schedule": {"every": "1s"}, "handler": "shell",
               "payload": {"argv": ["true"]}}),
        // Every start is later than 1 ms: a `late` alert each second.
        json!({"id": "tardy", "schedule": {"every": "1s"}, "handler": "shell", "payload": {"argv": ["true"]},
               "max_lateness": "1ms"}),
        // Every date is excluded and alerted: a `missed` alert each second.
        json!({"id": "closed", "schedule": {"every": "1s"}, "handler": "shell", "payload": {"argv": ["true"]},
               "exclude": ["every-day"], "alert_on_excluded": true}),
    ];
    client
        .put_calendar(&json!({"id": "every-day", "dates": [],
            "weekdays": ["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"]}))
        .await
        .expect("put calendar");
    for job in &jobs {
        client
            .put_job(job)
            .await
            .unwrap_or_else(|e| panic!("put {job}: {e:?}"));
    }
    assert!(
        client.get_job("no-such-job").await.is_err(),
        "get of a missing job is an error"
    );
    step("jobs put");

    // The consumers the KEDA ScaledObject watches exist once a worker runs.
    let objects = kubernetes_objects("autoscaling/keda");
    let js = async_nats::jetstream::new(nats.connect().await);
    let fire = js
        .get_stream("CHIME_FIRE")
        .await
        .expect("stream CHIME_FIRE");
    for trigger in seq(&find(&objects, "ScaledObject", "chime-worker")["spec"]["triggers"]) {
        let consumer = str_of(&trigger["metadata"]["consumer"], "consumer");
        fire.consumer_info(consumer)
            .await
            .unwrap_or_else(|e| panic!("the ScaledObject watches consumer {consumer}, which the worker did not create: {e}"));
    }

    // Every metric the dashboard and the rules use is exported.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("HTTP client");
    let mut wanted = BTreeSet::new();
    for (_, expr) in dashboard_queries().iter().chain(rule_expressions().iter()) {
        wanted.extend(metric_names(expr));
    }
    let own: BTreeSet<String> = PROMETHEUS_OWN_METRICS
        .iter()
        .map(|s| s.to_string())
        .collect();
    let wanted: BTreeSet<String> = wanted.difference(&own).cloned().collect();
    let scheduler_metrics = format!("http://{scheduler_addr}/metrics");
    let worker_metrics = format!("http://{worker_addr}/metrics");
    step("waiting for every metric to be exported");
    until_ok(
        Duration::from_secs(30),
        "every metric of the dashboard and the rules",
        || async {
            let mut exported = BTreeSet::new();
            for url in [&scheduler_metrics, &worker_metrics] {
                exported.extend(exported_names(
                    &http_get(&http, url)
                        .await
                        .ok_or(format!("cannot GET {url}"))?,
                ));
            }
            let missing: Vec<&String> = wanted.difference(&exported).collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!("not exported (yet): {missing:?}"))
            }
        },
    )
    .await;

    // A real Prometheus with the shipped scrape configuration and rules.
    let prometheus_port = free_port();
    let prometheus_addr = format!("127.0.0.1:{prometheus_port}");
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        local_prometheus_config(Some((&scheduler_addr, &worker_addr, &prometheus_addr))),
    )
    .expect("write config");
    let mut cmd = Command::new(&prometheus_bin);
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={prometheus_addr}"))
        .arg("--log.level=warn");
    let _prometheus = ChimeProcess::spawn(cmd);
    let base = format!("http://{prometheus_addr}");
    let start = chrono::Utc::now().timestamp() - 5;
    step("starting Prometheus; waiting for its scrapes");
    until_ok(
        Duration::from_secs(20),
        "Prometheus to scrape both targets",
        || async {
            let data = prometheus_api(
                &http,
                &base,
                "/api/v1/query",
                &[("query", "up == 1".to_string())],
            )
            .await?;
            let up = data["result"].as_array().map(Vec::len).unwrap_or(0);
            if up >= 3 {
                Ok(())
            } else {
                Err(format!("{up} targets up"))
            }
        },
    )
    .await;

    // Every dashboard query returns data (rate windows need a few scrapes).
    let queries = dashboard_queries();
    step("waiting for every dashboard query to return data");
    until_ok(
        Duration::from_secs(40),
        "every dashboard query to return data",
        || async {
            let end = chrono::Utc::now().timestamp();
            let mut empty = Vec::new();
            for (title, expr) in &queries {
                let params = [
                    ("query", substitute_variables(expr)),
                    ("start", start.to_string()),
                    ("end", end.to_string()),
                    ("step", "1".to_string()),
                ];
                let data = prometheus_api(&http, &base, "/api/v1/query_range", &params).await?;
                if data["result"].as_array().is_none_or(Vec::is_empty) {
                    empty.push(format!("{title}: {expr}"));
                }
            }
            if empty.is_empty() {
                Ok(())
            } else {
                Err(format!("no data for:\n  {}", empty.join("\n  ")))
            }
        },
    )
    .await;
    let data = prometheus_api(
        &http,
        &base,
        "/api/v1/label/group/values",
        &[("match[]", "chime_firings_published_total".to_string())],
    )
    .await
    .expect("group values");
    assert!(
        data.as_array().is_some_and(|g| !g.is_empty()),
        "the $group variable finds no groups: {data}"
    );

    // The rules evaluate without error, and "no worker in a group" picks the
    // group without workers and only that one.
    step("waiting for every rule to evaluate");
    until_ok(
        Duration::from_secs(10),
        "every rule to evaluate",
        || async {
            let data = prometheus_api(&http, &base, "/api/v1/rules", &[]).await?;
            let rules: Vec<&serde_json::Value> = data["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|g| g["rules"].as_array().into_iter().flatten())
                .collect();
            if rules.len() != rule_expressions().len() {
                return Err(format!("{} rules loaded", rules.len()));
            }
            let bad: Vec<String> = rules
                .iter()
                .filter(|r| r["health"] != "ok")
                .map(|r| format!("{}: {} {}", r["name"], r["health"], r["lastError"]))
                .collect();
            if bad.is_empty() {
                Ok(())
            } else {
                Err(bad.join("; "))
            }
        },
    )
    .await;
    let (_, no_worker) = rule_expressions()
        .into_iter()
        .find(|(name, _)| name == "ChimeNoWorkerInGroup")
        .expect("rule ChimeNoWorkerInGroup");
    step("checking ChimeNoWorkerInGroup");
    let groups = until_ok(
        Duration::from_secs(10),
        "ChimeNoWorkerInGroup to select group orphans",
        || async {
            let data = prometheus_api(
                &http,
                &base,
                "/api/v1/query",
                &[("query", no_worker.clone())],
            )
            .await?;
            let groups: BTreeSet<String> = data["result"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s["metric"]["group"].as_str().map(str::to_string))
                .collect();
            if groups.is_empty() {
                Err("no group selected".to_string())
            } else {
                Ok(groups)
            }
        },
    )
    .await;
    assert_eq!(
        groups,
        BTreeSet::from(["orphans".to_string()]),
        "only the group without workers lacks one"
    );

    // The per-job gauges reach Prometheus with the Chime job under
    // `exported_job` (the scrape job holds `job`), as the job rules read them.
    step("checking the per-job gauges as ChimeJobStale reads them");
    until_ok(
        Duration::from_secs(10),
        "the per-job gauges under exported_job",
        || async {
            let data = prometheus_api(
                &http,
                &base,
                "/api/v1/query",
                &[(
                    "query",
                    "max by (exported_job, group) (chime_job_last_success_timestamp_seconds)"
                        .to_string(),
                )],
            )
            .await?;
            let ok =
                data["result"].as_array().into_iter().flatten().any(|s| {
                    s["metric"]["exported_job"] == "ok" && s["metric"]["group"] == "default"
                });
            if ok {
                Ok(())
            } else {
                Err(format!("job ok not found: {data}"))
            }
        },
    )
    .await;

    step("stopping");
    worker.terminate(Duration::from_secs(40)).await;
    scheduler.terminate(Duration::from_secs(20)).await;
}

// --- Safe by default ---------------------------------------------------------------------------

/// Compose: NATS requires the shipped users, nothing listens beyond the
/// host's loopback, no password is written in the file (each comes from a
/// variable Compose refuses to start without, or from a secret file), and
/// Grafana has neither a default admin password nor anonymous access.
#[test]
fn compose_is_safe_by_default() {
    let compose = yaml_doc(&compose_file());
    let services = compose["services"].as_mapping().expect("services");
    for (name, service) in services {
        let name = str_of(name, "a service name");
        for port in seq(&service["ports"]) {
            let port = str_of(port, "a port mapping");
            assert!(
                port.starts_with("127.0.0.1:"),
                "service {name} publishes {port} on every interface; bind it to 127.0.0.1"
            );
        }
        let env = compose_env(service, name);
        for (key, value) in &env {
            if key.contains("PASSWORD") && !key.ends_with("_FILE") {
                assert!(
                    value.starts_with("test-value-of-"),
                    "service {name}: {key} is written in compose.yaml; take it from ${{{key}:?…}} or a secret file"
                );
            }
            if let Ok(url) = url::Url::parse(value) {
                assert!(
                    url.password().is_none(),
                    "service {name}: {key} carries a password in its URL"
                );
            }
        }
        if name.starts_with("nats-") {
            let command: Vec<&str> = seq(&service["command"])
                .iter()
                .map(|c| str_of(c, "a command word"))
                .collect();
            assert!(
                command.contains(&"--config=/etc/nats/compose.conf"),
                "{name} must load the users of deploy/nats: {command:?}"
            );
        }
        let target = service["build"]["target"].as_str();
        if matches!(target, Some("scheduler" | "worker" | "chimectl")) {
            assert!(
                env.contains_key("CHIME_NATS_USER") && env.contains_key("CHIME_NATS_PASSWORD"),
                "service {name} connects to NATS without a user"
            );
        }
        if target == Some("worker") || target == Some("chimectl") {
            let user = &env["CHIME_NATS_USER"];
            assert_eq!(
                env.get("CHIME_NATS_INBOX_PREFIX"),
                Some(&format!("_INBOX.{user}")),
                "service {name}: replies must go to inboxes only its user reads"
            );
        }
    }
    let nats_conf = read(&deploy_dir().join("nats/compose.conf"));
    assert!(
        nats_conf.contains("include ./chime-auth.conf"),
        "{nats_conf}"
    );

    let postgres = compose_env(&services["postgres"], "postgres");
    assert!(
        postgres.contains_key("POSTGRES_PASSWORD_FILE"),
        "{postgres:?}"
    );
    assert!(!postgres.contains_key("POSTGRES_PASSWORD"), "{postgres:?}");
    let grafana = compose_env(&services["grafana"], "grafana");
    assert_eq!(
        grafana.get("GF_AUTH_ANONYMOUS_ENABLED").map(String::as_str),
        Some("false")
    );
    assert!(
        !grafana.contains_key("GF_SECURITY_ADMIN_PASSWORD"),
        "{grafana:?}"
    );
    assert!(
        grafana.contains_key("GF_SECURITY_ADMIN_PASSWORD__FILE"),
        "{grafana:?}"
    );

    let ignored = read(&repo_root().join(".gitignore"));
    for file in ["deploy/compose/.env", "deploy/compose/secrets/"] {
        assert!(
            ignored.lines().any(|l| l == file),
            ".gitignore misses {file}"
        );
    }
    for (name, secret) in compose["secrets"].as_mapping().expect("secrets") {
        let file = str_of(&secret["file"], "a secret file");
        assert!(
            file.starts_with("./secrets/"),
            "secret {name:?} lives outside the ignored secrets/ directory: {file}"
        );
    }
    let script = deploy_dir().join("compose/make-secrets.sh");
    let dir = tempfile::tempdir().expect("temporary directory");
    std::fs::copy(&script, dir.path().join("make-secrets.sh")).expect("copy");
    run_tool(Command::new("bash").arg(dir.path().join("make-secrets.sh")));
    let env_file = read(&dir.path().join(".env"));
    for variable in [
        "CHIME_NATS_SCHEDULER_PASSWORD",
        "CHIME_NATS_ADMIN_PASSWORD",
        "CHIME_NATS_WORKERS_DEFAULT_PASSWORD",
    ] {
        let line = env_file
            .lines()
            .find(|l| l.starts_with(&format!("{variable}=")))
            .unwrap_or_else(|| panic!("make-secrets.sh wrote no {variable}"));
        assert!(
            line.len() > variable.len() + 32,
            "{variable}: a short password"
        );
    }
    for secret in ["postgres-password", "grafana-admin-password"] {
        let value = read(&dir.path().join("secrets").join(secret));
        assert!(value.len() >= 32, "{secret}: a short password");
    }
}

/// Kubernetes: no pod carries a service account token, every container runs
/// as non-root on a read-only root filesystem, a default-deny NetworkPolicy
/// covers the namespace and each Deployment has its own, and no Secret is
/// part of a kustomization (the examples sit outside them).
#[test]
fn kubernetes_is_safe_by_default() {
    let objects = kubernetes_objects("base");
    let deployments: Vec<&Yaml> = objects
        .iter()
        .map(|(_, o)| o)
        .filter(|o| o["kind"].as_str() == Some("Deployment"))
        .collect();
    assert!(
        deployments.len() >= 2,
        "the base runs schedulers and workers"
    );
    let policies: Vec<&Yaml> = objects
        .iter()
        .map(|(_, o)| o)
        .filter(|o| o["kind"].as_str() == Some("NetworkPolicy"))
        .collect();
    let deny_all = policies.iter().any(|p| {
        p["spec"]["podSelector"]
            .as_mapping()
            .is_some_and(|m| m.is_empty())
            && seq(&p["spec"]["policyTypes"]).len() == 2
            && p["spec"].get("ingress").is_none()
            && p["spec"].get("egress").is_none()
    });
    assert!(deny_all, "no default-deny NetworkPolicy in the base");
    for deployment in deployments {
        let name = deployment["metadata"]["name"].as_str().unwrap_or("?");
        let pod = &deployment["spec"]["template"]["spec"];
        assert_eq!(
            pod["automountServiceAccountToken"].as_bool(),
            Some(false),
            "Deployment {name} mounts a service account token"
        );
        assert_eq!(
            pod["securityContext"]["runAsNonRoot"].as_bool(),
            Some(true),
            "{name}"
        );
        for container in seq(&pod["containers"]) {
            let context = &container["securityContext"];
            assert_eq!(
                context["readOnlyRootFilesystem"].as_bool(),
                Some(true),
                "Deployment {name}: the root filesystem must be read-only"
            );
            assert_eq!(
                context["allowPrivilegeEscalation"].as_bool(),
                Some(false),
                "{name}"
            );
        }
        let labels = &deployment["spec"]["template"]["metadata"]["labels"];
        let own = policies
            .iter()
            .any(|p| labels_match(&p["spec"]["podSelector"]["matchLabels"], labels));
        assert!(own, "no NetworkPolicy selects Deployment {name}'s pods");
    }
    for path in files_under(&deploy_dir().join("kubernetes")) {
        if path.file_name().and_then(|n| n.to_str()) != Some("kustomization.yaml") {
            continue;
        }
        let dir = path.parent().expect("a directory");
        for resource in seq(&yaml_doc(&path)["resources"]) {
            let file = dir.join(str_of(resource, "a resource"));
            for doc in yaml_docs(&file) {
                assert_ne!(
                    doc["kind"].as_str(),
                    Some("Secret"),
                    "{} applies a Secret with a placeholder password",
                    file.display()
                );
            }
        }
    }
}
