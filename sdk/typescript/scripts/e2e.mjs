#!/usr/bin/env node
// End-to-end check of the SDK as a user gets it: copies the SDK's sources
// (what git tracks: no node_modules, no dist) to a temporary folder, installs
// it into a fresh project with `npm install <folder>`, type-checks a
// TypeScript user of its declarations, runs the README's example worker
// against a real nats-server and scheduler, puts the README's job with
// chimectl, and waits for a firing to succeed with the example's output.
// Exits 0 and prints "e2e: 1 passed, 0 failed" when all of it works.

import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { eventually, sdkRoot, startChime, startProcess } from "../test/harness.mjs";

const readme = readFileSync(join(sdkRoot, "README.md"), "utf8");
const example = readme.split("## Example")[1];
const block = (lang) => {
  const match = new RegExp("```" + lang + "\\n([\\s\\S]*?)```").exec(example);
  if (!match) throw new Error(`README.md's Example has no ${lang} block`);
  return match[1];
};
const workerCode = block("js");
const job = JSON.parse(block("json"));

const work = mkdtempSync(join(tmpdir(), "chime-ts-e2e-"));
let chime;
let worker;
let failed = false;
try {
  // The SDK as a fresh checkout has it.
  const sdk = join(work, "sdk");
  for (const entry of ["package.json", "package-lock.json", "tsconfig.json", "README.md", "src", "scripts"]) {
    cpSync(join(sdkRoot, entry), join(sdk, entry), { recursive: true });
  }
  const project = join(work, "project");
  mkdirSync(project);
  writeFileSync(join(project, "package.json"), JSON.stringify({ name: "chime-e2e", private: true, type: "module" }));
  console.log(`e2e: npm install ${sdk}`);
  execFileSync("npm", ["install", "--no-audit", "--no-fund", sdk], { cwd: project, stdio: "inherit" });

  // A TypeScript user compiles against the declarations.
  writeFileSync(
    join(project, "check.ts"),
    `import { Worker, HandlerError, type FiringContext } from "@chime/worker";
const worker = new Worker({ group: "typed", threads: 2 });
worker.handle("typed", async (ctx: FiringContext): Promise<string> => {
  if (ctx.signal.aborted) throw new HandlerError("stopped", { output: "partial" });
  return \`\${ctx.firingId} \${ctx.deadline.toISOString()} \${ctx.shard ?? "-"}\`;
});
worker.handle<{ name: string }>("greet", (ctx) => \`hello \${ctx.payload.name.toUpperCase()}\`);
`,
  );
  execFileSync(
    process.execPath,
    [join(sdk, "node_modules", "typescript", "bin", "tsc"), "--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022", "--types", "node", "--typeRoots", join(sdk, "node_modules", "@types"), "check.ts"],
    { cwd: project, stdio: "inherit" },
  );
  console.log("e2e: the declarations type-check");

  chime = await startChime();
  writeFileSync(join(project, "worker.mjs"), workerCode);
  worker = await startProcess(process.execPath, ["worker.mjs"], {
    env: { CHIME_NATS_URL: chime.natsUrl },
    ready: /worker started/,
    name: "the README's example worker",
    cwd: project,
  });
  chime.putJob(job);
  const done = await eventually(
    `a firing of ${job.id} to finish`,
    () => chime.history(job.id).find((f) => f.state === "succeeded" || f.state === "failed"),
    60_000,
  );
  if (done.state !== "succeeded" || !/^hello, Chime \(firing greet@\d+#1, attempt 1\)$/.test(done.output ?? "")) {
    throw new Error(`the firing ended ${done.state}: ${JSON.stringify(done)}`);
  }
  console.log(`e2e: ${done.id} succeeded: ${done.output}`);
  const exit = await worker.stop("SIGTERM");
  if (exit.code !== 0) throw new Error(`the example exited ${JSON.stringify(exit)} after SIGTERM:\n${worker.output}`);
  if (!/worker stopped/.test(worker.output)) throw new Error(`the example did not drain:\n${worker.output}`);
  console.log("e2e: the example drained and exited 0 on SIGTERM");
} catch (error) {
  failed = true;
  console.error(`e2e: FAILED: ${error.message}`);
  if (worker) console.error(worker.output.slice(-3000));
} finally {
  await worker?.stop("SIGKILL");
  await chime?.stop();
  rmSync(work, { recursive: true, force: true });
}
console.log(failed ? "e2e: 0 passed, 1 failed" : "e2e: 1 passed, 0 failed");
process.exit(failed ? 1 : 0);
