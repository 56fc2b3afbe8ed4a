import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { PresentedCredential, createLogger, onShutdownSignals } from '@tobira/shared';
import type { SimActivity, SimLock } from './adapter.js';
import { CliError, USAGE, parseCli, parseSecretsFile, type CliConfig } from './cli-args.js';
import { validateFaults, type Faults } from './faults.js';
import { Fleet } from './fleet.js';

/**
 * `npm run sim -- --gateway gw-1 --locks 20 --mqtt mqtt://127.0.0.1:1883 [--secrets file.json]`
 * Prints lock ids and what happens at each lock; never prints a secret unless
 * asked (--print-secrets). SIGINT/SIGTERM: locks say offline, then disconnect.
 */

const out = (line: string) => console.log(line);

function describeActivity(lockId: string, a: SimActivity): string | null {
  const id = lockId.padEnd(6);
  switch (a.type) {
    case 'connected':
      return `${id} online`;
    case 'disconnected':
      return `${id} offline`;
    case 'decision':
      return `${id} decision  ${a.decision.allowed ? 'allowed' : 'denied '} ${a.decision.code}${a.decision.commandId ? ` command ${a.decision.commandId}` : ''}`;
    case 'rejected':
      return `${id} rejected  ${a.channel} ${a.code}: ${a.detail.slice(0, 120)}`;
    case 'output': {
      const o = a.output;
      switch (o.kind) {
        case 'state':
          return `${id} state     bolt ${o.state.bolt}, door ${o.state.door}, battery ${o.state.battery}%`;
        case 'request':
          return `${id} request   ${o.request.credential.type} ${'*'.repeat(4)} (${o.request.requestId})`;
        case 'event':
          return o.event.kind === 'command_result'
            ? `${id} command   ${o.event.result}${o.event.code ? ` ${o.event.code}` : ''} (${o.event.commandId || 'no id'})`
            : `${id} ALARM     ${o.event.kind}`;
      }
    }
  }
}

function loadSecrets(cfg: CliConfig): Record<string, string> {
  if (!cfg.secretsFile || !existsSync(cfg.secretsFile)) return {};
  return parseSecretsFile(readFileSync(cfg.secretsFile, 'utf8'));
}

async function main(): Promise<number> {
  let cfg: CliConfig | 'help';
  try {
    cfg = parseCli(process.argv.slice(2), process.env);
  } catch (e) {
    if (e instanceof CliError) {
      console.error(`firmware-sim: ${e.message}\n\n${USAGE}`);
      return 2;
    }
    throw e;
  }
  if (cfg === 'help') {
    out(USAGE);
    return 0;
  }
  const config = cfg;
  const given = loadSecrets(config);
  const fleet = new Fleet({
    url: config.mqttUrl,
    gatewayId: config.gatewayId,
    locks: config.lockIds,
    secrets: given,
    replayWindowDir: config.replayDir,
    log: createLogger('firmware-sim', { level: process.env.LOG_LEVEL ?? 'warn' }),
    siteLogin: config.siteLogin,
    ...(config.siteCaFile !== null &&
      config.siteCaFingerprint !== null && {
        siteCa: { caPem: readFileSync(config.siteCaFile, 'utf8'), pin: config.siteCaFingerprint },
      }),
    ...(config.mqttUsername !== null && {
      mqtt: { username: config.mqttUsername, ...(config.mqttPassword !== null && { password: config.mqttPassword }) },
    }),
    ...(config.doorAjarMs !== null && { lock: { doorAjarMs: config.doorAjarMs } }),
    ...(config.faults !== null && { faults: config.faults }),
    onActivity: (lockId, a) => {
      if (config.quiet && a.type === 'output') return;
      const line = describeActivity(lockId, a);
      if (line) out(line);
    },
  });

  out(`firmware-sim: gateway ${config.gatewayId}, ${config.lockIds.length} lock(s) at ${config.mqttUrl.replace(/\/\/[^@/]*@/, '//***@')}`);
  let stopping: Promise<void> | null = null;
  const stop = (why: string): Promise<void> =>
    (stopping ??= (async () => {
      out(`firmware-sim: ${why}: locks go offline and disconnect`);
      await fleet.stop();
      out('firmware-sim: stopped');
    })());
  const stopped = new Promise<void>((resolve) => {
    // One Ctrl-C can arrive several times (npm and tsx forward it); only a later, separate signal forces.
    onShutdownSignals({
      graceful: (sig) => void stop(sig).then(resolve, resolve),
      forced: () => {
        out('firmware-sim: second signal, exiting now');
        process.exit(1);
      },
    });
  });

  try {
    await fleet.start();
  } catch (e) {
    console.error(`firmware-sim: could not start: ${(e as Error).message}`);
    return 1;
  }

  const secrets = fleet.secrets();
  if (config.secretsFile) {
    const missing = config.lockIds.filter((id) => given[id] === undefined);
    if (missing.length > 0) {
      // `mode` only applies when the file is created: tighten an existing file before new secrets go in.
      if (existsSync(config.secretsFile)) chmodSync(config.secretsFile, 0o600);
      writeFileSync(config.secretsFile, `${JSON.stringify({ ...given, ...secrets }, null, 2)}\n`, { mode: 0o600 });
      out(`firmware-sim: generated pairing secrets for ${missing.join(' ')} and wrote them to ${config.secretsFile}`);
    }
  } else {
    out(
      'firmware-sim: pairing secrets were generated for this run only (use --secrets file.json to keep them, --print-secrets to see them)',
    );
  }
  if (config.printSecrets) for (const [id, s] of Object.entries(secrets)) out(`secret ${id} ${s}`);
  out(`firmware-sim: ready: ${fleet.lockIds.join(' ')}`);

  for (const p of config.present) {
    const r = await fleet.lock(p.lockId).present(p.credential);
    out(`result ${p.lockId} ${JSON.stringify(r)}`);
  }
  if (config.interactive) repl(fleet, () => void stop('end of input').then(() => process.exit(0)));
  await stopped;
  return 0;
}

