import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { asDoorId, asSiteId, newId } from '@tobira/shared';
import { pgBackends, startMqttBackend, waitFor, type MqttTestBroker } from '@tobira/shared/testing';
import { startStripeLocal, type StripeLocal } from '@tobira/stripe-local';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listPaymentsOfStay, listRefundsOfPayment } from '../src/adapters/db/payments.js';
import { insertRoom, loadStay } from '../src/adapters/db/stays.js';
import { cloudSigningKey } from './cloud-helpers.js';
import { T0, TEST_KEK, deps, openTestDb, seed, type TestDb } from './helpers.js';

/**
 * A real crash between a Stripe call that took effect and the local write
 * that records it: the cloud runs as `npm run cloud` does
 * (cloud/src/main.ts) in a child process with CRASH_MODE=kill, so the crash
 * point SIGKILLs it — no finally, no graceful stop — then a new process is
 * started on the same PostgreSQL database. The local Stripe, in this process,
 * counts what Stripe did: exactly one PaymentIntent and exactly one refund,
 * and the stay converges.
 */
const MAIN = fileURLToPath(new URL('../src/main.ts', import.meta.url));
const CRASH = fileURLToPath(new URL('../src/app/crash.ts', import.meta.url));
const SECRET = `whsec_${randomBytes(18).toString('base64url')}`;

interface Child {
  readonly url: string;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  readonly proc: ChildProcess;
}

const exitOf = (p: ChildProcess) =>
  new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => p.once('exit', (code, signal) => r({ code, signal })));

it('CRASH_MODE=kill: a named crash point SIGKILLs the process that reaches it', async () => {
  const p = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      '-e',
      `import { killAt } from ${JSON.stringify(CRASH)}; killAt(['afterRefundBeforeRecord'])('afterRefundBeforeRecord'); console.log('survived');`,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let out = '';
  p.stdout?.on('data', (b: Buffer) => (out += b.toString()));
  expect(await exitOf(p)).toEqual({ code: null, signal: 'SIGKILL' });
  expect(out).not.toContain('survived');
});

