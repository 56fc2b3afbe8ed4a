import { request, type IncomingMessage } from 'node:http';
import { startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { T0 } from './fixtures.js';
import { PIN, provision, runSite, STAFF_TOKEN, waitFor, type Running } from './harness.js';
import { makeAccounts, STAFF, SUPERVISOR } from './ui-browser.js';

/**
 * GET /staff/events against a running gateway (real HTTP on a port, real
 * SQLite file, embedded broker, fake lock and cloud): what a page listening
 * is told, who may listen, and when a stream ends.
 */

interface Frame {
  id: string | null;
  event: string;
  data: unknown;
}

/**
 * A server-sent events reader on its own connection (node:http, no pooled
 * keep-alive socket left behind): the frames so far, and whether the server
 * ended the stream.
 */
async function listen(url: string, headers: Record<string, string>) {
  const frames: Frame[] = [];
  let ended = false;
  let buf = '';
  let body = '';
  const req = request(url, { headers: { accept: 'text/event-stream', ...headers }, agent: false });
  const res = await new Promise<IncomingMessage>((resolve, reject) => {
    req.on('response', resolve);
    req.on('error', reject);
    req.end();
  });
  res.setEncoding('utf8');
  const sse = String(res.headers['content-type']).startsWith('text/event-stream');
  res.on('data', (chunk: string) => {
    if (!sse) {
      body += chunk;
      return;
    }
    buf += chunk;
    let cut: number;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      const f: Frame = { id: null, event: 'message', data: null };
      let data: string | null = null;
      for (const line of block.split('\n')) {
        if (line.startsWith('id: ')) f.id = line.slice(4);
        else if (line.startsWith('event: ')) f.event = line.slice(7);
        else if (line.startsWith('data: ')) data = line.slice(6);
      }
      if (data !== null) {
        f.data = JSON.parse(data) as unknown;
        frames.push(f);
      }
    }
  });
  res.on('close', () => (ended = true));
  res.on('error', () => (ended = true));
  const done = new Promise<void>((r) => res.on('end', r));
  return {
    status: res.statusCode ?? 0,
    contentType: String(res.headers['content-type']),
    frames,
    get ended() {
      return ended;
    },
    async json(): Promise<unknown> {
      await done;
      return JSON.parse(body) as unknown;
    },
    close: () => req.destroy(),
  };
}

