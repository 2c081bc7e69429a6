/**
 * Reading a firing message: its headers and JSON body (docs/PROTOCOL.md §3).
 * A message whose headers are missing or invalid, or whose body is not JSON,
 * is not a firing: the worker terminates it (drops it, for an offer, which
 * must also name this worker: {@link checkAddressee}) and never runs it.
 */

import { parseFiringId } from "./firing-id.js";
import { parseTime } from "./time.js";
import { validTraceparent } from "./traceparent.js";

/** Header names of firing messages. */
export const HEADERS = {
  firingId: "Chime-Firing-Id",
  jobId: "Chime-Job-Id",
  handler: "Chime-Handler",
  scheduledAt: "Chime-Scheduled-At",
  dueAt: "Chime-Due-At",
  attempt: "Chime-Attempt",
  priority: "Chime-Priority",
  deadline: "Chime-Deadline",
  timeoutMs: "Chime-Timeout-Ms",
  shard: "Chime-Shard",
  shards: "Chime-Shards",
  workerId: "Chime-Worker-Id",
  traceparent: "traceparent",
} as const;

/** What a firing is: which job and attempt, what to run, when it was due. */
export interface FiringDetails {
  /** `<job id>@<scheduled ms>#<attempt>`, or `<job id>@<scheduled ms>.<shard>#<attempt>` for a shard. */
  firingId: string;
  jobId: string;
  /** The handler name the firing asked for. */
  handler: string;
  /** The instant the schedule produced. */
  scheduledAt: Date;
  /** When the firing was due for publishing: the scheduled instant, or later for a retry. */
  dueAt: Date;
  /** 1, 2, … */
  attempt: number;
  /** 0–9. */
  priority: number;
  /** The job's payload (`null` when the message had no body). */
  payload: unknown;
  /** A sharded job's shard, 0…`shards`-1; `undefined` when unsharded. */
  shard: number | undefined;
  /** How many shards the instant has; `undefined` when unsharded. */
  shards: number | undefined;
  /** The firing's W3C `traceparent`; `undefined` when absent or malformed. */
  traceparent: string | undefined;
}

/** A firing message, checked: the firing, and the two headers that only decide its deadline. */
export interface FiringMessage {
  firing: FiringDetails;
  /** `Chime-Deadline`: the cut-off if the run starts at once. */
  deadline: Date;
  /** `Chime-Timeout-Ms`, if present. */
  timeoutMs: number | undefined;
}

/** Why a message is not a firing. */
export class BadMessage extends Error {
  constructor(message: string) {
    super(message);
    this.name = "BadMessage";
  }
}

/** Reads one header: its value trimmed, `undefined` when absent or blank. */
export type HeaderReader = (name: string) => string | undefined;

const MAX_U32 = 4_294_967_295;

/** Reads a firing from a message's headers (`undefined`: the message had none) and body. */
export function parseFiring(read: HeaderReader | undefined, body: Uint8Array): FiringMessage {
  if (!read) throw new BadMessage("the message has no headers");
  const optional = (name: string): string | undefined => {
    const value = read(name)?.trim();
    return value ? value : undefined;
  };
  const need = (name: string): string => {
    const value = optional(name);
    if (value === undefined) throw new BadMessage(`header ${name} is missing`);
    return value;
  };
  const invalid = (name: string, reason: string) => new BadMessage(`header ${name} is invalid: ${reason}`);
  const time = (name: string, text: string): Date => {
    try {
      return parseTime(text);
    } catch (e) {
      throw invalid(name, (e as Error).message);
    }
  };

  const firingIdText = need(HEADERS.firingId);
  let id;
  try {
    id = parseFiringId(firingIdText);
  } catch (e) {
    throw invalid(HEADERS.firingId, (e as Error).message);
  }
  const jobId = need(HEADERS.jobId);
  if (jobId !== id.jobId) {
    throw invalid(HEADERS.jobId, `${JSON.stringify(jobId)} is not the job of firing ${firingIdText}`);
  }
  const handler = need(HEADERS.handler);
  const scheduledAt = time(HEADERS.scheduledAt, need(HEADERS.scheduledAt));
  const dueText = optional(HEADERS.dueAt);
  const dueAt = dueText === undefined ? scheduledAt : time(HEADERS.dueAt, dueText);
  const attemptText = need(HEADERS.attempt);
  const attempt = wholeNumber(attemptText);
  if (attempt === undefined || attempt > MAX_U32) throw invalid(HEADERS.attempt, "not a whole number");
  if (attempt !== id.attempt) {
    throw invalid(HEADERS.attempt, `${attempt} is not the attempt of firing ${firingIdText}`);
  }
  const priority = wholeNumber(need(HEADERS.priority));
  if (priority === undefined || priority > 9) throw invalid(HEADERS.priority, "must be an integer from 0 to 9");
  const deadline = time(HEADERS.deadline, need(HEADERS.deadline));
  const timeoutText = optional(HEADERS.timeoutMs);
  let timeoutMs: number | undefined;
  if (timeoutText !== undefined) {
    timeoutMs = wholeNumber(timeoutText);
    if (timeoutMs === undefined) throw invalid(HEADERS.timeoutMs, "not a whole number of milliseconds");
  }
  const { shard, shards } = readShard(optional, firingIdText, id.shard);
  const payload = parseBody(body);
  return {
    firing: {
      firingId: firingIdText,
      jobId,
      handler,
      scheduledAt,
      dueAt,
      attempt,
      priority,
      payload,
      shard,
      shards,
      traceparent: validTraceparent(read(HEADERS.traceparent)),
    },
    deadline,
    timeoutMs,
  };
}

