import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { LookupAddress } from 'node:dns';
import { createServer as createTcpServer, type AddressInfo, type Server } from 'node:net';
import { pgBackends } from '@tobira/shared/testing';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { classifyAddress, checkWebhookUrl, guardedLookup, type AddressClass, type ResolveAll } from '../../src/adapters/webhooks/egress.js';
import { WebhookDispatcher } from '../../src/adapters/webhooks/worker.js';
import { createWebhook } from '../../src/adapters/webhooks/endpoints.js';
import { capturingLogger, testLog } from '../helpers.js';
import { bearer, count, openHarness, type Harness } from './harness.js';

// ---------------------------------------------------------------------------
// The classifier against a plain reference: the IANA special-purpose ranges as
// 32-bit integer intervals (no BlockList), broadcast before the 240/4 it is in.
const REFERENCE: readonly (readonly [string, number, AddressClass])[] = [
  ['255.255.255.255', 32, 'broadcast'],
  ['0.0.0.0', 8, 'unspecified'],
  ['10.0.0.0', 8, 'private'],
  ['100.64.0.0', 10, 'shared (CGNAT)'],
  ['127.0.0.0', 8, 'loopback'],
  ['169.254.0.0', 16, 'link-local'],
  ['172.16.0.0', 12, 'private'],
  ['192.0.0.0', 24, 'reserved'],
  ['192.0.2.0', 24, 'documentation'],
  ['192.88.99.0', 24, 'reserved'],
  ['192.168.0.0', 16, 'private'],
  ['198.18.0.0', 15, 'benchmarking'],
  ['198.51.100.0', 24, 'documentation'],
  ['203.0.113.0', 24, 'documentation'],
  ['224.0.0.0', 4, 'multicast'],
  ['240.0.0.0', 4, 'reserved'],
];
const toInt = (ip: string) => ip.split('.').reduce((n, o) => n * 256 + Number(o), 0);
const toIp = (n: number) => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
function reference(ip: string): AddressClass {
  const n = toInt(ip);
  for (const [start, prefix, cls] of REFERENCE) {
    const lo = toInt(start);
    if (n >= lo && n < lo + 2 ** (32 - prefix)) return cls;
  }
  return 'public';
}
// uniform addresses almost never land in a /24, so also draw the edges of every range and their neighbours
const anyIpv4 = fc.oneof(
  fc.nat(0xffffffff).map(toIp),
  fc
    .record({
      range: fc.constantFrom(...REFERENCE),
      edge: fc.constantFrom('first', 'last', 'before', 'after', 'inside'),
      r: fc.nat(0xffffffff),
    })
    .map(({ range: [start, prefix], edge, r }) => {
      const lo = toInt(start);
      const size = 2 ** (32 - prefix);
      const n = { first: lo, last: lo + size - 1, before: lo - 1, after: lo + size, inside: lo + (r % size) }[edge];
      return toIp(Math.min(Math.max(n, 0), 0xffffffff));
    }),
);

