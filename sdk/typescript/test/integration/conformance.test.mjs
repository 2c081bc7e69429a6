// The conformance worker program as the conformance suite launches it: one
// ready line, its handlers' outputs, --count, clean exit on SIGTERM, and
// non-zero exits with a message on bad arguments or unreachable NATS.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { startChime, startProcess, eventually, inMs, sdkRoot } from "../harness.mjs";

const program = join(sdkRoot, "dist", "conformance.js");
let chime;
before(async () => {
  chime = await startChime();
});
after(async () => {
  await chime?.stop();
});

const stdoutLines = (proc) => {
  let text = "";
  proc.child.stdout.on("data", (chunk) => (text += chunk));
  return () => text.split("\n").filter(Boolean);
};

test("the program runs the conformance handlers and exits 0 after --count firings", async () => {
  const proc = await startProcess(
    process.execPath,
    [program, "--nats-url", chime.natsUrl, "--group", "conf", "--worker-id", "conf-1", "--count", "4"],
    { ready: /conformance worker ready conf-1\n/, name: "conformance worker" },
  );
  const lines = stdoutLines(proc);
  const at = inMs(1500);
  chime.putJob({ id: "echo-text", group: "conf", schedule: { at }, handler: "echo", payload: { text: "plain" } });
  chime.putJob({ id: "echo-json", group: "conf", schedule: { at }, handler: "echo", payload: { n: [1, 2] } });
  chime.putJob({ id: "fail", group: "conf", schedule: { at }, handler: "fail" });
  chime.putJob({ id: "env", group: "conf", schedule: { at }, handler: "env" });
  const exit = await Promise.race([proc.exited, new Promise((r) => setTimeout(() => r("timeout"), 30_000))]);
  assert.deepEqual(exit, { code: 0, signal: null }, proc.output);
  assert.deepEqual(lines(), [], "nothing more than the ready line on stdout");
  assert.equal(proc.output.match(/conformance worker ready/g).length, 1);
  const done = (job) => chime.history(job).find((f) => f.state === "succeeded" || f.state === "failed");
  assert.equal(done("echo-text").output, "plain");
  assert.deepEqual(JSON.parse(done("echo-json").output), { n: [1, 2] });
  assert.deepEqual([done("fail").state, done("fail").error], ["failed", "failed on purpose"]);
  const env = done("env");
  assert.deepEqual(JSON.parse(env.output), { firing_id: env.id, job_id: "env", attempt: 1, scheduled_at: env.scheduled_at });
});

test("sleep is cancelled by chimectl cancel and a shard says which it is; SIGTERM exits 0", async () => {
  const proc = await startProcess(
    process.execPath,
    [program, "--nats-url", chime.natsUrl, "--group", "conf2", "--threads", "4", "--drain-grace", "1s"],
    { ready: /conformance worker ready \S+\n/, name: "conformance worker" },
  );
  const at = inMs(1500);
  chime.putJob({ id: "nap", group: "conf2", schedule: { at }, handler: "sleep", payload: { seconds: 60 } });
  chime.putJob({ id: "short-nap", group: "conf2", schedule: { at }, handler: "sleep", payload: { seconds: 0.2 } });
  chime.putJob({ id: "split", group: "conf2", schedule: { at }, handler: "shard", shards: 2 });
  const running = await eventually("nap executing", () => chime.history("nap").find((f) => f.state === "executing"));
  chime.chimectl(["cancel", running.id]);
  const cancelled = await eventually("nap cancelled", () => chime.history("nap").find((f) => f.state === "cancelled"));
  assert.equal(cancelled.id, running.id);
  const short = await eventually("short nap", () => chime.history("short-nap").find((f) => f.state === "succeeded"));
  assert.equal(short.output, "slept 0.2");
  const shards = await eventually("both shards", () => {
    const done = chime.history("split").filter((f) => f.state === "succeeded");
    return done.length === 2 && done;
  });
  assert.deepEqual(shards.map((f) => f.output).sort(), ["0/2", "1/2"]);
  assert.deepEqual(await proc.stop("SIGTERM"), { code: 0, signal: null });
});

test("bad arguments exit 2 and unreachable NATS exits 1, each with a message", async () => {
  for (const [args, message] of [
    [["--threads", "0"], /--threads must be at least 1/],
    [["--group", "a..b"], /--group: dots must separate/],
    [["--fence-margin", "500ms"], /--fence-margin must be at least/],
    [["--no-such-flag"], /unknown argument "--no-such-flag"/],
  ]) {
    const proc = await startProcess(process.execPath, [program, ...args]);
    const exit = await proc.exited;
    assert.deepEqual(exit, { code: 2, signal: null }, args.join(" "));
    assert.match(proc.output, message);
  }
  const proc = await startProcess(process.execPath, [program, "--nats-url", "nats://127.0.0.1:1", "--nats-connect-wait", "300ms"]);
  assert.deepEqual(await proc.exited, { code: 1, signal: null });
  assert.match(proc.output, /cannot connect to NATS at 127\.0\.0\.1:1 within 0\.3s/);
});

test("SIGTERM while waiting for a scheduler exits 0", async () => {
  const bare = await startChime({ scheduler: false });
  try {
    const proc = await startProcess(process.execPath, [program, "--nats-url", bare.natsUrl], {
      ready: /waiting for a scheduler to create bucket chime-workers/,
      name: "conformance worker",
    });
    assert.deepEqual(await proc.stop("SIGTERM"), { code: 0, signal: null });
    assert.doesNotMatch(proc.output, /conformance worker ready/);
  } finally {
    await bare.stop();
  }
});