/** A non-negative whole number written in digits (an optional `+` as Rust's parser allows). */
function wholeNumber(text: string): number | undefined {
  if (!/^\+?\d+$/.test(text)) return undefined;
  const value = Number(text);
  return Number.isSafeInteger(value) ? value : undefined;
}

/**
 * The shard headers, checked against the firing id: both present exactly
 * when the id names a shard, the shard below the count and the id's own.
 */
function readShard(
  optional: (name: string) => string | undefined,
  firingId: string,
  idShard: number | undefined,
): { shard: number | undefined; shards: number | undefined } {
  const shardText = optional(HEADERS.shard);
  const shardsText = optional(HEADERS.shards);
  if (idShard === undefined) {
    if (shardText !== undefined || shardsText !== undefined) {
      throw new BadMessage(`header ${HEADERS.shard} is invalid: firing ${firingId} is not a shard`);
    }
    return { shard: undefined, shards: undefined };
  }
  if (shardText === undefined) throw new BadMessage(`header ${HEADERS.shard} is missing`);
  if (shardsText === undefined) throw new BadMessage(`header ${HEADERS.shards} is missing`);
  const shard = wholeNumber(shardText);
  if (shard === undefined || shard > MAX_U32) {
    throw new BadMessage(`header ${HEADERS.shard} is invalid: not a whole number`);
  }
  const shards = wholeNumber(shardsText);
  // A broadcast to a single worker is shard 0 of 1.
  if (shards === undefined || shards < 1 || shards > MAX_U32) {
    throw new BadMessage(`header ${HEADERS.shards} is invalid: must be a whole number above 0`);
  }
  if (shard !== idShard || shard >= shards) {
    throw new BadMessage(
      `header ${HEADERS.shard} is invalid: ${shard} of ${shards} is not the shard of firing ${firingId}`,
    );
  }
  return { shard, shards };
}

/** An offer is a firing addressed to one worker: its `Chime-Worker-Id` must be `workerId`. */
export function checkAddressee(read: HeaderReader | undefined, workerId: string): void {
  const addressee = read?.(HEADERS.workerId)?.trim();
  if (!addressee) throw new BadMessage(`header ${HEADERS.workerId} is missing`);
  if (addressee !== workerId) {
    throw new BadMessage(
      `header ${HEADERS.workerId} is invalid: the offer is for worker ${JSON.stringify(addressee)}, not for ${JSON.stringify(workerId)}`,
    );
  }
}

const JSON_WHITESPACE = new Set([0x20, 0x09, 0x0a, 0x0d, 0x0c]);

/** The payload: `null` for an empty (or blank) body, else the body as strict UTF-8 JSON. */
function parseBody(body: Uint8Array): unknown {
  if (body.every((b) => JSON_WHITESPACE.has(b))) return null;
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(body);
  } catch {
    throw new BadMessage("the body is not JSON: it is not UTF-8");
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new BadMessage(`the body is not JSON: ${(e as Error).message}`);
  }
}
