/**
 * A lock fleet in a child process of the chaos runner (the firmware-sim
 * Fleet API, as `npm run sim` uses it). Config: env CHAOS_FLEET (JSON
 * `{url, gatewayId, locks, secrets}`). Commands on stdin, one JSON per line:
 * `{"op":"present","id":"…","lockId":"L1","pin":"123456"}`, `{"op":"privacy","id":"…","lockId":"L1","on":true}`. Out on stdout,
 * one JSON per line: `{"ev":"ready"}`, `{"ev":"result","id":…,"result":…}`,
 * and `{"ev":"command","lockId":…,"commandId":…,"result":"executed"|"refused","code":…,"bolt":…}`
 * for every command a lock handled (the lock-side record of unlocks).
 */
import { createInterface } from 'node:readline';
import { createLogger } from '@tobira/shared';
import { Fleet } from '@tobira/firmware-sim';
import { z } from 'zod';

const Config = z.object({
  url: z.string(),
  gatewayId: z.string(),
  locks: z.array(z.string()),
  secrets: z.record(z.string(), z.string()),
  /** each lock's replay window across a kill of this process, as real firmware keeps it */
  replayDir: z.string().optional(),
});
const Command = z.discriminatedUnion('op', [
  z.object({ op: z.literal('present'), id: z.string(), lockId: z.string(), pin: z.string() }),
  // the guest inside turns privacy on or off; answered once the lock published it (bounded), with the lock's own state
  z.object({ op: z.literal('privacy'), id: z.string(), lockId: z.string(), on: z.boolean() }),
]);

const out = (o: Record<string, unknown>) => process.stdout.write(`${JSON.stringify({ ...o, wallAt: Date.now() })}\n`);
const cfg = Config.parse(JSON.parse(process.env.CHAOS_FLEET ?? '{}'));
const fleet = new Fleet({
  url: cfg.url,
  gatewayId: cfg.gatewayId,
  locks: cfg.locks,
  secrets: cfg.secrets,
  ...(cfg.replayDir !== undefined && { replayWindowDir: cfg.replayDir }),
  log: createLogger('firmware-sim', { level: 'silent' }),
  onActivity: (lockId, a) => {
    if (a.type === 'output' && a.output.kind === 'event' && a.output.event.kind === 'command_result')
      out({
        ev: 'command',
        lockId,
        commandId: a.output.event.commandId,
        result: a.output.event.result,
        code: a.output.event.code ?? null,
      });
  },
});
await fleet.start();
out({ ev: 'ready' });
createInterface({ input: process.stdin }).on('line', (line) => {
  const c = Command.safeParse(JSON.parse(line));
  if (!c.success) return;
  const cmd = c.data;
  if (cmd.op === 'privacy') {
    const lock = fleet.lock(cmd.lockId);
    (cmd.on ? lock.privacyOn() : lock.privacyOff()).then(
      () => out({ ev: 'result', id: cmd.id, result: { privacy: lock.lock?.privacy ?? null, connected: lock.connected } }),
      (e: unknown) => out({ ev: 'result', id: cmd.id, error: String(e), result: { privacy: lock.lock?.privacy ?? null } }),
    );
    return;
  }
  const { id, lockId, pin } = cmd;
  fleet
    .lock(lockId)
    .present({ type: 'pin', value: pin }, { timeoutMs: 4000 })
    .then(
      (r) => out({ ev: 'result', id, result: r }),
      (e: unknown) => out({ ev: 'result', id, error: String(e) }),
    );
});
