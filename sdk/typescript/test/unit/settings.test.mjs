// Settings and the command line: defaults valid, every bad value refused
// with the setting or flag named, NATS URLs with credentials understood.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { checkGroup, checkWorkerId, defaultSettings, defaultWorkerId, leaseFor, validateSettings } from "../../dist/config.js";
import { parseArgs, parseDuration } from "../../dist/args.js";
import { connectionOptions, parseNatsUrls } from "../../dist/connect.js";
import { VERSION } from "../../dist/version.js";
import { Worker } from "../../dist/index.js";

test("defaults are valid", () => {
  const s = defaultSettings();
  validateSettings(s);
  assert.equal(leaseFor(s, 15_000), 13_000);
  assert.ok(s.threads >= 1);
  assert.equal(checkWorkerId(defaultWorkerId()), undefined);
  assert.match(defaultWorkerId(), /^[A-Za-z0-9_-]+-[0-9a-f]{8}$/);
});

test("bad settings are named", () => {
  const bad = (patch) => () => validateSettings({ ...defaultSettings(), ...patch });
  assert.throws(bad({ threads: 0 }), /^InvalidSettingError: threads/);
  assert.throws(bad({ threads: 1.5 }), (e) => e.setting === "threads");
  assert.throws(bad({ fenceMarginMs: 1100 }), (e) => e.setting === "fenceMarginMs" && /at least stopGraceMs/.test(e.message));
  assert.throws(bad({ maxOutputBytes: 0 }), (e) => e.setting === "maxOutputBytes");
  assert.throws(bad({ maxOutputBytes: 600 * 1024 }), (e) => e.setting === "maxOutputBytes");
  assert.throws(bad({ pollIntervalMs: 0 }), (e) => e.setting === "pollIntervalMs");
  assert.throws(bad({ group: "a..b" }), (e) => e.setting === "group");
  assert.throws(bad({ workerId: "a.b" }), (e) => e.setting === "workerId");
  assert.throws(bad({ subjectPrefix: "a.b" }), (e) => e.setting === "subjectPrefix");
  const s = defaultSettings();
  assert.throws(() => leaseFor({ ...s, heartbeatIntervalMs: 4000 }, 6000), /heartbeatIntervalMs must be shorter than the heartbeat lease \(4000 ms/);
  assert.throws(() => leaseFor({ ...s, fenceMarginMs: 6000 }, 6000), /fenceMarginMs must be shorter than the workers bucket's key TTL/);
  assert.throws(() => leaseFor(s, 0), (e) => e.setting === "fenceMarginMs");
  assert.throws(() => new Worker({ threads: 0 }), (e) => e.setting === "threads");
});

test("groups and worker ids follow the protocol's rules", () => {
  for (const good of ["reports", "eu.reports", "a_b-c"]) assert.equal(checkGroup(good), undefined, good);
  for (const bad of ["", "a b", "a..b", ".a", "a.", "a*", "x".repeat(65)]) assert.notEqual(checkGroup(bad), undefined, bad);
  assert.equal(checkWorkerId("host-1_a"), undefined);
  for (const bad of ["", "a.b", "a b", "a*", "a>", "x".repeat(129)]) assert.notEqual(checkWorkerId(bad), undefined, bad);
});

test("handlers are named once, before the worker starts", () => {
  const worker = new Worker();
  worker.handle("a", () => "x");
  assert.throws(() => worker.handle("a", () => "y"), /registered twice/);
  assert.throws(() => worker.handle("", () => "y"), /1 to 128 characters/);
  assert.throws(() => worker.handle("b", "not a function"), /must be a function/);
});

test("the command line reads flags, then the environment, then defaults", () => {
  const args = parseArgs([], {});
  assert.deepEqual(
    [args.natsUrl, args.group, args.workerId, args.subjectPrefix, args.threads, args.drainGraceMs, args.count, args.metricsPort],
    ["nats://127.0.0.1:4222", "default", undefined, "chime", 2, 30_000, 0, undefined],
  );
  const env = { CHIME_GROUP: "from-env", CHIME_THREADS: "7", CHIME_NATS_URL: "nats://n:1", CHIME_WORKER_ID: "w-env" };
  const fromEnv = parseArgs([], env);
  assert.deepEqual([fromEnv.group, fromEnv.threads, fromEnv.natsUrl, fromEnv.workerId], ["from-env", 7, "nats://n:1", "w-env"]);
  const fromFlags = parseArgs(["--group", "g", "--threads=3", "--drain-grace", "0.5", "--count", "4", "--metrics-port", "0"], env);
  assert.deepEqual([fromFlags.group, fromFlags.threads, fromFlags.drainGraceMs, fromFlags.count, fromFlags.metricsPort], ["g", 3, 500, 4, 0]);
  assert.equal(parseDuration("500ms"), 500);
  assert.equal(parseDuration("2s"), 2000);
  assert.equal(parseDuration("1m"), 60_000);
  assert.equal(parseDuration(".5"), 500);
});

test("bad command lines are refused with the flag named", () => {
  for (const [argv, flag] of [
    [["--threads", "0"], "--threads"],
    [["--threads", "x"], "--threads"],
    [["--group", "a b"], "--group"],
    [["--worker-id", "a.b"], "--worker-id"],
    [["--subject-prefix", "a.b"], "--subject-prefix"],
    [["--drain-grace", "soon"], "--drain-grace"],
    [["--count", "-1"], "--count"],
    [["--metrics-port", "70000"], "--metrics-port"],
    [["--nats-url", " , "], "--nats-url"],
    [["--nats-user", "u"], "--nats-user"],
    [["--nats-tls-key", "k"], "--nats-tls-cert"],
    [["--nats-inbox-prefix", "a.*"], "--nats-inbox-prefix"],
    [["--bogus"], "unknown argument"],
    [["--group"], "--group needs a value"],
  ]) {
    assert.throws(() => parseArgs(argv, {}), (e) => e.name === "UsageError" && e.message.startsWith(flag), argv.join(" "));
  }
  assert.throws(() => parseArgs([], { CHIME_THREADS: "many" }), /--threads \(from CHIME_THREADS\)/);
});

test("nats urls carry servers and credentials", () => {
  assert.deepEqual(parseNatsUrls("nats://127.0.0.1:4222"), { servers: ["127.0.0.1:4222"], user: undefined, password: undefined, token: undefined, tls: false });
  const withUser = parseNatsUrls("nats://alice:s%40cret@a:1, b:2");
  assert.deepEqual([withUser.servers, withUser.user, withUser.password], [["a:1", "b:2"], "alice", "s@cret"]);
  assert.equal(parseNatsUrls("nats://tok@a").token, "tok");
  assert.equal(parseNatsUrls("tls://a:4443").tls, true);
  assert.throws(() => parseNatsUrls(" , "), /names no server/);
  assert.throws(() => parseNatsUrls("http://a:1"), /scheme must be nats:\/\/ or tls:\/\//);
  const options = connectionOptions({ url: "tls://a:4443", inboxPrefix: "_INBOX.alice" });
  assert.deepEqual(options.tls, {});
  assert.equal(options.inboxPrefix, "_INBOX.alice");
  assert.equal(options.maxReconnectAttempts, -1);
  assert.throws(() => connectionOptions({ credsFile: "/no/such/file" }), /credsFile: cannot read \/no\/such\/file/);
  assert.throws(() => connectionOptions({ user: "u" }), /user and password go together/);
  assert.throws(() => connectionOptions({ tlsCertFile: "/c" }), (e) => e.setting === "tlsKeyFile");
});

test("the version is package.json's", () => {
  const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"));
  assert.equal(VERSION, pkg.version);
});
