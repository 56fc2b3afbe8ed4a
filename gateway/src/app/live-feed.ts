import type { Logger } from '@tobira/shared';

/**
 * What the staff page is told as it happens (GET /staff/events, server-sent
 * events): a change notice, never a credential or a personal detail beyond
 * what the staff API shows anyway. The page answers a notice by fetching
 * what changed through the ordinary staff API, so a notice it misses (a drop,
 * a replay window passed) costs a refresh, never a wrong screen.
 *
 * - `access`: a door decision was committed (a key, or a remote unlock).
 * - `lock`: a lock's state or presence changed.
 * - `alarm`: an alarm was raised or acknowledged.
 * - `status`: the site's lease / fail-closed state, mode or links changed.
 */
export type LiveEvent =
  | { readonly type: 'access'; readonly lockId: string; readonly allowed: boolean; readonly code: string }
  | { readonly type: 'lock'; readonly lockId: string }
  | { readonly type: 'alarm'; readonly lockId: string | null }
  | {
      readonly type: 'status';
      readonly failClosed: boolean;
      readonly failClosedReason: string | null;
      readonly mode: string;
      readonly cloudConnected: boolean;
      readonly siteConnected: boolean;
      readonly locksOnline: number;
    };

export interface Numbered {
  readonly id: number;
  readonly event: LiveEvent;
}

/** An open stream: it is handed numbered events, and can be ended from here (stop, a test cutting it). */
export interface LiveStream {
  send(e: Numbered): void;
  end(): void;
}

/** The status fields whose change is pushed as a `status` event. */
export type StatusSummary = Omit<Extract<LiveEvent, { type: 'status' }>, 'type'>;

/**
 * The gateway's in-memory live feed: numbered events, the last `replay` of
 * them kept so a stream that reconnects with Last-Event-ID gets what it
 * missed (older than that, or from before a restart: it is told to resync),
 * and the open streams. Delivery is at most once per stream and best effort:
 * the page's resync fetch on every (re)connect makes it whole. Nothing here
 * is persisted; the audit is the access log and staff_actions.
 */
export class LiveFeed {
  readonly #streams = new Set<LiveStream>();
  readonly #recent: Numbered[] = [];
  /** Starts at a random point so an id from before a restart is not mistaken for one of ours. */
  #next: number;
  #last: StatusSummary | null = null;

  constructor(
    private readonly log: Logger,
    private readonly replay = 200,
    start = Math.floor(Math.random() * 1e9) * 1000,
  ) {
    this.#next = start;
  }

  get streamCount(): number {
    return this.#streams.size;
  }

  publish(event: LiveEvent): void {
    const n: Numbered = { id: ++this.#next, event };
    this.#recent.push(n);
    if (this.#recent.length > this.replay) this.#recent.shift();
    for (const s of this.#streams) {
      try {
        s.send(n);
      } catch (e) {
        this.log.warn({ err: String(e) }, 'live event not written to a stream: it is ended');
        this.#drop(s);
      }
    }
  }

  /** The status now (set by the daemon); unset: no `status` events. */
  sampleStatus: (() => StatusSummary) | null = null;

  /**
   * Publishes `status` when what the page shows of it changed since the last
   * look (the lease runs out with no message arriving: called every second).
   * Looks only while a stream is open; the first stream takes the baseline.
   */
  tick(): void {
    if (this.#streams.size === 0 || this.sampleStatus === null) {
      this.#last = null;
      return;
    }
    const s = this.sampleStatus();
    const prev = this.#last;
    this.#last = s;
    if (prev === null) return;
    if (
      prev.failClosed !== s.failClosed ||
      prev.failClosedReason !== s.failClosedReason ||
      prev.mode !== s.mode ||
      prev.cloudConnected !== s.cloudConnected ||
      prev.siteConnected !== s.siteConnected ||
      prev.locksOnline !== s.locksOnline
    )
      this.publish({ type: 'status', ...s });
  }

  /**
   * Opens a stream. With `lastEventId`: the events after it, if they are all
   * still kept (`replayed`); else `resync` (the page fetches everything).
   */
  attach(stream: LiveStream, lastEventId: number | null): { missed: readonly Numbered[]; resync: boolean } {
    // the status this stream's page is about to fetch is the baseline a change is measured from
    if (this.#streams.size === 0 && this.sampleStatus !== null) this.#last = this.sampleStatus();
    this.#streams.add(stream);
    if (lastEventId === null) return { missed: [], resync: false };
    const oldest = this.#recent[0]?.id ?? this.#next + 1;
    if (lastEventId > this.#next || lastEventId < oldest - 1) return { missed: [], resync: true };
    return { missed: this.#recent.filter((n) => n.id > lastEventId), resync: false };
  }

  detach(stream: LiveStream): void {
    this.#streams.delete(stream);
  }

  /** Ends every open stream (the daemon stopping; a test cutting the connections). Pages reconnect by themselves. */
  endAll(): void {
    for (const s of [...this.#streams]) this.#drop(s);
  }

  #drop(s: LiveStream): void {
    this.#streams.delete(s);
    try {
      s.end();
    } catch {
      // already gone
    }
  }
}
