import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';

/**
 * The run's history (JSON lines): every operation, observation and fault.
 * `t` is the runner's monotonic clock (ms since the run started); `node` and
 * `nodeAt` say whose clock `nodeAt` is (a gateway's wall clock may be wrong).
 */
export interface Entry {
  /** line number in the history */
  readonly i: number;
  /** the runner's monotonic time, ms since start */
  readonly t: number;
  /** who: runner, workload, injector, cloud, gw-…, fleet-…, collect */
  readonly who: string;
  /** what: issue, revoke, present, fault, heartbeat, key-status, access-log, audit, … */
  readonly what: string;
  /** the runner's wall clock (ms since the epoch; the runner's clock is never stepped) */
  readonly wall: number;
  readonly [k: string]: unknown;
}

export class History {
  readonly #file: string;
  readonly #t0 = performance.now();
  #n = 0;
  readonly entries: Entry[] = [];

  constructor(file: string) {
    this.#file = file;
    writeFileSync(file, '');
  }

  now(): number {
    return Math.round((performance.now() - this.#t0) * 10) / 10;
  }

  add(who: string, what: string, data: Record<string, unknown> = {}, t = this.now()): Entry {
    const e: Entry = { i: ++this.#n, t, wall: Date.now(), who, what, ...data };
    this.entries.push(e);
    appendFileSync(this.#file, `${JSON.stringify(e)}\n`);
    return e;
  }
}

export function readHistory(file: string): Entry[] {
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l): Entry => JSON.parse(l) as Entry);
}