describe('the live feed (GET /staff/events)', () => {
  let broker: MqttTestBroker;
  let s: Running;
  const open: { close(): void }[] = [];

  beforeEach(async () => {
    broker = await startMqttBackend('aedes');
    s = await runSite(broker.url, broker.url, broker.unique);
    await makeAccounts(s);
  });
  afterEach(async () => {
    for (const o of open.splice(0)) o.close();
    await s.close();
    await broker.stop();
  });

  const signIn = async (who: { username: string; password: string }) => {
    const r = await fetch(`${s.gw.httpUrl!}/staff/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: who.username, password: who.password }),
    });
    expect(r.status).toBe(200);
    return {
      cookie: (r.headers.get('set-cookie') ?? '').split(';')[0]!,
      csrf: ((await r.json()) as { csrfToken: string }).csrfToken,
    };
  };
  const stream = async (headers: Record<string, string>) => {
    const l = await listen(`${s.gw.httpUrl!}/staff/events`, headers);
    open.push(l);
    return l;
  };
  const ofType = (frames: Frame[], type: string) => frames.filter((f) => f.event === type);

  it('refuses a caller without a session or token (401) and sends nothing', async () => {
    const l = await stream({});
    expect(l.status).toBe(401);
    expect(await l.json()).toEqual({ code: 'UNAUTHORIZED' });
  });

  it('tells a signed-in page of lock state, access decisions, alarms and the lease running out, as they happen', async () => {
    await provision(s);
    const { cookie } = await signIn(STAFF);
    const l = await stream({ cookie });
    expect(l.status).toBe(200);
    expect(l.contentType).toMatch(/^text\/event-stream/);
    await waitFor(() => s.gw.live.streamCount === 1, 'stream attached');

    await s.lock.publish('presence', { online: true }, true);
    await s.lock.publish('state', { lockId: 'lock-1', bolt: 'locked', door: 'closed', battery: 90, at: T0, lastCommandId: null });
    await waitFor(() => ofType(l.frames, 'lock').length >= 2, 'lock notices');
    expect(ofType(l.frames, 'lock')[0]!.data).toEqual({ type: 'lock', lockId: 'lock-1' });

    expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
    expect((await s.lock.present('000000')).code).toBe('UNKNOWN_CREDENTIAL');
    await waitFor(() => ofType(l.frames, 'access').length === 2, 'two access notices');
    expect(ofType(l.frames, 'access').map((f) => f.data)).toEqual([
      { type: 'access', lockId: 'lock-1', allowed: true, code: 'ALLOWED' },
      { type: 'access', lockId: 'lock-1', allowed: false, code: 'UNKNOWN_CREDENTIAL' },
    ]);
    // no credential, digest or key material travels in a notice
    expect(JSON.stringify(l.frames)).not.toContain(PIN);
    expect(JSON.stringify(l.frames)).not.toContain(s.f.digest(PIN));

    await s.lock.publish('event', { eventId: crypto.randomUUID(), lockId: 'lock-1', at: T0, kind: 'forced_open' });
    await waitFor(() => ofType(l.frames, 'alarm').length === 1, 'alarm notice');

    // nothing arrives when the lease runs out: the gateway notices the status change by itself
    s.f.clock.advance(300_001);
    const st = await waitFor(() => ofType(l.frames, 'status').find((f) => (f.data as { failClosed: boolean }).failClosed), 'status');
    expect(st.data).toMatchObject({ type: 'status', failClosed: true, failClosedReason: 'LEASE_EXPIRED' });

    // ids increase: a reconnect can name the last one it saw
    const ids = l.frames.map((f) => Number(f.id));
    expect([...ids].sort((a, b) => a - b)).toEqual(ids);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('replays what a reconnecting page missed after its Last-Event-ID, and tells it to resync when it cannot', async () => {
    const { cookie } = await signIn(STAFF);
    const first = await stream({ cookie });
    await waitFor(() => s.gw.live.streamCount === 1, 'stream attached');
    await s.lock.publish('presence', { online: true }, true);
    await waitFor(() => first.frames.length === 1, 'one notice');
    const seen = first.frames[0]!.id!;
    first.close();
    await waitFor(() => s.gw.live.streamCount === 0, 'stream detached');

    await s.lock.publish('presence', { online: false }, true);
    await waitFor(() => s.gw.store.lock('lock-1')?.online === false, 'lock offline');
    const again = await stream({ cookie, 'last-event-id': seen });
    await waitFor(() => again.frames.length === 1, 'the missed notice');
    expect(again.frames[0]!.data).toEqual({ type: 'lock', lockId: 'lock-1' });
    expect(Number(again.frames[0]!.id)).toBeGreaterThan(Number(seen));

    const stranger = await stream({ cookie, 'last-event-id': '12' });
    await waitFor(() => stranger.frames.length === 1, 'resync');
    expect(stranger.frames[0]!.event).toBe('resync');
  });

  it('ends the stream when the session signs out, and when a supervisor disables the account', async () => {
    const a = await signIn(STAFF);
    const l = await stream({ cookie: a.cookie });
    await waitFor(() => s.gw.live.streamCount === 1, 'stream attached');
    const out = await fetch(`${s.gw.httpUrl!}/staff/session`, { method: 'DELETE', headers: { cookie: a.cookie, 'x-csrf-token': a.csrf } });
    expect(out.status).toBe(200);
    await waitFor(() => l.ended, 'stream ended at sign-out');
    expect(s.gw.live.streamCount).toBe(0);

    const b = await signIn(STAFF);
    const l2 = await stream({ cookie: b.cookie });
    await waitFor(() => s.gw.live.streamCount === 1, 'stream attached');
    const ken = s.gw.accounts.list().find((x) => x.username === STAFF.username)!;
    const aiko = s.gw.accounts.list().find((x) => x.username === SUPERVISOR.username)!;
    expect(s.gw.accounts.setDisabled({ ...aiko, via: 'session' }, ken.accountId, true, 'test').status).toBe('applied');
    await waitFor(() => l2.ended, 'stream ended at disable');
    // and a notice after that reaches nobody
    await s.lock.publish('presence', { online: true }, true);
    await waitFor(() => s.gw.store.lock('lock-1')?.online === true, 'lock online');
    expect(l2.frames).toEqual([]);
  });

  it('does not keep its session alive: the stream ends when the session idles out while only the stream is open', async () => {
    const { cookie } = await signIn(STAFF);
    const l = await stream({ cookie });
    await waitFor(() => s.gw.live.streamCount === 1, 'stream attached');
    // the default idle timeout is 30 minutes; the open stream is no activity
    s.f.clock.advance(30 * 60 * 1000 + 1);
    await waitFor(() => l.ended, 'stream ended at the idle timeout');
    const r = await fetch(`${s.gw.httpUrl!}/staff/status`, { headers: { cookie } });
    expect(r.status).toBe(401);
  });

  it('caps open streams per session (429 TOO_MANY_STREAMS), another session still gets one, and a closed one frees its place', async () => {
    const { cookie } = await signIn(STAFF);
    const four = await Promise.all([0, 1, 2, 3].map(() => stream({ cookie })));
    for (const l of four) expect(l.status).toBe(200);
    const fifth = await stream({ cookie });
    expect(fifth.status).toBe(429);
    expect(await fifth.json()).toEqual({ code: 'TOO_MANY_STREAMS' });
    const other = await signIn(SUPERVISOR);
    expect((await stream({ cookie: other.cookie })).status).toBe(200);
    // the API token is one caller for the cap
    expect((await stream({ authorization: `Bearer ${STAFF_TOKEN}` })).status).toBe(200);
    four[0]!.close();
    await waitFor(() => s.gw.live.streamCount === 5, 'one stream closed');
    expect((await stream({ cookie })).status).toBe(200);
  });

  it('ends every stream when the gateway stops, so stopping does not wait on them', async () => {
    const { cookie } = await signIn(STAFF);
    const l = await stream({ cookie });
    await waitFor(() => s.gw.live.streamCount === 1, 'stream attached');
    await s.gw.stop();
    await waitFor(() => l.ended, 'stream ended at stop');
  });
});
