#!/usr/bin/env node
// Builds dist/ (JavaScript and type declarations) with tsc.
//
// `npm run build` and `prepare` run it. npm runs `prepare` when another
// project installs this folder (`npm install ./sdk/typescript`), but it
// links the folder without installing the folder's own dependencies, and
// the linked code resolves its imports from here. So when they are missing
// they are installed here first, exactly as package-lock.json pins them.

import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
const run = (command, args) => execFileSync(command, args, { cwd: root, stdio: "inherit" });

if (!existsSync(tsc) || !existsSync(join(root, "node_modules", "@nats-io", "transport-node"))) {
  console.error("@chime/worker: installing its dependencies in", root);
  // The npm running this script, when there is one; a stray `--omit=dev` of the outer install must not skip tsc.
  const npm = process.env.npm_execpath;
  const args = ["ci", "--ignore-scripts", "--include=dev", "--no-audit", "--no-fund"];
  if (npm && npm.endsWith(".js")) run(process.execPath, [npm, ...args]);
  else run("npm", args);
}
run(process.execPath, [tsc, "-p", "tsconfig.json"]);
