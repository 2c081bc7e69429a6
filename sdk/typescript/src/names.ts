/**
 * Every NATS name a worker uses, derived from one subject prefix (default
 * `chime`): subjects `chime.…`, streams `CHIME_…`, the bucket `chime-workers`
 * (docs/PROTOCOL.md: with prefix `P`, `chime.` becomes `P.`, `CHIME_` the
 * prefix upper-cased with `-` turned into `_`, `chime-` becomes `P-`).
 */

/** The bands of a group's firings, highest first. */
export const BANDS = ["high", "normal", "low"] as const;
export type Band = (typeof BANDS)[number];

/** The default subject prefix. */
export const DEFAULT_PREFIX = "chime";

/** The names of one installation (one prefix) for one worker of one group. */
export class Names {
  readonly prefix: string;
  readonly group: string;
  readonly workerId: string;

  constructor(prefix: string, group: string, workerId: string) {
    this.prefix = prefix;
    this.group = group;
    this.workerId = workerId;
  }

  private get upper(): string {
    return this.prefix.toUpperCase().replaceAll("-", "_");
  }

  get fireStream(): string {
    return `${this.upper}_FIRE`;
  }

  get eventsStream(): string {
    return `${this.upper}_EVENTS`;
  }

  get workersBucket(): string {
    return `${this.prefix}-workers`;
  }

  /** `fire_g_<group>_<band>`, or `fire_h_<hex of the group>_<band>` for a dotted group. */
  fireConsumer(band: Band): string {
    return fireConsumerName(this.group, band);
  }

  /** The raw pull request subject of `band`'s consumer. */
  pullSubject(band: Band): string {
    return `$JS.API.CONSUMER.MSG.NEXT.${this.fireStream}.${this.fireConsumer(band)}`;
  }

  /** `chime.ready.<group>`: the doorbell. */
  get doorbell(): string {
    return `${this.prefix}.ready.${this.group}`;
  }

  /** `chime.worker.v1.start.<group>.<worker id>`. */
  get start(): string {
    return `${this.prefix}.worker.v1.start.${this.group}.${this.workerId}`;
  }

  /** `chime.events.finished.<group>.<worker id>`. */
  get finished(): string {
    return `${this.prefix}.events.finished.${this.group}.${this.workerId}`;
  }

  /** `chime.cancel.<worker id>`. */
  get cancel(): string {
    return `${this.prefix}.cancel.${this.workerId}`;
  }

  /** `chime.offer.<group>.<worker id>`: where the scheduler offers the firings of broadcast jobs to this worker. */
  get offer(): string {
    return `${this.prefix}.offer.${this.group}.${this.workerId}`;
  }

  /** `<group>.<worker id>`: the heartbeat key. */
  get heartbeatKey(): string {
    return `${this.group}.${this.workerId}`;
  }
}

/** The durable consumer of `group`'s `band` (consumer names cannot hold dots). */
export function fireConsumerName(group: string, band: Band): string {
  if (group.includes(".")) {
    return `fire_h_${Buffer.from(group, "utf8").toString("hex")}_${band}`;
  }
  return `fire_g_${group}_${band}`;
}

/**
 * The bands a doorbell body names (`high,low`); every band when the body is
 * empty, unreadable or names anything else.
 */
export function doorbellBands(body: Uint8Array): Band[] {
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(body);
  } catch {
    return [...BANDS];
  }
  const named: Band[] = [];
  for (const part of text.split(",")) {
    const name = part.trim();
    if (!(BANDS as readonly string[]).includes(name)) return [...BANDS];
    named.push(name as Band);
  }
  return named.length > 0 ? named : [...BANDS];
}