const HELP = `commands: present <lock> <pin|card|mobile|mobile_token> <value> | open <lock> | close <lock> | force <lock> | tamper <lock>
          jam <lock> | unjam <lock> | drain <lock> <percent> | reboot <lock> | disconnect <lock> | reconnect <lock>
          privacy-on <lock> | privacy-off <lock> | leave <lock> (inside handle: clears privacy)
          faults <lock|*> <json> | status | quit`;

/** The commands that are one call on the named lock (a Map, so no inherited name is a command). */
const DOOR_ACTIONS = new Map<string, (l: SimLock) => Promise<unknown>>([
  ['open', (l) => l.openDoor()],
  ['close', (l) => l.closeDoor()],
  ['force', (l) => l.forceOpen()],
  ['tamper', (l) => l.tamper()],
  ['jam', (l) => l.jam()],
  ['unjam', (l) => l.clearJam()],
  ['reboot', (l) => l.reboot()],
  ['privacy-on', (l) => l.privacyOn()],
  ['privacy-off', (l) => l.privacyOff()],
  ['leave', (l) => l.exit()],
]);

function repl(fleet: Fleet, onEnd: () => void): void {
  const rl = createInterface({ input: process.stdin });
  rl.on('close', onEnd);
  rl.on('line', (line) => {
    void run(line.trim().split(/\s+/)).catch((e: unknown) => out(`error: ${(e as Error).message}`));
  });
  async function run([cmd, lockId, ...args]: string[]): Promise<void> {
    const lock = () => fleet.lock(lockId ?? '');
    const action = DOOR_ACTIONS.get(cmd ?? '');
    if (action) return void (await action(lock()));
    switch (cmd) {
      case undefined:
      case '':
        return;
      case 'help':
        return out(HELP);
      case 'present': {
        const c = PresentedCredential.safeParse({ type: args[0], value: args[1] });
        if (!c.success) return out('usage: present <lock> <pin|card|mobile|mobile_token> <value>');
        return out(`result ${lockId} ${JSON.stringify(await lock().present(c.data))}`);
      }
      case 'drain':
        return void (await lock().drainBattery(Number(args[0] ?? 10)));
      case 'disconnect':
        return lock().disconnect();
      case 'reconnect':
        return lock().reconnect();
      case 'faults': {
        const f: Faults = validateFaults(JSON.parse(args.join(' ') || '{}') as Faults);
        if (lockId === '*') fleet.setFaults(f);
        else lock().setFaults(f);
        return out(`faults ${lockId} ${JSON.stringify(f)}`);
      }
      case 'status':
        for (const l of fleet.locks)
          out(
            `${l.lockId.padEnd(6)} ${l.connected ? 'online ' : 'offline'} bolt ${l.bolt} door ${l.lock?.door ?? '?'} battery ${l.lock?.battery ?? '?'}%`,
          );
        return;
      case 'quit':
      case 'exit':
        rl.close();
        return;
      default:
        return out(`unknown command ${cmd}; ${HELP}`);
    }
  }
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    console.error(e);
    process.exit(1);
  },
);
