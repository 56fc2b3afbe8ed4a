import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runSite, type Running } from './harness.js';

/**
 * The HTTP server's connection bounds against a flood of idle sockets
 * (http/connections.ts): a running gateway on a real port, sockets opened
 * from several loopback addresses (127.0.0.x are all loopback on Linux).
 */

/** A socket from `from` that sends nothing; resolves once connected, with a promise of its close. */
function idle(port: number, from: string): Promise<{ socket: Socket; closed: Promise<number>; data: () => string }> {
  return new Promise((resolve, reject) => {
    let text = '';
    const socket = connect({ host: '127.0.0.1', port, localAddress: from });
    const opened = Date.now();
    const closed = new Promise<number>((done) => socket.once('close', () => done(Date.now() - opened)));
    socket.on('data', (c: Buffer) => (text += c.toString('utf8')));
    socket.on('error', () => undefined);
    socket.once('connect', () => resolve({ socket, closed, data: () => text }));
    socket.once('error', reject);
  });
}

function healthz(base: string, from: string): Promise<number> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request({ host: u.hostname, port: u.port, path: '/healthz', agent: false, localAddress: from }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('HTTP connection bounds of a running gateway', () => {
  let broker: MqttTestBroker;
  let s: Running | undefined;
  const sockets: Socket[] = [];

  beforeEach(async () => {
    broker = await startMqttBackend('aedes');
  });
  afterEach(async () => {
    for (const x of sockets.splice(0)) x.destroy();
    await s?.close();
    s = undefined;
    await broker.stop();
  });

  const start = async (connections: Record<string, number>) => {
    s = await runSite(broker.url, broker.url, broker.unique, {
      overrides: { http: { host: '127.0.0.1', port: 0, connections } },
    });
    return s;
  };
  const port = () => Number(new URL(s!.gw.httpUrl!).port);
  const refused = async (code: string) => {
    const m = await s!.gw.metrics.registry.getSingleMetric('tobira_gateway_http_connections_refused_total')?.get();
    return m?.values.find((v) => v.labels.code === code)?.value ?? 0;
  };

  it('closes idle sockets past the per-address cap at once, counted, while another address still gets /healthz', async () => {
    await start({ perAddress: 8 });
    const flood = await Promise.all(Array.from({ length: 20 }, () => idle(port(), '127.0.0.30')));
    sockets.push(...flood.map((f) => f.socket));
    const results = await Promise.all(
      flood.map((f) => Promise.race([f.closed, new Promise<null>((r) => setTimeout(() => r(null), 1000))])),
    );
    // the first eight stay open (idle), the twelve past the cap are closed at once, without an answer
    expect(results.filter((r) => r === null)).toHaveLength(8);
    const closed = flood.filter((_, i) => results[i] !== null);
    expect(closed).toHaveLength(12);
    expect(closed.every((f) => f.data() === '')).toBe(true);
    expect(await refused('HTTP_CONNECTIONS_PER_ADDRESS')).toBe(12);
    // another address is answered; so is the flooding one's ninth, once one of its eight is gone
    expect([200, 503]).toContain(await healthz(s!.gw.httpUrl!, '127.0.0.31'));
    flood[results.indexOf(null)]!.socket.destroy();
    await new Promise((r) => setTimeout(r, 50));
    expect([200, 503]).toContain(await healthz(s!.gw.httpUrl!, '127.0.0.30'));
  });

  it('caps connections in all (server.maxConnections): one past it from any address is dropped, counted', async () => {
    await start({ perAddress: 64, max: 6 });
    const held = await Promise.all(Array.from({ length: 6 }, (_, i) => idle(port(), `127.0.0.${40 + (i % 3)}`)));
    sockets.push(...held.map((f) => f.socket));
    await new Promise((r) => setTimeout(r, 50));
    const extra = await idle(port(), '127.0.0.50');
    sockets.push(extra.socket);
    expect(await Promise.race([extra.closed, new Promise<null>((r) => setTimeout(() => r(null), 1000))])).not.toBeNull();
    expect(await refused('HTTP_CONNECTIONS_MAX')).toBeGreaterThanOrEqual(1);
    for (const f of held) f.socket.destroy();
    await new Promise((r) => setTimeout(r, 50));
    expect([200, 503]).toContain(await healthz(s!.gw.httpUrl!, '127.0.0.50'));
  });

  it('answers a socket that sends no request head 408 and closes it after headersTimeoutSeconds, not a minute later', async () => {
    await start({ headersTimeoutSeconds: 1, requestTimeoutSeconds: 1 });
    const a = await idle(port(), '127.0.0.60');
    sockets.push(a.socket);
    const ms = await Promise.race([a.closed, new Promise<number>((r) => setTimeout(() => r(-1), 5000))]);
    expect(ms).toBeGreaterThan(900);
    expect(ms).toBeLessThan(3500);
    expect(a.data()).toMatch(/^HTTP\/1\.1 408/);
  });
});
