import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import type { CrashPoint } from '../src/app/context.js';
import { FakeCloud, FakeLock, PIN, siteFixture, waitFor, type SiteFixture } from './harness.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The daemon as a child process (`node --import tsx gateway/src/main.ts`), killed and restarted. */
class Daemon {
  #child: ChildProcess | null = null;
  #exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }> | null = null;
  output = '';
  constructor(private readonly configFile: string) {}

  /** Starts it; resolves when it logged ready (or, with a crash point hit at startup, when it died). */
  start(crashAt?: CrashPoint): Promise<'ready' | 'died'> {
    const env = { ...process.env, LOG_LEVEL: 'info', TOBIRA_CRASH_AT: crashAt ?? '' };
    const child = spawn(process.execPath, ['--import', 'tsx', 'gateway/src/main.ts', '--config', this.configFile], {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.#child = child;
    this.#exit = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    return new Promise((resolve) => {
      const onData = (b: Buffer) => {
        this.output += b.toString();
        if (this.output.includes('tobira-gateway ready')) resolve('ready');
      };
      child.stdout!.on('data', onData);
      child.stderr!.on('data', (b: Buffer) => (this.output += b.toString()));
      void this.#exit!.then(() => resolve('died'));
    });
  }
  exited() {
    return this.#exit!;
  }
  async term(): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    this.#child!.kill('SIGTERM');
    return this.exited();
  }
  kill(): void {
    this.#child?.kill('SIGKILL');
  }
}

function readDb(f: SiteFixture) {
  const db = new Database(f.config.sqlitePath, { readonly: true });
  try {
    return {
      access: db.prepare('SELECT request_id, code, command_id FROM access_log ORDER BY id').all() as {
        request_id: string;
        code: string;
        command_id: string | null;
      }[],
      keys: db.prepare('SELECT key_id, version, status FROM keys').all(),
      inbox: db.prepare('SELECT type, seq, status FROM inbox ORDER BY id').all(),
    };
  } finally {
    db.close();
  }
}