// kill -9 needs a second process on the same database: PostgreSQL only (an in-memory PGlite lives in one process)
describe.each(pgBackends().filter((b) => b === 'postgres'))(
  'a cloud process SIGKILLed between a Stripe call and its local write (%s)',
  (backend) => {
    let t: TestDb;
    let broker: MqttTestBroker;
    let local: StripeLocal;
    let child: Child | undefined;
    let hookUrl: string | undefined;
    let signingJwk: string;
    let roomId: string;
    let personId: string;
    const token = `tbr_${randomBytes(32).toString('base64url')}`;

    /** `npm run cloud` on the test's database, with the local Stripe and its webhooks pointed at this process's admin API. */
    const startChild = async (env: Record<string, string> = {}): Promise<Child> => {
      const proc = spawn(process.execPath, ['--import', 'tsx', MAIN], {
        env: {
          PATH: process.env.PATH ?? '',
          DATABASE_URL: t.databaseUrl ?? '',
          MQTT_URL: broker.url,
          MQTT_CLIENT_ID: `cloud-sigkill-${newId().slice(-10)}`,
          CLOUD_SIGNING_JWK: signingJwk,
          TOBIRA_KEK: TEST_KEK,
          ADMIN_API_PORT: '0',
          TOBIRA_BOOTSTRAP_ADMIN_TOKEN: token,
          STRIPE_SECRET_KEY: local.secretKey,
          STRIPE_WEBHOOK_SECRET: SECRET,
          STRIPE_API_HOST: local.host,
          STRIPE_API_PORT: String(local.port),
          STRIPE_API_PROTOCOL: 'http',
          BILLING_POLL_MS: '200',
          // a lease the killed process held runs out soon, so the next one can claim its job
          BILLING_LEASE_MS: '1000',
          HEARTBEAT_INTERVAL_MS: '3600000',
          LOG_LEVEL: 'info',
          ...env,
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      const exited = exitOf(proc);
      let out = '';
      proc.stderr?.on('data', (b: Buffer) => (out += b.toString()));
      const url = await new Promise<string>((resolve, reject) => {
        proc.stdout?.on('data', (b: Buffer) => {
          out += b.toString();
          const line = out.split('\n').find((l) => l.includes('"cloud started"'));
          if (line) resolve((JSON.parse(line) as { api: string }).api);
        });
        void exited.then((e) => reject(new Error(`cloud exited (${e.code ?? e.signal}) before it started:\n${out}`)));
      });
      if (hookUrl !== undefined) local.webhooks.remove(hookUrl);
      hookUrl = `${url}/webhooks/stripe`;
      local.webhooks.add({ url: hookUrl, secret: SECRET });
      return { url, exited, proc };
    };
    const stop = async (c: Child | undefined) => {
      if (!c || c.proc.exitCode !== null || c.proc.signalCode !== null) return;
      c.proc.kill('SIGTERM');
      await c.exited;
    };
    const call = (c: Child, method: string, path: string, body?: unknown, key = `k-${newId()}`) =>
      fetch(`${c.url}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${token}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          ...(method === 'GET' ? {} : { 'idempotency-key': key }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    const intentsOf = (stayId: string) =>
      local
        .events()
        .filter(
          (e) =>
            e.type === 'payment_intent.created' && (e.data.object as { metadata?: Record<string, string> }).metadata?.subject_id === stayId,
        )
        .map((e) => (e.data.object as { id: string }).id);

    beforeAll(async () => {
      t = await openTestDb(backend);
      broker = await startMqttBackend('aedes');
      local = await startStripeLocal({ seed: `kill${newId().slice(-6)}` });
      signingJwk = JSON.stringify((await cloudSigningKey()).privateJwk);
      const base = deps(t.db);
      const s = await seed(base);
      roomId = `room-${s.u}`;
      personId = s.personId;
      await insertRoom(t.db, { id: roomId, siteId: asSiteId(s.siteId), name: '101', doors: [asDoorId(s.doorA)] }, T0);
    });
    afterAll(async () => {
      await stop(child);
      await local?.close();
      await broker?.stop();
      await t?.close();
    });

    it(
      'killed after the PaymentIntent is created and before it is recorded: the repeated booking gets the same one intent, and it pays',
      { timeout: 120_000 },
      async () => {
        child = await startChild({ CRASH_AT: 'afterIntentCreatedBeforeRecord', CRASH_MODE: 'kill' });
        const booking = { personId, roomId, checkIn: '2027-06-01', checkOut: '2027-06-03', amount: 24_000, currency: 'jpy' };
        const key = `bk-${newId()}`;
        // the process dies mid-request: the client sees the connection drop
        await expect(call(child, 'POST', '/stays', booking, key)).rejects.toThrow();
        expect(await child.exited).toEqual({ code: null, signal: 'SIGKILL' });

        const pending = await t.db.query<{ id: string }>('SELECT id FROM stays WHERE room_id = $1 AND check_in = $2', [
          roomId,
          '2027-06-01',
        ]);
        const stayId = pending.rows[0]?.id ?? '';
        expect(await loadStay(t.db, stayId)).toMatchObject({ status: 'pending' });
        expect((await listPaymentsOfStay(t.db, stayId))[0]).toMatchObject({ intentId: null });
        const [made] = intentsOf(stayId);
        expect(intentsOf(stayId)).toHaveLength(1);

        child = await startChild();
        // the killed request still holds its claim on the key: a repeat is told to retry until the claim runs out (60 s)
        const held = await call(child, 'POST', '/stays', booking, key);
        expect(held.status).toBe(409);
        expect(await held.json()).toMatchObject({ code: 'IDEMPOTENCY_IN_PROGRESS' });
        await t.db.query('UPDATE idempotency_keys SET locked_until = 0 WHERE key = $1', [key]); // as 60 s later
        const again = await call(child, 'POST', '/stays', booking, key);
        // a repeat of a booking that exists: the same stay (200, noop), its intent now recorded
        expect(again.status).toBe(200);
        const view = (await again.json()) as { status: string; stay: { id: string; status: string }; payment: { intentId: string } };
        expect(view).toMatchObject({ status: 'noop', stay: { status: 'pending' } });
        expect(view.stay.id).toBe(stayId);
        expect(view.payment.intentId).toBe(made);
        expect(intentsOf(stayId)).toEqual([made]);

        await fetch(`${local.url}/_local/pay/${made ?? ''}?card=pm_card_visa`);
        await waitFor(async () => (await loadStay(t.db, stayId))?.status === 'confirmed', 'the stay confirmed after the restart');
        expect(intentsOf(stayId)).toHaveLength(1);
      },
    );

    it(
      'killed after the refund is made and before it is recorded: the next process replays the same refund, exactly one',
      { timeout: 120_000 },
      async () => {
        await stop(child);
        child = await startChild({ CRASH_AT: 'afterRefundBeforeRecord', CRASH_MODE: 'kill' });
        const booking = { personId, roomId, checkIn: '2027-07-01', checkOut: '2027-07-03', amount: 30_000, currency: 'jpy' };
        const booked = await call(child, 'POST', '/stays', booking);
        expect(booked.status).toBe(202);
        const { stay, payment } = (await booked.json()) as { stay: { id: string }; payment: { id: string; intentId: string } };
        await fetch(`${local.url}/_local/pay/${payment.intentId}?card=pm_card_visa`);
        await waitFor(async () => (await loadStay(t.db, stay.id))?.status === 'confirmed', 'the stay confirmed');

        // the cancel commits (key revoked, refund row and job with its key); the worker's refund call then kills the process
        await call(child, 'POST', `/stays/${stay.id}/cancel`, { reason: 'staff_cancelled' }).catch(() => null);
        expect(await child.exited).toEqual({ code: null, signal: 'SIGKILL' });
        const refundsAtStripe = () => local.refunds().filter((r) => r.payment_intent === payment.intentId);
        expect(refundsAtStripe()).toHaveLength(1);
        expect(await listRefundsOfPayment(t.db, payment.id)).toEqual([
          expect.objectContaining({ status: 'pending', stripeRefundId: null }),
        ]);
        expect(await loadStay(t.db, stay.id)).toMatchObject({ status: 'cancelled' });

        child = await startChild();
        await waitFor(
          async () => (await listRefundsOfPayment(t.db, payment.id))[0]?.status === 'succeeded',
          'the refund recorded by the next process',
        );
        await waitFor(async () => (await listPaymentsOfStay(t.db, stay.id))[0]?.status === 'refunded', 'the payment refunded');
        expect(refundsAtStripe()).toHaveLength(1);
        expect(await listRefundsOfPayment(t.db, payment.id)).toEqual([
          expect.objectContaining({ status: 'succeeded', amount: 30_000, stripeRefundId: refundsAtStripe()[0]?.id }),
        ]);
      },
    );
  },
);
