import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { SimLock } from '@tobira/firmware-sim';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PIN, provision, runSite, silentLog, type Running } from '../../../gateway/test/harness.js';

/**
 * A lock restarted within the command lifetime, asked again with the same
 * request id: the gateway answers the recorded decision with the same
 * command, and the lock must not execute it a second time. Its replay window
 * is kept where a restart does not lose it (firmware-sim: `replayWindowFile`).
 */
describe.each(mqttBackends())('a lock restarted within the command lifetime (%s)', (backend) => {
  let broker: MqttTestBroker;
  let s: Running;
  const sims: SimLock[] = [];
  beforeEach(async () => {
    broker = await startMqttBackend(backend);
    s = await runSite(broker.url, broker.url, broker.unique);
    await provision(s);
  });
  afterEach(async () => {
    for (const l of sims.splice(0)) await l.stop().catch(() => {});
    await s?.close();
    await broker.stop();
  });

  it('refuses the recorded command of a request it repeats after its restart (COMMAND_REPLAYED), and the bolt stays locked', async () => {
    const requestId = randomUUID();
    // the first id the lock makes is the request id, in both lives: the same request asked again
    const ids = () => {
      let first = true;
      return {
        newId: () => {
          if (!first) return randomUUID();
          first = false;
          return requestId;
        },
      };
    };
    const sim = (): SimLock => {
      const l = new SimLock({
        url: broker.url,
        gatewayId: s.f.gatewayId,
        lockId: 'lock-1',
        secret: s.f.lockSecret,
        clock: s.f.clock,
        timers: 'manual',
        log: silentLog(),
        ids: ids(),
        replayWindowFile: join(s.f.dir, 'lock-1.replay.json'),
      });
      sims.push(l);
      return l;
    };
    const first = sim();
    await first.start();
    const r1 = await first.present({ type: 'pin', value: PIN }, { timeoutMs: 5000 });
    expect(r1.decision?.code).toBe('ALLOWED');
    expect(r1.command?.result).toBe('executed');
    await first.stop();

    const again = sim();
    await again.start();
    const r2 = await again.present({ type: 'pin', value: PIN }, { timeoutMs: 5000 });
    expect(r2.decision).toMatchObject({ requestId, code: 'ALLOWED', commandId: r1.decision?.commandId });
    expect(r2.command).toMatchObject({ result: 'refused', code: 'COMMAND_REPLAYED' });
    expect(again.bolt).toBe('locked');
  });
});
