import { rmSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { startEmbeddedBroker, type EmbeddedBroker } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { createGateway, type Gateway } from '../src/gateway.js';
import { FakeCloud, FakeLock, PIN, lockClockOf, silentLog, siteFixture, waitFor } from './harness.js';

/**
 * The cloud broker goes away. It is an embedded broker here because stopping
 * it is the point; the site broker is each backend in turn.
 */
describe.each(mqttBackends())('when the cloud broker is unreachable (site broker: %s)', (backend) => {
  let siteBroker: MqttTestBroker;
  let cloudBroker: EmbeddedBroker | null = null;
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
    await cloudBroker?.stop().catch(() => {});
    await siteBroker.stop();
  });

  it('keeps valid keys working until the lease runs out, then fails closed; when the broker is back the outbox drains in order and the lease renews after resync', async () => {
    siteBroker = await startMqttBackend(backend);
    cloudBroker = await startEmbeddedBroker();
    const port = cloudBroker.port;
    const f = await siteFixture(cloudBroker.url, siteBroker.url, siteBroker.unique);
    let cloud = new FakeCloud(f);
    await cloud.connect(cloudBroker.url);
    const gw = createGateway(f.config, { clock: f.clock, log: silentLog(), tickMs: 50 });
    await gw.start();
    const lock = new FakeLock(f.gatewayId, 'lock-1', lockClockOf(gw));
    await lock.connect(siteBroker.url);
    cleanups.push(async () => {
      await lock.close();
      await cloud.close();
      await gw.stop({ force: true });
      rmSync(f.dir, { recursive: true, force: true });
    });
    await waitFor(() => gw.cloudConnected && gw.siteConnected && gw.timeProven, 'connected, startup resync answered');
    await cloud.grant();
    await cloud.heartbeat();
    await waitFor(() => gw.store.settings().leaseExpiresAt !== null, 'lease');
    expect((await lock.present(PIN)).code).toBe('ALLOWED');
    await waitFor(() => gw.store.outboxDepth() === 0, 'drained before the outage');

    // The cloud broker dies.
    await cloud.close();
    await cloudBroker.stop();
    cloudBroker = null;
    await waitFor(() => !gw.cloudConnected, 'cloud link down');

    f.clock.advance(200_000);
    expect((await lock.present(PIN)).code).toBe('ALLOWED'); // inside the grace
    f.clock.advance(100_000);
    expect((await lock.present(PIN)).code).toBe('CLOUD_STALE'); // lease over: fail closed
    expect((await lock.present('000000')).code).toBe('UNKNOWN_CREDENTIAL');
    expect(gw.store.outboxDepth()).toBe(3);

    // The broker comes back on the same address.
    cloudBroker = await startEmbeddedBroker({ port });
    cloud = new FakeCloud(f);
    cloud.seq = 1;
    await cloud.connect(cloudBroker.url);
    await waitFor(() => gw.cloudConnected, 'cloud link back', 15_000);
    await waitFor(() => gw.store.outboxDepth() === 0, 'outbox drained');
    const events = await waitFor(
      () => (cloud.ofType('access.event').length === 3 ? cloud.ofType('access.event') : null),
      'all 3 events up',
    );
    expect(events.map((e) => e.body.code)).toEqual(['ALLOWED', 'CLOUD_STALE', 'UNKNOWN_CREDENTIAL']);
    const seqs = events.map((e) => e.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    await waitFor(() => cloud.ofType('resync.request')[0], 'resync request after reconnect');

    // The cloud answers: nothing missing, and a heartbeat renews the lease.
    await cloud.heartbeat(1);
    await waitFor(() => gw.store.settings().leaseExpiresAt! > f.clock.now(), 'lease renewed');
    expect((await lock.present(PIN)).code).toBe('ALLOWED');
  });

  it('refuses non-essential status rows when the outbox is full, but never an access event', async () => {
    siteBroker = await startMqttBackend(backend);
    // A cloud broker that never answers: nothing drains.
    const f = await siteFixture('mqtt://127.0.0.1:1', siteBroker.url, siteBroker.unique, { outboxMaxRows: 2 });
    const gw: Gateway = createGateway(f.config, { clock: f.clock, log: silentLog(), tickMs: 50 });
    await gw.start();
    const lock = new FakeLock(f.gatewayId, 'lock-1', lockClockOf(gw));
    await lock.connect(siteBroker.url);
    cleanups.push(async () => {
      await lock.close();
      await gw.stop({ force: true });
      rmSync(f.dir, { recursive: true, force: true });
    });
    await waitFor(() => gw.siteConnected, 'site link');
    expect(gw.enqueueStatus()).toBe(true);
    for (let i = 0; i < 3; i++) expect((await lock.present(PIN)).code).toBe('UNKNOWN_CREDENTIAL');
    expect(gw.enqueueStatus()).toBe(false);
    expect(gw.store.outboxDepth()).toBe(4);
    expect(gw.store.db.prepare("SELECT count(*) AS n FROM outbox WHERE type = 'access.event'").get()).toEqual({ n: 3 });
    expect(await gw.metrics.registry.getSingleMetricAsString('tobira_gateway_outbox_refused_total')).toContain('type="gateway.status"} 1');
  });
});
