/**
 * Firing ids (docs/PROTOCOL.md, "Identities"): `<job id>@<scheduled ms>#<attempt>`,
 * or `<job id>@<scheduled ms>.<shard>#<attempt>` for a shard of a sharded
 * job. Job ids never contain `@` or `#`, so the id is split at the last `@`
 * and then at `#`.
 */

/** A firing id, read. */
export interface FiringId {
  jobId: string;
  scheduledMs: number;
  /** The shard, for a shard of a sharded job's instant. */
  shard?: number;
  attempt: number;
}

const MAX_U32 = 4_294_967_295;

/** Reads a firing id; throws an Error naming the text when it is not one. */
export function parseFiringId(text: string): FiringId {
  const bad = () =>
    new Error(
      `${JSON.stringify(text)} is not a firing id (<job id>@<scheduled ms>#<attempt> or ` +
        `<job id>@<scheduled ms>.<shard>#<attempt>)`,
    );
  const at = text.lastIndexOf("@");
  if (at <= 0) throw bad();
  const jobId = text.slice(0, at);
  const rest = text.slice(at + 1);
  const hash = rest.indexOf("#");
  if (hash < 0) throw bad();
  let instant = rest.slice(0, hash);
  const attemptText = rest.slice(hash + 1);
  let shard: number | undefined;
  const dot = instant.indexOf(".");
  if (dot >= 0) {
    const shardText = instant.slice(dot + 1);
    // Digits only: one shard has one spelling (no sign, no blank).
    if (!/^\d+$/.test(shardText)) throw bad();
    shard = Number(shardText);
    if (shard > MAX_U32) throw bad();
    instant = instant.slice(0, dot);
  }
  if (!/^[+-]?\d+$/.test(instant)) throw bad();
  const scheduledMs = Number(instant);
  if (!Number.isSafeInteger(scheduledMs)) throw bad();
  if (!/^\+?\d+$/.test(attemptText)) throw bad();
  const attempt = Number(attemptText);
  if (attempt > MAX_U32) throw bad();
  return shard === undefined ? { jobId, scheduledMs, attempt } : { jobId, scheduledMs, shard, attempt };
}
