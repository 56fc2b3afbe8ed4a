import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ManualClock, generateSigningKeyPair, newCorrelationId, newId } from '@tobira/shared';
import { startMqttBackend, type PgBackendName } from '@tobira/shared/testing';
import { startStripeLocal, stripeClient, type StripeClientOptions, type StripeLocal } from '@tobira/stripe-local';
import type { FastifyInstance } from 'fastify';
import type Stripe from 'stripe';
import { expect } from 'vitest';
import type { Db } from '../src/adapters/db/db.js';
import { createApiToken } from '../src/adapters/db/tokens.js';
import { storeWebhookEvent } from '../src/adapters/db/webhook-events.js';
import { verifyWebhook } from '../src/adapters/stripe/webhook.js';
import type { CloudDeps } from '../src/cloud.js';
import { buildApp } from '../src/http/app.js';
import type { ApiConfig } from '../src/http/context.js';
import { startCloud } from './cloud-helpers.js';
import { T0, openTestDb, testLog, type TestDb } from './helpers.js';

/**
 * What the stay tests share: the receiving end of stripe-local's webhooks
 * for the use-case tests, and the whole stack over HTTP (a cloud with the
 * real SDK against its own local Stripe, the admin app listening so the
 * local Stripe can deliver its signed webhooks, two sites, a gateway with
 * doors at the first, a guest and tokens).
 */

/** The receiving end of stripe-local's webhooks: verify on the raw body and store, as the route does. */
export async function startInbox(
  getDb: () => Db,
  stripe: () => Stripe,
  now: () => number,
  secret: string,
): Promise<{ url: string; close(): Promise<void> }> {
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const v = verifyWebhook(stripe(), Buffer.concat(chunks), String(req.headers['stripe-signature'] ?? ''), secret, Date.now());
      if (v.status !== 'verified') {
        res.statusCode = 400;
        res.end();
        return;
      }
      storeWebhookEvent(getDb(), {
        eventId: v.event.eventId,
        type: v.event.type,
        objectId: v.event.objectId,
        payload: v.event.event,
        cid: newCorrelationId(),
        now: now(),
      }).then(
        () => res.end(),
        () => {
          res.statusCode = 500;
          res.end();
        },
      );
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  const close = () =>
    new Promise<void>((r) => {
      server.close(() => r());
      // a keep-alive connection of the local Stripe's webhook sender would hold close() open until it idles out
      server.closeAllConnections();
    });
  return { url: `http://127.0.0.1:${port}/webhooks/stripe`, close };
}

export interface StaysApi {
  readonly t: TestDb;
  readonly local: StripeLocal;
  readonly stripe: Stripe;
  readonly cloud: Awaited<ReturnType<typeof startCloud>>;
  readonly app: FastifyInstance;
  /** A fresh suffix of this run's ids. */
  readonly u: string;
  readonly siteId: string;
  /** A second site, for scoping. */
  readonly otherSiteId: string;
  readonly gatewayId: string;
  /** Doors at `siteId`, behind `gatewayId`. */
  readonly doors: readonly string[];
  readonly personId: string;
  /** Tokens: admin, and a manager of the other site only. */
  readonly admin: string;
  readonly managerOther: string;
  close(): Promise<void>;
}

/**
 * The stay routes' stack on one backend. `tag` names the local Stripe's ids and the sites
 * (`site-<tag>-…`, `site-<tag>o-…`); the billing worker does not run (tests drive `cloud.runBilling()`)
 * unless `deps` say otherwise.
 */
export async function openStaysApi(
  backend: PgBackendName,
  opts: {
    tag: string;
    secret: string;
    doors?: number;
    deps?: Partial<CloudDeps>;
    /** The local Stripe runs on the cloud's manual clock: its signatures stay fresh when a test moves time on. */
    sharedClock?: boolean;
    stripeOptions?: StripeClientOptions;
    api?: Partial<ApiConfig>;
    /** More of the cloud's environment (the notification channel, ...). */
    env?: Record<string, string>;
  },
): Promise<StaysApi> {
  const t = await openTestDb(backend);
  const parts: (() => Promise<unknown>)[] = [() => t.close()];
  const close = async () => {
    for (const p of parts.reverse()) await p().catch(() => {});
  };
  try {
    const broker = await startMqttBackend('aedes');
    parts.push(() => broker.stop());
    const clock = opts.sharedClock === true ? new ManualClock(T0) : undefined;
    const local = await startStripeLocal({ seed: `${opts.tag}${backend}`, ...(clock ? { clock } : {}) });
    parts.push(() => local.close());
    const stripe = stripeClient(local, opts.stripeOptions ?? { maxNetworkRetries: 1, timeout: 5_000 });
    const cloud = await startCloud(t, broker.url, {
      ...(clock ? { clock } : {}),
      env: { STRIPE_WEBHOOK_SECRET: opts.secret, ...opts.env },
      deps: { stripe, billingWorker: false, ...opts.deps },
    });
    parts.push(() => cloud.stop());
    const app = await buildApp({ cloud, db: cloud.db, log: testLog, clock: cloud.clock, ...(opts.api ? { config: opts.api } : {}) });
    parts.push(() => app.close());
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    local.webhooks.add({ url: `${url}/webhooks/stripe`, secret: opts.secret });
    const u = newId().slice(-8);
    const siteId = `site-${opts.tag}-${u}`;
    const otherSiteId = `site-${opts.tag}o-${u}`;
    for (const id of [siteId, otherSiteId]) expect((await cloud.createSite({ id, name: id })).status).toBe('applied');
    const admin = (await createApiToken(cloud.db, { name: 'admin', role: 'admin' }, T0)).token;
    const managerOther = (await createApiToken(cloud.db, { name: 'mo', role: 'manager', sites: [otherSiteId] }, T0)).token;
    const pair = await generateSigningKeyPair();
    const gatewayId = `gw-${u}`;
    expect((await cloud.registerGateway({ gatewayId, siteId, publicJwk: pair.publicJwk })).status).toBe('applied');
    const doors = Array.from({ length: opts.doors ?? 1 }, (_, i) => `door-${String.fromCharCode(97 + i)}-${u}`);
    for (const id of doors) expect((await cloud.createDoor({ id, gatewayId, name: id })).status).toBe('applied');
    const personId = `guest-${u}`;
    expect((await cloud.createPerson({ id: personId, name: 'Guest' })).status).toBe('applied');
    return { t, local, stripe, cloud, app, u, siteId, otherSiteId, gatewayId, doors, personId, admin, managerOther, close };
  } catch (e) {
    await close();
    throw e;
  }
}