describe.each(mqttBackends())('kill -9 at each crash point and restart (broker: %s)', (backend) => {
  let broker: MqttTestBroker;
  let f: SiteFixture;
  let cloud: FakeCloud;
  let lock: FakeLock;
  let daemon: Daemon;

  beforeAll(async () => {
    broker = await startMqttBackend(backend);
    f = await siteFixture(broker.url, broker.url, broker.unique, { http: { host: '127.0.0.1', port: 0 }, offlineGraceSeconds: 3600 });
    f.clock.set(Date.now()); // the child runs on the system clock
    cloud = new FakeCloud(f);
    await cloud.connect(broker.url);
    lock = new FakeLock(f.gatewayId, 'lock-1', systemClock);
    await lock.connect(broker.url);
    daemon = new Daemon(f.configFile);
  });
  afterAll(async () => {
    if (process.env.TOBIRA_DEBUG_DAEMON) (await import('node:fs')).writeFileSync(process.env.TOBIRA_DEBUG_DAEMON, daemon.output);
    daemon.kill();
    await lock.close();
    await cloud.close();
    await broker.stop();
    rmSync(f.dir, { recursive: true, force: true });
  });

  const farFuture = { validFrom: 0, validUntil: Date.now() + 365 * 86_400_000 };

  /** The gateway asks for a resync once its downlink subscription stands. */
  async function started(crashAt?: CrashPoint) {
    const before = cloud.ofType('resync.request').length;
    const r = await daemon.start(crashAt);
    if (r === 'ready') await waitFor(() => cloud.ofType('resync.request').length > before, 'startup resync request');
    return r;
  }

  it('runs, grants, opens, and drains on SIGTERM', async () => {
    expect(await started()).toBe('ready');
    await cloud.grant(farFuture);
    const hb = await cloud.heartbeat();
    await waitFor(() => cloud.ofType('ack').find((a) => a.body.ackOf === hb.jti), 'heartbeat ack');
    expect((await lock.present(PIN, 'req-ok')).code).toBe('ALLOWED');
    await waitFor(() => cloud.presence === true, 'presence online');
    expect(await daemon.term()).toEqual({ code: 0, signal: null });
    await waitFor(() => cloud.presence === false, 'presence offline after a clean stop');
    await waitFor(() => cloud.ofType('access.event').find((e) => e.body.requestId === 'req-ok'), 'event up before exit');
  });

  it('afterDecisionBeforePublish: the decision is recorded once; a retried request gets it without a second event', async () => {
    const answered = () =>
      readDb(f).inbox.filter(
        (r) => (r as { type: string; status: string }).type === 'resync.answer' && (r as { status: string }).status === 'processed',
      ).length;
    const before = answered();
    expect(await started('afterDecisionBeforePublish')).toBe('ready');
    // the restarted process's time is proven by the answer to its own startup request
    await waitFor(() => answered() > before || undefined, 'startup resync answer applied');
    await waitFor(() => cloud.presence === true, 'presence online');
    await lock.publish('request', { requestId: 'req-crash', credential: { type: 'pin', value: PIN }, at: Date.now() });
    expect((await daemon.exited()).signal).toBe('SIGKILL');
    await waitFor(() => cloud.presence === false, 'last will: offline after kill -9');
    expect(lock.decisions.get('req-crash')).toBeUndefined();
    expect(readDb(f).access.filter((a) => a.request_id === 'req-crash')).toHaveLength(1);
  });

  it('afterInboxInsertBeforeApply: a revoke stored but not applied is applied after restart', async () => {
    cloud.answerResync = false; // the crash point is the first inbox insert: let it be the revoke's
    expect(await started('afterInboxInsertBeforeApply')).toBe('ready');
    await cloud.revoke('key-1', 2);
    expect((await daemon.exited()).signal).toBe('SIGKILL');
    cloud.answerResync = true;
    expect(readDb(f).inbox.at(-1)).toEqual({ type: 'key.revoke', seq: 2, status: 'pending' });
  });

  it('afterApplyBeforeAck: the pending revoke is applied at startup, then the daemon dies before sending the ack', async () => {
    // the startup apply may run just after the ready line (the site PKI is loaded first): either way it dies there
    expect(['died', 'ready']).toContain(await daemon.start('afterApplyBeforeAck'));
    expect((await daemon.exited()).signal).toBe('SIGKILL');
    expect(readDb(f).keys).toEqual([{ key_id: 'key-1', version: 2, status: 'revoked' }]);
    expect(cloud.ofType('ack').find((a) => a.body.ackSeq === 2)).toBeUndefined();
  });

  it('after restart: no lost revoke, the ack goes up, and no audit event is lost or doubled', async () => {
    expect(await started()).toBe('ready');
    const ack = await waitFor(() => cloud.ofType('ack').find((a) => a.body.ackSeq === 2), 'revoke ack');
    expect(ack.body).toMatchObject({ result: 'applied', code: 'KEY_REVOKE_CONFIRMED', keyId: 'key-1', keyVersion: 2 });
    // The lock retries the request whose answer was lost: its recorded ALLOWED no longer holds (the key
    // was revoked meanwhile), so the retry is refused and the unlock is not sent again; no new event.
    const retried = await lock.present(PIN, 'req-crash');
    expect(retried).toMatchObject({ allowed: false, code: 'KEY_REVOKED', commandId: null });
    expect((await lock.present(PIN, 'req-after')).code).toBe('KEY_REVOKED');
    await waitFor(() => cloud.ofType('access.event').find((e) => e.body.requestId === 'req-after'), 'last event up');
    expect(await daemon.term()).toEqual({ code: 0, signal: null });

    const db = readDb(f);
    expect(db.access.map((a) => a.request_id)).toEqual(['req-ok', 'req-crash', 'req-after']);
    expect(db.access[1]!.command_id).not.toBeNull();
    // The cloud deduplicates by jti: count distinct events per request.
    const byRequest = new Map<string, Set<string>>();
    for (const e of cloud.ofType('access.event'))
      byRequest.set(e.body.requestId, (byRequest.get(e.body.requestId) ?? new Set()).add(e.body.eventId));
    expect([...byRequest.entries()].map(([r, s]) => [r, s.size])).toEqual([
      ['req-ok', 1],
      ['req-crash', 1],
      ['req-after', 1],
    ]);
    // Revoke applied once; its redelivery by the broker was a duplicate.
    expect(db.inbox.filter((r) => (r as { type: string }).type === 'key.revoke')).toHaveLength(1);
  });
});
