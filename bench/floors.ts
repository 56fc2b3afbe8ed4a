import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { connectMqtt, waitConnected } from '@tobira/shared';
import Database from 'better-sqlite3';
import pg from 'pg';
import { percentiles, round, type Percentiles } from './results.js';

/**
 * The floors: what the hardware and the engines allow with none of our code
 * in the way. Our figures are read as ratios to these, measured in the same
 * run, because absolute times on a shared machine drift.
 */

/** Bare mqtt.js QoS 1 request/reply through the broker: one request in flight, no-delay both ends. */
export async function rawMqttRtt(url: string, requests: number): Promise<Percentiles> {
  const asker = connectMqtt(url, { clientId: 'bench-raw-asker', reconnectPeriod: 0 });
  const answerer = connectMqtt(url, { clientId: 'bench-raw-answerer', reconnectPeriod: 0 });
  await Promise.all([waitConnected(asker), waitConnected(answerer)]);
  await answerer.subscribeAsync('bench/raw/req', { qos: 1 });
  await asker.subscribeAsync('bench/raw/rep', { qos: 1 });
  // the callback swallows the error of a reply still in flight when the run ends
  answerer.on('message', (_t, payload) => answerer.publish('bench/raw/rep', payload, { qos: 1 }, () => {}));
  let waiting: (() => void) | null = null;
  asker.on('message', () => waiting?.());
  const samples: number[] = [];
  const warmup = Math.min(200, requests / 5);
  for (let i = 0; i < warmup + requests; i++) {
    const t0 = performance.now();
    const back = new Promise<void>((r) => (waiting = r));
    await asker.publishAsync('bench/raw/req', JSON.stringify({ i, at: Date.now() }), { qos: 1 });
    await back;
    if (i >= warmup) samples.push(performance.now() - t0);
  }
  await Promise.all([asker.endAsync(true), answerer.endAsync(true)]);
  return percentiles(samples);
}

/**
 * The bare CAS-update + outbox-insert transaction (the cloud's write shape) at
 * `connections` clients for `seconds`, in a scratch schema dropped after.
 * Each client updates its own rows, so no CAS conflicts: this is the engine's
 * commit rate, not contention.
 */
export async function rawPgCasOutbox(databaseUrl: string, connections: number, seconds: number): Promise<number> {
  const schema = `bench_${process.pid}_${Date.now()}`;
  const admin = new pg.Client({ connectionString: databaseUrl });
  await admin.connect();
  await admin.query(`CREATE SCHEMA ${schema}`);
  try {
    await admin.query(`CREATE TABLE ${schema}.item (id int PRIMARY KEY, version int NOT NULL, state text NOT NULL)`);
    await admin.query(
      `CREATE TABLE ${schema}.outbox (seq bigserial PRIMARY KEY, item_id int NOT NULL, body jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`,
    );
    const rowsPerClient = 64;
    await admin.query(`INSERT INTO ${schema}.item SELECT g, 1, 'active' FROM generate_series(0, $1) g`, [connections * rowsPerClient]);
    const clients = await Promise.all(
      Array.from({ length: connections }, async () => {
        const c = new pg.Client({ connectionString: databaseUrl });
        await c.connect();
        return c;
      }),
    );
    let done = 0;
    const until = performance.now() + seconds * 1000;
    await Promise.all(
      clients.map(async (c, ci) => {
        const versions = new Array<number>(rowsPerClient).fill(1);
        for (let i = 0; performance.now() < until; i++) {
          const slot = i % rowsPerClient;
          const id = ci * rowsPerClient + slot;
          await c.query('BEGIN');
          const r = await c.query(
            `UPDATE ${schema}.item SET version = version + 1, state = $3 WHERE id = $1 AND version = $2 RETURNING version`,
            [id, versions[slot], i % 2 === 0 ? 'active' : 'suspended'],
          );
          if (r.rowCount !== 1) throw new Error('CAS conflict in the raw bench: rows are per client');
          await c.query(`INSERT INTO ${schema}.outbox (item_id, body) VALUES ($1, $2)`, [
            id,
            JSON.stringify({ id, version: versions[slot]! + 1 }),
          ]);
          await c.query('COMMIT');
          versions[slot]! += 1;
          done++;
        }
      }),
    );
    await Promise.all(clients.map((c) => c.end()));
    return Math.round(done / seconds);
  } finally {
    await admin.query(`DROP SCHEMA ${schema} CASCADE`);
    await admin.end();
  }
}

/** A bare `synchronous=FULL` transaction (WAL, one small insert) on a file in the temp folder, for `seconds`. */
export function rawSqliteFull(seconds: number): number {
  const dir = mkdtempSync(join(tmpdir(), 'tobira-bench-sqlite-'));
  try {
    const db = new Database(join(dir, 'raw.sqlite'));
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    db.exec('CREATE TABLE t (id INTEGER PRIMARY KEY, at INTEGER NOT NULL, body TEXT NOT NULL)');
    const insert = db.prepare('INSERT INTO t (at, body) VALUES (?, ?)');
    const tx = db.transaction((i: number) => insert.run(i, 'x'.repeat(200)));
    let n = 0;
    const t0 = performance.now();
    while (performance.now() - t0 < seconds * 1000) tx.immediate(n++);
    const elapsed = (performance.now() - t0) / 1000;
    db.close();
    return round(n / elapsed, 0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
