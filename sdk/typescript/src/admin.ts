/**
 * The worker's HTTP endpoints, served only when a metrics port is asked
 * for: `/metrics` (Prometheus text), `/healthz` (liveness: 200 while the
 * process answers; it does not depend on NATS, since restarting a worker
 * does not bring NATS back) and `/readyz` (200 while connected to NATS,
 * started, not fenced and not draining; else 503 with the reason).
 */

import { createServer, type Server } from "node:http";
import type { Metrics } from "./metrics.js";

/** What `/readyz` asks. */
export type Readiness = () => string | undefined;

/** Serves the endpoints on `host:port`; resolves with the server once it listens. */
export async function serveAdmin(host: string, port: number, metrics: Metrics, notReady: Readiness): Promise<Server> {
  const server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    const text = (status: number, body: string, type = "text/plain; charset=utf-8") => {
      res.writeHead(status, { "content-type": type });
      res.end(body);
    };
    if (req.method !== "GET" && req.method !== "HEAD") return text(405, "method not allowed\n");
    if (path === "/metrics") {
      metrics.render().then(
        (body) => text(200, body, metrics.contentType),
        (error: Error) => text(500, `cannot render metrics: ${error.message}\n`),
      );
      return;
    }
    if (path === "/healthz") return text(200, "ok\n");
    if (path === "/readyz") {
      const reason = notReady();
      return reason === undefined ? text(200, "ready\n") : text(503, `${reason}\n`);
    }
    return text(404, "not found: try /metrics, /healthz or /readyz\n");
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  return server;
}
