// Names and connections: a worker of a dotted group under another subject
// prefix runs its firings (consumers named by the group's hex), and NATS
// credentials and TLS reach the official client.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Worker, connectNats } from "../../dist/index.js";
import { startChime, eventually, inMs } from "../harness.mjs";

const quiet = { debug() {}, info() {}, warn() {}, error() {} };

test("a dotted group under another subject prefix runs its firings", async () => {
  const chime = await startChime({ prefix: "acme-chime" });
  const worker = new Worker({ group: "eu.sdk", subjectPrefix: "acme-chime", nats: { url: chime.natsUrl }, logger: quiet });
  worker.handle("where", (ctx) => `${ctx.jobId} in eu.sdk`);
  try {
    await worker.start();
    chime.putJob({ id: "dotted", group: "eu.sdk", schedule: { at: inMs(1200) }, handler: "where" });
    const done = await eventually("dotted succeeded", () => chime.history("dotted").find((f) => f.state === "succeeded"));
    assert.equal(done.output, "dotted in eu.sdk");
    assert.equal(done.worker, worker.id);
  } finally {
    await worker.shutdown();
    await chime.stop();
  }
});

test("user and password, and tokens, are passed to the client", async () => {
  const withUser = await startChime({ scheduler: false, natsArgs: ["--user", "alice", "--pass", "s3cret"] });
  try {
    const nc = await connectNats({ url: withUser.natsUrl, user: "alice", password: "s3cret" });
    await nc.close();
    const inUrl = await connectNats({ url: withUser.natsUrl.replace("nats://", "nats://alice:s3cret@") });
    await inUrl.close();
    await assert.rejects(connectNats({ url: withUser.natsUrl, user: "alice", password: "wrong" }), /cannot connect to NATS/);
  } finally {
    await withUser.stop();
  }
  const withToken = await startChime({ scheduler: false, natsArgs: ["--auth", "t0ken"] });
  try {
    const nc = await connectNats({ url: withToken.natsUrl, token: "t0ken" });
    await nc.close();
    await assert.rejects(connectNats({ url: withToken.natsUrl }), /cannot connect to NATS/);
  } finally {
    await withToken.stop();
  }
});

test("a tls ca file verifies the server", { skip: !existsSync("/usr/bin/openssl") && "needs openssl" }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "chime-ts-tls-"));
  const ssl = (...args) => execFileSync("openssl", args, { cwd: dir, stdio: "ignore" });
  ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=test-ca");
  ssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1");
  execFileSync("sh", ["-c", "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost' > ext.cnf"], { cwd: dir });
  ssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.pem", "-days", "1", "-extfile", "ext.cnf");
  const chime = await startChime({
    scheduler: false,
    natsArgs: ["--tls", "--tlscert", join(dir, "server.pem"), "--tlskey", join(dir, "server.key")],
  });
  try {
    const nc = await connectNats({ url: chime.natsUrl, tlsCaFile: join(dir, "ca.pem") });
    assert.ok(nc.info?.tls_required);
    await nc.close();
    await assert.rejects(connectNats({ url: chime.natsUrl.replace("nats://", "tls://") }), /cannot connect to NATS/);
  } finally {
    await chime.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
