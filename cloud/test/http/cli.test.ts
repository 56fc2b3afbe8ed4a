import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateSigningKeyPair, newId, systemClock } from '@tobira/shared';
import { pgBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { startStripeLocal, stripeClient, type StripeLocal } from '@tobira/stripe-local';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runAdminCli } from '../../src/admin-cli.js';
import { startAdminApi, type AdminApi } from '../../src/cloud.js';
import { authenticate } from '../../src/adapters/db/tokens.js';
import { startCloud } from '../cloud-helpers.js';
import { DAY, T0, openTestDb, testLog, type TestDb } from '../helpers.js';

describe.each(pgBackends())('admin CLI against a listening API on %s', (backend) => {
  let t: TestDb;
  let broker: MqttTestBroker;
  let cloud: Awaited<ReturnType<typeof startCloud>>;
  let api: AdminApi;
  let token: string;
  let local: StripeLocal;
  const SECRET = 'whsec_tobira_cli';
  beforeAll(async () => {
    t = await openTestDb(backend);
    broker = await startMqttBackend('aedes');
    local = await startStripeLocal({ seed: `cli${backend}` });
    cloud = await startCloud(t, broker.url, {
      env: { STRIPE_WEBHOOK_SECRET: SECRET },
      deps: { stripe: stripeClient(local, { maxNetworkRetries: 1, timeout: 5_000 }), billingWorker: false },
    });
    api = await startAdminApi({
      cloud,
      db: cloud.db,
      log: testLog,
      clock: systemClock,
      webhooks: false,
      config: { webhookAllowPrivateNetworks: true },
    });
    local.webhooks.add({ url: `${api.url}/webhooks/stripe`, secret: SECRET });
  });
  afterAll(async () => {
    await api?.close();
    await cloud?.stop();
    await local?.close();
    await broker?.stop();
    await t?.close();
  });

  async function cli(...argv: string[]): Promise<{ code: number; out: string; err: string; json: Record<string, unknown> }> {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runAdminCli(argv, {
      env: { TOBIRA_API: api.url, TOBIRA_TOKEN: token },
      out: (s) => out.push(s),
      err: (s) => err.push(s),
      db: cloud.db,
    });
    const text = (out.join('\n') || err.join('\n')).replace(/^\d{3} /, '');
    let json: Record<string, unknown> = {};
    try {
      json = JSON.parse(text) as Record<string, unknown>;
    } catch {
      // usage text
    }
    return { code, out: out.join('\n'), err: err.join('\n'), json };
  }

  it('bootstraps an admin token, then sets up a site and issues, reads and revokes a key through the API', async () => {
    const boot = await cli('tokens', 'bootstrap', '--name', 'ops');
    expect(boot.code).toBe(0);
    token = boot.json.token as string;
    expect(await authenticate(cloud.db, token, Date.now())).toMatchObject({
      kind: 'ok',
      principal: { role: 'admin', sites: null },
      expiresAt: null,
    });
    const u = newId().slice(-8);
    expect((await cli('sites', 'create', '--id', `s-${u}`, '--name', 'Kyoto')).code).toBe(0);
    const jwkFile = join(tmpdir(), `jwk-${u}.json`);
    await writeFile(jwkFile, JSON.stringify((await generateSigningKeyPair()).publicJwk));
    const gw = await cli('gateways', 'register', '--id', `gw-${u}`, '--site', `s-${u}`, '--jwk-file', jwkFile);
    expect(gw.code).toBe(0);
    expect(gw.json).toMatchObject({ status: 'applied', provisioning: { gatewayId: `gw-${u}` } });
    // the gateway's uplink key: a rotation is requested (202), a second one while it is open exits 1 with its code
    const rot = await cli('gateways', 'rotate-uplink-key', '--id', `gw-${u}`);
    expect(rot.code).toBe(0);
    expect(rot.json).toMatchObject({ status: 'applied', code: 'UPLINK_KEY_ROTATION_REQUESTED', rotation: { status: 'requested' } });
    const again = await cli('gateways', 'rotate-uplink-key', '--id', `gw-${u}`);
    expect(again.code).toBe(1);
    expect(again.json).toMatchObject({ status: 'conflict', code: 'UPLINK_KEY_ROTATION_IN_PROGRESS' });
    expect((await cli('gateways', 'uplink-key-rotations', `gw-${u}`)).json).toMatchObject({ items: [{ status: 'requested' }] });
    expect((await cli('doors', 'create', '--id', `d-${u}`, '--gateway', `gw-${u}`, '--name', 'Front')).code).toBe(0);
    expect((await cli('people', 'create', '--id', `p-${u}`, '--site', `s-${u}`, '--name', 'Hana')).code).toBe(0);
    const issued = await cli(
      'keys',
      'issue',
      '--id',
      `k-${u}`,
      '--person',
      `p-${u}`,
      '--door',
      `d-${u}`,
      '--pin',
      '246810',
      '--from',
      new Date(T0).toISOString(),
      '--until',
      String(T0 + DAY),
      '--cid',
      `cli-${u}`,
    );
    expect(issued.code).toBe(0);
    expect(issued.json).toMatchObject({ status: 'applied', code: 'KEY_ISSUED', cid: `cli-${u}`, delivery: 'pending' });
    expect((await cli('keys', 'get', `k-${u}`)).json).toMatchObject({ key: { id: `k-${u}`, status: 'issuing' } });
    expect(((await cli('keys', 'list', '--person', `p-${u}`)).json.items as unknown[]).length).toBe(1);
    const stale = await cli('keys', 'revoke', `k-${u}`, '--reason', 'credential_lost', '--if-match', '9');
    expect(stale.code).toBe(1);
    expect(stale.json).toMatchObject({ code: 'KEY_STATE_CHANGED' });
    const revoked = await cli('keys', 'revoke', `k-${u}`, '--reason', 'credential_lost', '--if-match', '1');
    expect(revoked.json).toMatchObject({ status: 'applied', code: 'KEY_REVOKE_QUEUED' });
    expect(((await cli('keys', 'history', `k-${u}`)).json.items as unknown[]).length).toBe(2);
    expect((await cli('events', '--site', `s-${u}`, '--from', '2026-01-01T00:00:00Z')).json).toMatchObject({ items: [] });
    expect((await cli('dead-letters', 'list', '--site', `s-${u}`)).json).toMatchObject({ items: [] });
    const wh = await cli(
      'webhooks',
      'create',
      '--site',
      `s-${u}`,
      '--url',
      'http://127.0.0.1:9/hook',
      '--event',
      'alarm',
      '--event',
      'access.event',
    );
    expect(wh.json).toMatchObject({
      status: 'applied',
      webhook: { events: ['alarm', 'access.event'] },
      secret: expect.stringMatching(/^whsec_/),
    });
    expect((await cli('webhooks', 'disable', (wh.json.webhook as { id: string }).id)).json).toMatchObject({ status: 'applied' });
  });

  it('creates a token with a lifetime and rotates it: the new one works, the old one is revoked with --grace-seconds 0', async () => {
    const u = newId().slice(-8);
    const made = await cli('tokens', 'create', '--name', `pms-${u}`, '--role', 'manager', '--site', 'kyoto', '--expires-in-days', '5');
    expect(made.code).toBe(0);
    expect(made.json).toMatchObject({ status: 'applied', role: 'manager', sites: ['kyoto'], expiresAt: expect.any(Number) });
    const oldToken = made.json.token as string;
    const expiresAt = made.json.expiresAt as number;
    expect(expiresAt - Date.now()).toBeGreaterThan(4 * DAY);
    expect(expiresAt - Date.now()).toBeLessThanOrEqual(5 * DAY);
    const rotated = await cli('tokens', 'rotate', made.json.id as string, '--grace-seconds', '0', '--expires-in-days', '30');
    expect(rotated.code).toBe(0);
    expect(rotated.json).toMatchObject({
      status: 'applied',
      name: `pms-${u}`,
      role: 'manager',
      sites: ['kyoto'],
      rotatedFrom: { id: made.json.id, revokedAt: expect.any(Number) },
    });
    expect(await authenticate(cloud.db, rotated.json.token as string, Date.now())).toMatchObject({
      kind: 'ok',
      principal: { role: 'manager', sites: ['kyoto'] },
    });
    expect(await authenticate(cloud.db, oldToken, Date.now())).toEqual({ kind: 'unknown' });
    const again = await cli('tokens', 'rotate', made.json.id as string);
    expect(again.code).toBe(1);
    expect(again.json).toMatchObject({ status: 'refused', code: 'TOKEN_REVOKED' });
    const bad = await cli('tokens', 'rotate', made.json.id as string, '--grace-seconds', 'soon');
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('--grace-seconds');
    expect((await cli('help')).out).toContain('tokens rotate <id>');
  });

  it('issues a one-time key with dated and overnight schedule windows, and signs a mobile token for a mobile key; bad windows and options never reach the API', async () => {
    const u = newId().slice(-8);
    expect((await cli('sites', 'create', '--id', `s-${u}`, '--name', 'Nara')).code).toBe(0);
    const jwkFile = join(tmpdir(), `jwk-${u}.json`);
    await writeFile(jwkFile, JSON.stringify((await generateSigningKeyPair()).publicJwk));
    expect((await cli('gateways', 'register', '--id', `gw-${u}`, '--site', `s-${u}`, '--jwk-file', jwkFile)).code).toBe(0);
    expect((await cli('doors', 'create', '--id', `d-${u}`, '--gateway', `gw-${u}`, '--name', 'Back')).code).toBe(0);
    expect((await cli('people', 'create', '--id', `p-${u}`, '--site', `s-${u}`, '--name', 'Sora')).code).toBe(0);
    const from = String(Date.now() - 60_000);
    const until = String(Date.now() + DAY);
    const base = ['keys', 'issue', '--person', `p-${u}`, '--door', `d-${u}`, '--from', from, '--until', until];
    const issued = await cli(
      ...base,
      '--id',
      `k1-${u}`,
      '--pin',
      '135790',
      '--one-time',
      '--tz',
      'Asia/Tokyo',
      '--window',
      'mon-fri@08:00-20:00',
      '--window',
      'fri-sun,2026-12-24@22:00-06:00',
    );
    expect(issued.code).toBe(0);
    expect(issued.json).toMatchObject({ status: 'applied', code: 'KEY_ISSUED' });
    expect((await cli('keys', 'get', `k1-${u}`)).json).toMatchObject({
      key: {
        oneTime: true,
        schedule: {
          timeZone: 'Asia/Tokyo',
          windows: [
            { days: [1, 2, 3, 4, 5], start: '08:00', end: '20:00' },
            { days: [0, 5, 6], dates: ['2026-12-24'], start: '22:00', end: '06:00' },
          ],
        },
      },
    });
    expect((await cli('keys', 'get', `k1-${u}`)).json).toMatchObject({ key: { staff: false } });
    expect((await cli(...base, '--id', `k4-${u}`, '--card', '0A0B0C0D', '--staff')).code).toBe(0);
    expect((await cli('keys', 'get', `k4-${u}`)).json).toMatchObject({ key: { staff: true, oneTime: false, schedule: null } });
    // a mobile key: a signed token bound to it; --ttl is passed on (the API bounds it)
    expect((await cli(...base, '--id', `k2-${u}`, '--mobile', `phone-${u}-0123456789`)).code).toBe(0);
    const tok = await cli('keys', 'mobile-token', '--id', `k2-${u}`, '--ttl', '120');
    expect(tok.code).toBe(0);
    expect(tok.json).toMatchObject({ status: 'applied', code: 'MOBILE_TOKEN_ISSUED', keyId: `k2-${u}`, gatewayId: `gw-${u}` });
    expect((tok.json.expiresAt as number) - Date.now()).toBeLessThanOrEqual(120_000);
    expect(tok.json.token).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
    // refusals from the API exit 1 with their code
    expect((await cli('keys', 'mobile-token', '--id', `k1-${u}`)).json).toMatchObject({ code: 'KEY_NOT_MOBILE' });
    expect((await cli('keys', 'mobile-token', '--id', `no-such-${u}`)).code).toBe(1);
    const tooShort = await cli('keys', 'mobile-token', '--id', `k2-${u}`, '--ttl', '5');
    expect(tooShort.code).toBe(1);
    const badSchedule = await cli(...base, '--pin', '135791', '--tz', 'Asia/Tokyo', '--window', 'mon@10:00-10:00');
    expect(badSchedule.code).toBe(1);
    expect(badSchedule.out + badSchedule.err).toContain('start equals end');
    expect((await cli(...base, '--pin', '135792', '--tz', 'Mars/Olympus', '--window', 'mon@10:00-11:00')).code).toBe(1);
    // bad usage exits 2 and sends nothing: no key appears
    for (const bad of [
      ['--window', 'mon@10:00-11:00'],
      ['--tz', 'Asia/Tokyo'],
      ['--tz', 'Asia/Tokyo', '--window', 'someday@10:00-11:00'],
      ['--tz', 'Asia/Tokyo', '--window', 'mon 10:00-11:00'],
    ]) {
      const r = await cli(...base, '--id', `k3-${u}`, '--pin', '135793', ...bad);
      expect(r.code).toBe(2);
    }
    expect((await cli('keys', 'get', `k3-${u}`)).json).toMatchObject({ code: 'KEY_NOT_FOUND' });
    expect((await cli('keys', 'mobile-token', '--id', `k2-${u}`, '--ttl', 'soon')).code).toBe(2);
    expect((await cli('keys', 'mobile-token')).code).toBe(2);
    expect((await cli('help')).out).toContain('keys mobile-token --id K');
  });

  it('a refusal exits 1 with the code; bad usage exits 2 with the help', async () => {
    const r = await cli('keys', 'get', 'no-such-key');
    expect(r.code).toBe(1);
    expect(r.json).toMatchObject({ status: 'refused', code: 'KEY_NOT_FOUND' });
    const u = await cli('keys', 'issue', '--person', 'p');
    expect(u.code).toBe(2);
    expect(u.err).toContain('usage:');
  });

  it('books, lists, reads, checks in and out and cancels stays; lists and retries billing dead letters', async () => {
    const u = newId().slice(-8);
    expect((await cli('sites', 'create', '--id', `ss-${u}`, '--name', 'Nara')).code).toBe(0);
    const jwkFile = join(tmpdir(), `jwk-st-${u}.json`);
    await writeFile(jwkFile, JSON.stringify((await generateSigningKeyPair()).publicJwk));
    expect((await cli('gateways', 'register', '--id', `gws-${u}`, '--site', `ss-${u}`, '--jwk-file', jwkFile)).code).toBe(0);
    expect((await cli('doors', 'create', '--id', `ds-${u}`, '--gateway', `gws-${u}`, '--name', 'Room door')).code).toBe(0);
    expect((await cli('people', 'create', '--id', `ps-${u}`, '--site', `ss-${u}`, '--name', 'Guest')).code).toBe(0);
    expect(await cloud.createRoom({ id: `r-${u}`, siteId: `ss-${u}`, name: '101', doors: [`ds-${u}`] })).toMatchObject({
      status: 'applied',
    });
    const bookArgs = (from: string, to: string) => [
      'stays',
      'book',
      '--person',
      `ps-${u}`,
      '--room',
      `r-${u}`,
      '--check-in',
      from,
      '--check-out',
      to,
      '--amount',
      '20000',
      '--currency',
      'jpy',
    ];
    const booked = await cli(...bookArgs('2027-05-01', '2027-05-03'), '--idempotency-key', `bk-${u}`);
    expect(booked.code).toBe(0);
    expect(booked.json).toMatchObject({ status: 'applied', code: 'STAY_BOOKED', stay: { status: 'pending', roomId: `r-${u}` } });
    const stay = booked.json.stay as { id: string };
    expect((await cli(...bookArgs('2027-05-01', '2027-05-03'), '--idempotency-key', `bk-${u}`)).json).toMatchObject({
      status: 'noop',
      stay: { id: stay.id },
    });
    expect((await cli('stays', 'book', '--person', `ps-${u}`)).code).toBe(2);

    const payment = booked.json.payment as { intentId: string };
    await fetch(`${local.url}/_local/pay/${payment.intentId}?card=pm_card_visa`);
    await local.webhooks.idle();
    await cloud.runBilling();
    expect((await cli('stays', 'get', stay.id)).json).toMatchObject({ stay: { status: 'confirmed' } });
    const listed = await cli('stays', 'list', '--site', `ss-${u}`, '--status', 'confirmed');
    expect(listed.json).toMatchObject({ items: [{ id: stay.id }], nextCursor: null });
    expect((await cli('stays', 'payments', stay.id)).json).toMatchObject({ items: [{ status: 'succeeded', refunds: [] }] });

    const early = await cli('stays', 'check-in', stay.id);
    expect(early.code).toBe(1);
    expect(early.json).toMatchObject({ code: 'STAY_NOT_STARTED' });
    cloud.clock.set(Date.UTC(2027, 4, 1, 12));
    expect((await cli('stays', 'check-in', stay.id)).json).toMatchObject({ status: 'applied', stay: { status: 'checked_in' } });
    expect((await cli('stays', 'check-out', stay.id)).json).toMatchObject({ status: 'applied', stay: { status: 'checked_out' } });
    const late = await cli('stays', 'cancel', stay.id, '--reason', 'staff_cancelled');
    expect(late.code).toBe(0);
    expect(late.json).toMatchObject({ status: 'noop', code: 'STAY_ALREADY_ENDED', stay: { status: 'checked_out' } });
    expect((await cli('stays', 'cancel', stay.id)).code).toBe(2);

    const dead = await cli('billing', 'dead-letters', '--kind', 'billing-jobs');
    expect(dead.code).toBe(0);
    expect(dead.json).toMatchObject({ items: [], nextCursor: null });
    const scoped = await cli('billing', 'dead-letters', '--kind', 'webhook-events', '--site', `ss-${u}`);
    expect(scoped.code).toBe(0);
    expect(scoped.json).toMatchObject({ items: [], nextCursor: null });
    const both = await cli('billing', 'dead-letters');
    expect(both.code).toBe(0);
    expect(both.out.match(/"nextCursor"/g)).toHaveLength(2);
    const retry = await cli('billing', 'retry', 'billing-jobs', '12345678');
    expect(retry.code).toBe(1);
    expect(retry.json).toMatchObject({ code: 'DEAD_LETTER_NOT_FOUND' });
    expect((await cli('billing', 'retry', 'billing-jobs')).code).toBe(2);
    expect((await cli('help')).out).toContain('stays check-in <id>');
  });

  it('runs a membership through the API: plan, apply, approve, pay, self-cancel refused with Stripe down (nothing changed), then ending and ended', async () => {
    const u = newId().slice(-8);
    // Stripe signs its webhooks with the wall clock (an earlier test moved the cloud's)
    cloud.clock.set(Date.now());
    expect((await cli('sites', 'create', '--id', `sm-${u}`, '--name', 'Gym')).code).toBe(0);
    const jwkFile = join(tmpdir(), `jwk-sm-${u}.json`);
    await writeFile(jwkFile, JSON.stringify((await generateSigningKeyPair()).publicJwk));
    expect((await cli('gateways', 'register', '--id', `gwm-${u}`, '--site', `sm-${u}`, '--jwk-file', jwkFile)).code).toBe(0);
    expect((await cli('doors', 'create', '--id', `dm-${u}`, '--gateway', `gwm-${u}`, '--name', 'Gym door')).code).toBe(0);
    expect((await cli('people', 'create', '--id', `pm-${u}`, '--site', `sm-${u}`, '--name', 'Member')).code).toBe(0);
    const plan = await cli(
      'plans',
      'create',
      '--site',
      `sm-${u}`,
      '--id',
      `plan-${u}`,
      '--name',
      'Gym',
      '--amount',
      '6000',
      '--currency',
      'jpy',
      '--interval',
      'month',
      '--door',
      `dm-${u}`,
      '--members-only',
      '--quota',
      '12',
      '--grace-seconds',
      '86400',
    );
    expect(plan.json).toMatchObject({ status: 'applied', code: 'PLAN_CREATED', planStatus: 'active', monthlyEntryQuota: 12 });
    const applied = await cli('memberships', 'apply', '--plan', `plan-${u}`, '--person', `pm-${u}`, '--id', `m-${u}`, '--pin', '55119922');
    expect(applied.json).toMatchObject({ status: 'applied', code: 'MEMBERSHIP_APPLIED', membershipStatus: 'applied' });
    expect(JSON.stringify(applied.json)).not.toContain('55119922');
    const approved = await cli('memberships', 'approve', `m-${u}`);
    expect(approved.json).toMatchObject({ status: 'applied', code: 'MEMBERSHIP_APPROVED' });
    const invoice = String(approved.json.firstInvoiceId);
    expect((await fetch(`${local.url}/_local/invoices/${invoice}/pay?card=pm_card_visa`)).status).toBe(200);
    await local.webhooks.idle();
    await cloud.runBilling();
    const active = await cli('memberships', 'get', `m-${u}`);
    expect(active.json).toMatchObject({ membershipStatus: 'active', keyId: `key_m-${u}_1` });
    expect(JSON.stringify(active.json)).not.toMatch(/digest|55119922/);

    local.faults.unavailable = true;
    const down = await cli('memberships', 'self-cancel', `m-${u}`);
    local.faults.unavailable = false;
    expect(down.code).toBe(1);
    expect(down.out + down.err).toMatch(/^503 /);
    expect(down.json).toMatchObject({ status: 'refused', code: 'BILLING_UNAVAILABLE' });
    expect((await cli('memberships', 'get', `m-${u}`)).json).toEqual(active.json);

    const stale = await cli('memberships', 'force-cancel', `m-${u}`, '--note', 'x', '--version', '1');
    expect(stale.json).toMatchObject({ status: 'conflict', code: 'MEMBERSHIP_STATE_CHANGED', membership: { membershipStatus: 'active' } });
    const ending = await cli('memberships', 'self-cancel', `m-${u}`);
    expect(ending.json).toMatchObject({
      status: 'applied',
      code: 'MEMBERSHIP_ENDING',
      membershipStatus: 'ending',
      notices: [{ notice: 'membership_ending' }],
    });
    const sub = String(active.json.subscriptionId);
    expect(local.subscription(sub)).toMatchObject({ cancel_at_period_end: true });
    local.advanceSubscription(sub);
    await local.webhooks.idle();
    await cloud.runBilling();
    expect((await cli('memberships', 'get', `m-${u}`)).json).toMatchObject({ membershipStatus: 'ended', endReason: 'self_cancel' });
    expect((await cli('memberships', 'list', '--site', `sm-${u}`, '--status', 'ended')).json).toMatchObject({
      items: [{ id: `m-${u}` }],
      nextCursor: null,
    });
    expect((await cli('plans', 'retire', `plan-${u}`)).json).toMatchObject({
      status: 'applied',
      code: 'PLAN_RETIRED',
      ended: [],
      pending: [],
    });
    expect((await cli('memberships', 'force-cancel', `m-${u}`)).code).toBe(2);
    expect((await cli('help')).out).toContain('memberships force-cancel <id> --note N');
  });

  it('runs the front desk through the API: walk-in gates with their codes, block/unblock, a paid walk-in, cancel, the quota view', async () => {
    const u = newId().slice(-8);
    cloud.clock.set(Date.now());
    expect((await cli('sites', 'create', '--id', `sw-${u}`, '--name', 'Desk')).code).toBe(0);
    const jwkFile = join(tmpdir(), `jwk-sw-${u}.json`);
    await writeFile(jwkFile, JSON.stringify((await generateSigningKeyPair()).publicJwk));
    expect((await cli('gateways', 'register', '--id', `gww-${u}`, '--site', `sw-${u}`, '--jwk-file', jwkFile)).code).toBe(0);
    expect((await cli('doors', 'create', '--id', `dw-${u}`, '--gateway', `gww-${u}`, '--name', 'Desk door')).code).toBe(0);
    expect((await cli('people', 'create', '--id', `pw-${u}`, '--site', `sw-${u}`, '--name', 'Walker')).code).toBe(0);
    const plan = await cli(
      ...['plans', 'create', '--site', `sw-${u}`, '--id', `pw-plan-${u}`, '--name', 'Day', '--amount', '6000', '--currency', 'jpy'],
      ...['--interval', 'month', '--door', `dw-${u}`, '--quota', '1', '--walk-in-amount', '1200'],
    );
    expect(plan.json).toMatchObject({ code: 'PLAN_CREATED', walkInAmount: 1200, monthlyEntryQuota: 1 });
    const walk = (...extra: string[]) =>
      cli('walk-ins', 'create', '--site', `sw-${u}`, '--plan', `pw-plan-${u}`, '--person', `pw-${u}`, '--pin', '661234', ...extra);

    const off = await walk();
    expect(off.code).toBe(1);
    expect(off.json).toMatchObject({ status: 'refused', code: 'WALK_IN_NOT_ALLOWED' });
    await fetch(`${api.url}/sites/sw-${u}/stay-settings`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ walkInsAllowed: true }),
    });
    expect((await cli('people', 'block', `pw-${u}`, '--site', `sw-${u}`, '--reason', 'fight')).json).toMatchObject({
      code: 'PERSON_BLOCKED',
    });
    expect((await cli('people', 'blocked', '--site', `sw-${u}`)).json).toMatchObject({ items: [{ personId: `pw-${u}`, reason: 'fight' }] });
    expect((await walk()).json).toMatchObject({ code: 'GUEST_BLOCKED' });
    expect((await cli('people', 'unblock', `pw-${u}`, '--site', `sw-${u}`)).json).toMatchObject({ code: 'PERSON_UNBLOCKED' });

    const w = await walk('--id', `wi-${u}`);
    expect(w.json).toMatchObject({ status: 'applied', code: 'WALK_IN_CREATED', walkInStatus: 'pending' });
    expect(JSON.stringify(w.json)).not.toContain('661234');
    expect((await fetch(`${local.url}/_local/pay/${String(w.json.intentId)}?card=pm_card_visa`)).status).toBe(200);
    await local.webhooks.idle();
    await cloud.runBilling();
    expect((await cli('walk-ins', 'get', `wi-${u}`)).json).toMatchObject({ walkInStatus: 'paid', keyId: `key_wi-${u}` });
    expect((await walk()).json).toMatchObject({ code: 'QUOTA_EXHAUSTED' });
    expect((await cli('plans', 'quota', `pw-plan-${u}`, '--person', `pw-${u}`)).json).toMatchObject({ items: [{ used: 1, left: 0 }] });
    expect((await cli('walk-ins', 'cancel', `wi-${u}`, '--reason', 'staff_cancelled')).json).toMatchObject({
      code: 'WALK_IN_CANCELLED',
      quotaReturned: true,
    });
    expect((await cli('plans', 'quota', `pw-plan-${u}`)).json).toMatchObject({ items: [{ used: 0, left: 1 }] });
    expect((await cli('walk-ins', 'list', '--site', `sw-${u}`)).json).toMatchObject({ items: [{ id: `wi-${u}` }] });
    expect((await cli('walk-ins', 'create', '--site', `sw-${u}`)).code).toBe(2);
    expect((await cli('help')).out).toContain('walk-ins create --site S --plan P');
  });
});