describe('the address classifier', () => {
  it('agrees with a reference table of the special-purpose IPv4 ranges, for any address', () => {
    fc.assert(
      fc.property(anyIpv4, (ip) => {
        expect(classifyAddress(ip)).toBe(reference(ip));
      }),
      { numRuns: 2000 },
    );
  });

  it('judges an IPv4 address inside IPv6 (mapped, NAT64, 6to4) by the IPv4 address, and never calls a compatible form public', () => {
    fc.assert(
      fc.property(anyIpv4, (ip) => {
        const [a, b, c, d] = ip.split('.').map(Number) as [number, number, number, number];
        const hex = `${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
        const cls = reference(ip);
        expect(classifyAddress(`::ffff:${ip}`)).toBe(cls);
        expect(classifyAddress(`::ffff:${hex}`)).toBe(cls);
        expect(classifyAddress(`64:ff9b::${ip}`)).toBe(cls);
        expect(classifyAddress(`2002:${hex}::1`)).toBe(cls);
        if (toInt(ip) > 1) expect(classifyAddress(`::${ip}`)).not.toBe('public');
      }),
      { numRuns: 1000 },
    );
  });

  it.each([
    ['::', 'unspecified'],
    ['::1', 'loopback'],
    ['0:0:0:0:0:0:0:1', 'loopback'],
    ['fe80::1%eth0', 'link-local'],
    ['febf:ffff::1', 'link-local'],
    ['fc00::1', 'private'],
    ['fd12:3456::1', 'private'],
    ['fec0::1', 'private'],
    ['ff02::1', 'multicast'],
    ['2001:db8::1', 'documentation'],
    ['3fff::1', 'documentation'],
    ['2001:2::1', 'benchmarking'],
    ['2001::1', 'reserved'], // Teredo
    ['64:ff9b:1::1', 'reserved'],
    ['100::1', 'reserved'],
    ['5f00::1', 'reserved'], // outside 2000::/3
    ['not-an-address', 'reserved'],
    ['2606:4700:4700::1111', 'public'],
    ['2a00:1450:4001::1', 'public'],
    ['93.184.216.34', 'public'],
  ] as const)('%s is %s', (ip, cls) => {
    expect(classifyAddress(ip)).toBe(cls);
  });
});

describe('the registration check with a given resolver', () => {
  const resolver =
    (...addresses: string[]): ResolveAll =>
    () =>
      Promise.resolve(addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 })));
  const guarded = { allowPrivateNetworks: false };

  it('refuses a host when one of its addresses is internal, naming the class and never the address', async () => {
    const v = await checkWebhookUrl('https://hooks.partner.test/x', guarded, resolver('93.184.216.34', '10.20.30.40'));
    expect(v).toEqual({ ok: false, code: 'WEBHOOK_URL_FORBIDDEN', detail: 'the host resolves to a private address' });
    expect(JSON.stringify(v)).not.toContain('10.20.30.40');
  });

  it('accepts a host whose addresses are all public', async () => {
    const v = await checkWebhookUrl('https://hooks.partner.test/x', guarded, resolver('93.184.216.34', '2606:4700::1'));
    expect(v.ok).toBe(true);
  });

  it('calls a host that does not resolve, or resolves to nothing, unresolvable', async () => {
    const failing: ResolveAll = () => Promise.reject(Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' }));
    expect(await checkWebhookUrl('https://nowhere.test/', guarded, failing)).toMatchObject({ ok: false, code: 'WEBHOOK_URL_UNRESOLVABLE' });
    expect(await checkWebhookUrl('https://nowhere.test/', guarded, resolver())).toMatchObject({
      ok: false,
      code: 'WEBHOOK_URL_UNRESOLVABLE',
    });
  });

  it('with private networks allowed, accepts internal addresses and plain http without resolving, but still refuses other schemes and userinfo', async () => {
    const open = { allowPrivateNetworks: true };
    const never: ResolveAll = () => Promise.reject(new Error('must not resolve'));
    expect((await checkWebhookUrl('http://internal.test:8080/x', open, never)).ok).toBe(true);
    expect((await checkWebhookUrl('http://127.0.0.1:8080/x', open, never)).ok).toBe(true);
    expect(await checkWebhookUrl('gopher://127.0.0.1/', open, never)).toMatchObject({ ok: false, code: 'WEBHOOK_URL_FORBIDDEN' });
    expect(await checkWebhookUrl('https://u:p@127.0.0.1/', open, never)).toMatchObject({ ok: false, code: 'WEBHOOK_URL_FORBIDDEN' });
  });
});

describe('the connection lookup hook', () => {
  const lookupWith = (addresses: string[], all: boolean) =>
    new Promise<{ err: NodeJS.ErrnoException | null; address: string | LookupAddress[] }>((resolve) => {
      const hook = guardedLookup(() => Promise.resolve(addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }))));
      hook('hooks.partner.test', { all }, (err, address) => resolve({ err, address }));
    });

  it('fails the connection with WEBHOOK_ADDRESS_FORBIDDEN when any address is internal', async () => {
    const { err } = await lookupWith(['93.184.216.34', '::ffff:169.254.169.254'], true);
    expect(err).toMatchObject({ code: 'WEBHOOK_ADDRESS_FORBIDDEN', addressClass: 'link-local' });
    expect((await lookupWith(['127.0.0.1'], false)).err).toMatchObject({ code: 'WEBHOOK_ADDRESS_FORBIDDEN', addressClass: 'loopback' });
  });

  it('hands public addresses to the connection in the shape it asked for', async () => {
    expect(await lookupWith(['93.184.216.34', '2606:4700::1'], true)).toEqual({
      err: null,
      address: [
        { address: '93.184.216.34', family: 4 },
        { address: '2606:4700::1', family: 6 },
      ],
    });
    expect(await lookupWith(['93.184.216.34'], false)).toEqual({ err: null, address: '93.184.216.34' });
  });
});

// ---------------------------------------------------------------------------

interface Local {
  readonly url: string;
  readonly port: number;
  /** TCP connections accepted: 0 means not a byte reached it. */
  connections: number;
  requests: number;
  close(): Promise<void>;
}

async function listen(server: Server, track: (l: Local) => void = () => undefined): Promise<Local> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  const local: Local = {
    url: `http://127.0.0.1:${port}/hook`,
    port,
    connections: 0,
    requests: 0,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
  server.on('connection', () => (local.connections += 1));
  track(local);
  return local;
}
async function httpServer(answer: (req: IncomingMessage, res: ServerResponse) => void): Promise<Local> {
  let self: Local | undefined;
  const server = createServer((req, res) => {
    if (self) self.requests += 1;
    req.resume();
    req.on('end', () => answer(req, res));
  });
  return listen(server, (l) => (self = l));
}

describe.each(pgBackends())('webhook SSRF guard on %s', (backend) => {
  let h: Harness;
  const servers: Local[] = [];
  beforeAll(async () => {
    h = await openHarness(backend); // the default config: the guard is on
  });
  afterAll(async () => {
    for (const s of servers) await s.close();
    await h?.close();
  });

  const register = (url: string, token = h.tokens.managerA, siteId = h.siteA) =>
    h.app.inject({ method: 'POST', url: '/webhooks', headers: bearer(token), payload: { siteId, url, events: ['alarm'] } });

  describe('when registering', () => {
    it.each([
      ['http://127.0.0.1/hook', 'the URL points at a loopback address'],
      ['https://localhost/hook', 'the host resolves to a loopback address'],
      ['https://169.254.169.254/latest/meta-data', 'the URL points at a link-local address'],
      ['https://[::1]/hook', 'the URL points at a loopback address'],
      ['https://[::ffff:127.0.0.1]/hook', 'the URL points at a loopback address'],
      ['https://10.1.2.3/hook', 'the URL points at a private address'],
      ['https://192.168.0.10/hook', 'the URL points at a private address'],
      ['https://100.64.0.1/hook', 'the URL points at a shared (CGNAT) address'],
      ['https://0.0.0.0/hook', 'the URL points at an unspecified address'],
      ['https://2130706433/hook', 'the URL points at a loopback address'], // 127.0.0.1 as one number
      ['ftp://x/hook', 'only https URLs are accepted'],
      ['https://user:pw@hooks.partner.test/hook', 'the URL must not carry a user name or password'],
      ['http://93.184.216.34/hook', 'plain http is refused: use https'],
    ])('%s is refused with 422 WEBHOOK_URL_FORBIDDEN and nothing is written', async (url, detail) => {
      const before = await count(h, 'webhook_endpoints');
      const res = await register(url);
      expect([res.statusCode, res.json()]).toEqual([422, { status: 'refused', code: 'WEBHOOK_URL_FORBIDDEN', detail }]);
      expect(await count(h, 'webhook_endpoints')).toBe(before);
    });

    it('a host that does not resolve is refused with 422 WEBHOOK_URL_UNRESOLVABLE and nothing is written', async () => {
      const before = await count(h, 'webhook_endpoints');
      const res = await register('https://no-such-host.invalid/hook'); // .invalid never resolves (RFC 6761)
      expect([res.statusCode, res.json()]).toEqual([
        422,
        { status: 'refused', code: 'WEBHOOK_URL_UNRESOLVABLE', detail: 'the host does not resolve' },
      ]);
      expect(await count(h, 'webhook_endpoints')).toBe(before);
    });

    it('an https URL at a public address is accepted', async () => {
      const before = await count(h, 'webhook_endpoints');
      const res = await register('https://93.184.216.34/hook');
      expect(res.statusCode).toBe(201);
      expect(res.json().webhook).toMatchObject({ url: 'https://93.184.216.34/hook', siteId: h.siteA });
      expect(await count(h, 'webhook_endpoints')).toBe(before + 1);
      await h.app.inject({ method: 'POST', url: `/webhooks/${res.json().webhook.id}/disable`, headers: bearer(h.tokens.managerA) });
    });

    it('an allowed URL for a site the token cannot see is still 404, and an internal one 422 whatever the site', async () => {
      const res = await register('https://93.184.216.34/hook', h.tokens.managerB, h.siteA);
      expect([res.statusCode, res.json().code]).toEqual([404, 'SITE_NOT_FOUND']);
      for (const siteId of [h.siteA, 'no-such-site']) {
        const r = await register('https://169.254.169.254/latest', h.tokens.managerB, siteId);
        expect([r.statusCode, r.json().code]).toEqual([422, 'WEBHOOK_URL_FORBIDDEN']);
      }
    });

    it('a refusal under an Idempotency-Key stores nothing: the same key with an allowed URL then registers', async () => {
      const headers = { ...bearer(h.tokens.managerA), 'idempotency-key': `ssrf-${h.siteA}` };
      const bad = await h.app.inject({
        method: 'POST',
        url: '/webhooks',
        headers,
        payload: { siteId: h.siteA, url: 'https://10.0.0.1/x', events: ['alarm'] },
      });
      expect(bad.statusCode).toBe(422);
      const good = await h.app.inject({
        method: 'POST',
        url: '/webhooks',
        headers,
        payload: { siteId: h.siteA, url: 'https://93.184.216.34/x', events: ['alarm'] },
      });
      expect(good.statusCode).toBe(201);
      await h.app.inject({ method: 'POST', url: `/webhooks/${good.json().webhook.id}/disable`, headers: bearer(h.tokens.managerA) });
    });
  });

  describe('when delivering', () => {
    const enqueue = async (endpointId: string, cid: string) => {
      const now = h.cloud.clock.now();
      const r = await h.cloud.db.query<{ id: string }>(
        `INSERT INTO webhook_outbox (endpoint_id, type, body, cid, next_attempt_at, created_at) VALUES ($1, 'alarm', $2::jsonb, $3, $4, $4) RETURNING id`,
        [endpointId, JSON.stringify({ kind: 'tamper' }), cid, now],
      );
      return String(r.rows[0]?.id);
    };
    const outbox = async (id: string) =>
      (
        await h.cloud.db.query<{ status: string; next_attempt_at: string }>(
          'SELECT status, next_attempt_at FROM webhook_outbox WHERE id = $1',
          [id],
        )
      ).rows[0];
    const deliveries = async (endpointId: string) =>
      (await h.app.inject({ method: 'GET', url: `/webhooks/${endpointId}/deliveries`, headers: bearer(h.tokens.auditorA) })).json()
        .items as {
        attempt: number;
        statusCode: number | null;
        error: string | null;
        code: string | null;
        eventStatus: string;
      }[];
    // the row is written directly: registration would refuse it (that is the point: DNS may change after registration)
    const endpoint = async (url: string) =>
      (await createWebhook(h.cloud.db, h.cloud.secrets, { siteId: h.siteA, url, events: ['alarm'] }, h.cloud.clock.now())).id;
    const dispatcher = (allowPrivateNetworks: boolean, log = testLog, resolve?: ResolveAll) =>
      new WebhookDispatcher(
        { db: h.cloud.db, secrets: h.cloud.secrets, clock: h.cloud.clock, log, random: () => 1, ...(resolve ? { resolve } : {}) },
        { allowPrivateNetworks, baseMs: 1000 },
      );

    it('an endpoint at an internal address gets no connection; the attempt is logged WEBHOOK_ADDRESS_FORBIDDEN with the cid and backs off', async () => {
      const local = await httpServer((_, res) => res.writeHead(204).end());
      servers.push(local);
      const id = await endpoint(local.url);
      const row = await enqueue(id, 'cid-ssrf-literal');
      const { log, lines } = await capturingLogger();
      expect(await dispatcher(false, log).runOnce()).toBe(1);
      expect([local.connections, local.requests]).toEqual([0, 0]);
      expect(await deliveries(id)).toEqual([
        expect.objectContaining({
          attempt: 1,
          statusCode: null,
          code: 'WEBHOOK_ADDRESS_FORBIDDEN',
          error: 'WEBHOOK_ADDRESS_FORBIDDEN: the URL points at a loopback address',
          eventStatus: 'pending',
        }),
      ]);
      expect(Number((await outbox(row))?.next_attempt_at)).toBeGreaterThan(h.cloud.clock.now()); // backing off
      expect(lines).toContainEqual(
        expect.objectContaining({ cid: 'cid-ssrf-literal', code: 'WEBHOOK_ADDRESS_FORBIDDEN', msg: 'webhook delivery failed' }),
      );
      // the same row with the guard off does reach the server: the refusal above was the guard's
      await h.cloud.db.query('UPDATE webhook_outbox SET next_attempt_at = $2 WHERE id = $1', [row, h.cloud.clock.now()]);
      expect(await dispatcher(true).runOnce()).toBe(1);
      expect(local.requests).toBe(1);
      expect((await outbox(row))?.status).toBe('delivered');
    });

    it('a host name is checked at connection time: one that resolves to loopback gets no connection', async () => {
      let self: Local | undefined;
      const tcp = await listen(
        createTcpServer((s) => s.destroy()),
        (l) => (self = l),
      );
      servers.push(tcp);
      const id = await endpoint(`https://localhost:${tcp.port}/hook`);
      await enqueue(id, 'cid-ssrf-localhost');
      expect(await dispatcher(false).runOnce()).toBe(1);
      expect(self?.connections).toBe(0);
      expect((await deliveries(id))[0]).toMatchObject({
        statusCode: null,
        code: 'WEBHOOK_ADDRESS_FORBIDDEN',
        error: 'WEBHOOK_ADDRESS_FORBIDDEN: the host resolves to a loopback address',
      });
    });

    it('a host re-pointed at an internal address after registration (DNS rebinding) is refused at delivery', async () => {
      let self: Local | undefined;
      const tcp = await listen(
        createTcpServer((s) => s.destroy()),
        (l) => (self = l),
      );
      servers.push(tcp);
      let answer = '93.184.216.34';
      const dns: ResolveAll = () => Promise.resolve([{ address: answer, family: 4 }]);
      const url = `https://hooks.partner.test:${tcp.port}/hook`;
      expect((await checkWebhookUrl(url, { allowPrivateNetworks: false }, dns)).ok).toBe(true); // what registration saw
      const id = await endpoint(url);
      await enqueue(id, 'cid-ssrf-rebind');
      answer = '127.0.0.1';
      expect(await dispatcher(false, testLog, dns).runOnce()).toBe(1);
      expect(self?.connections).toBe(0);
      expect((await deliveries(id))[0]).toMatchObject({
        statusCode: null,
        error: 'WEBHOOK_ADDRESS_FORBIDDEN: the host resolves to a loopback address',
      });
    });

    it('a redirect is not followed: the attempt fails with the 3xx and the redirect target receives nothing', async () => {
      const target = await httpServer((_, res) => res.writeHead(204).end());
      const redirecting = await httpServer((_, res) => res.writeHead(302, { location: target.url }).end());
      servers.push(target, redirecting);
      const id = await endpoint(redirecting.url);
      const row = await enqueue(id, 'cid-redirect');
      expect(await dispatcher(true).runOnce()).toBe(1);
      expect([redirecting.requests, target.connections]).toEqual([1, 0]);
      expect(await deliveries(id)).toEqual([
        expect.objectContaining({
          attempt: 1,
          statusCode: 302,
          code: 'WEBHOOK_REDIRECT_NOT_FOLLOWED',
          error: 'HTTP 302: redirects are not followed',
          eventStatus: 'pending',
        }),
      ]);
      expect(Number((await outbox(row))?.next_attempt_at)).toBeGreaterThan(h.cloud.clock.now());
    });

    it('every attempt carries a stable code: WEBHOOK_HTTP_STATUS, WEBHOOK_TIMEOUT, WEBHOOK_CONNECTION_FAILED; null when delivered', async () => {
      const failing = await httpServer((_, res) => res.writeHead(503).end());
      const silent = await httpServer(() => {}); // takes the request and never answers
      const ok = await httpServer((_, res) => res.writeHead(204).end());
      servers.push(failing, silent, ok);
      const closed = await httpServer(() => {});
      await closed.close(); // a port nobody listens on any more
      const cases: [string, string | null][] = [
        [failing.url, 'WEBHOOK_HTTP_STATUS'],
        [silent.url, 'WEBHOOK_TIMEOUT'],
        [closed.url, 'WEBHOOK_CONNECTION_FAILED'],
        [ok.url, null],
      ];
      const short = new WebhookDispatcher(
        { db: h.cloud.db, secrets: h.cloud.secrets, clock: h.cloud.clock, log: testLog, random: () => 1 },
        { allowPrivateNetworks: true, baseMs: 1000, timeoutMs: 300 },
      );
      for (const [url, code] of cases) {
        const id = await endpoint(url);
        await enqueue(id, `cid-code-${code ?? 'ok'}`);
        expect(await short.runOnce()).toBe(1);
        expect((await deliveries(id))[0]).toMatchObject({ attempt: 1, code });
      }
    });
  });
});
