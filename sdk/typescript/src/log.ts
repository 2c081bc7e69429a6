/**
 * Logging: the worker writes one line per event to standard error by
 * default (standard output stays the program's own), and takes any logger
 * with these four methods (pino, winston, `console`) instead.
 */

/** Fields attached to a log line (firing id, error, …). */
export type LogFields = Record<string, unknown>;

/** What the worker logs with. */
export interface Logger {
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
}

const LEVELS = ["debug", "info", "warn", "error"] as const;
type Level = (typeof LEVELS)[number];

/** A logger writing `<time> <LEVEL> <message> key=value…` lines to standard error, from `level` up. */
export function stderrLogger(level: Level = "info"): Logger {
  const least = LEVELS.indexOf(level);
  const line = (at: Level) => (message: string, fields?: LogFields) => {
    if (LEVELS.indexOf(at) < least) return;
    const parts = [new Date().toISOString(), at.toUpperCase().padEnd(5), message];
    for (const [key, value] of Object.entries(fields ?? {})) {
      if (value === undefined) continue;
      parts.push(`${key}=${typeof value === "string" ? JSON.stringify(value) : stringify(value)}`);
    }
    process.stderr.write(`${parts.join(" ")}\n`);
  };
  return { debug: line("debug"), info: line("info"), warn: line("warn"), error: line("error") };
}

function stringify(value: unknown): string {
  if (value instanceof Error) return JSON.stringify(value.message);
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/** The message of anything thrown. */
export function errorMessage(error: unknown): string {
  if (error instanceof Error) return error.message;
  if (typeof error === "string") return error;
  try {
    return JSON.stringify(error) ?? String(error);
  } catch {
    return String(error);
  }
}
