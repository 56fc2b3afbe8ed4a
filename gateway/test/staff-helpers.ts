import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { pino, type Logger } from 'pino';
import { getAlarm, staffLists } from '../src/adapters/sqlite/staff-queries.js';
import { newCorrelationId, newId } from '@tobira/shared';
import type { StoredAccessEvent, GatewayStore } from '../src/adapters/sqlite/store.js';
import { buildApp, type StaffStatus } from '../src/http/app.js';
import { createMetrics } from '../src/metrics.js';
import { T0 } from './fixtures.js';

/** A logger whose JSON lines are kept, to check what a request logged. */
export function capturingLog(): { log: Logger; lines: () => Record<string, unknown>[]; raw: () => string } {
  let buf = '';
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      buf += chunk.toString();
      cb();
    },
  });
  return {
    log: pino({ level: 'debug' }, sink),
    raw: () => buf,
    lines: () =>
      buf
        .split('\n')
        .filter((l) => l.trim() !== '')
        .map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

/** The gateway's HTTP app over a store alone (no brokers): the staff lists read the real SQLite file. */
export function staffAppOver(
  store: GatewayStore,
  opts: {
    staffToken?: string | undefined;
    now?: () => number;
    log?: Logger;
    status?: () => StaffStatus;
    authFailures?: { max: number; windowSeconds: number };
  } = {},
): FastifyInstance {
  return buildApp({
    registry: createMetrics().registry,
    staffToken: opts.staffToken,
    ...(opts.authFailures ? { authFailures: opts.authFailures } : {}),
    log: opts.log ?? pino({ level: 'silent' }),
    setMode: () => {
      throw new Error('not in this test');
    },
    ackAlarm: (alarmId, by) => {
      const result = store.ackAlarm(alarmId, by, (opts.now ?? (() => 0))());
      const alarm = getAlarm(store.db, alarmId);
      return result === 'not_found' || alarm === null ? { status: 'refused', code: 'ALARM_NOT_FOUND' } : { status: result, alarm };
    },
    health: () => {
      throw new Error('not in this test');
    },
    staff: {
      ...staffLists(store.db, opts.now ?? (() => 0)),
      status:
        opts.status ??
        (() => {
          throw new Error('not in this test');
        }),
    },
  });
}

export interface ListPage<T> {
  items: T[];
  nextCursor: string | null;
}

/** Follows `nextCursor` from the first page to the last; fails if a page answers anything but 200. */
export async function walk<T>(
  app: FastifyInstance,
  token: string,
  path: string,
  query: Record<string, string> = {},
  maxPages = 10_000,
): Promise<{ items: T[]; pages: number }> {
  const items: T[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const q: URLSearchParams = new URLSearchParams({ ...query, ...(cursor === null ? {} : { cursor }) });
    const r: Awaited<ReturnType<FastifyInstance['inject']>> = await app.inject({
      method: 'GET',
      url: `${path}?${q.toString()}`,
      headers: { authorization: `Bearer ${token}` },
    });
    if (r.statusCode !== 200) throw new Error(`${path} answered ${r.statusCode}: ${r.body}`);
    const p: ListPage<T> = r.json();
    items.push(...p.items);
    cursor = p.nextCursor;
    if (++pages > maxPages) throw new Error('pagination does not end');
  } while (cursor !== null);
  return { items, pages };
}

/** What a test may set on an access-log row: plain strings where the row has branded ids and codes. */
export type AccessRowInput = {
  [K in keyof StoredAccessEvent]?: StoredAccessEvent[K] extends string
    ? string
    : StoredAccessEvent[K] extends string | null
      ? string | null
      : StoredAccessEvent[K];
};

/** An access-log row with defaults (a denied unknown PIN at lock-1 at T0). */
export function accessRow(over: AccessRowInput = {}): StoredAccessEvent {
  // Unchecked on purpose: tests store rows no decision would produce (markup in a code or a lock id) to test the readers.
  return {
    eventId: newId(),
    lockId: 'lock-1',
    requestId: `req-${newId()}`,
    doorId: 'door-1',
    at: T0,
    allowed: false,
    code: 'UNKNOWN_CREDENTIAL',
    keyId: null,
    keyVersion: null,
    personId: null,
    credentialType: 'pin',
    commandId: null,
    commandExpiresAt: null,
    holdMs: null,
    cid: newCorrelationId(),
    ...over,
  } as StoredAccessEvent;
}
