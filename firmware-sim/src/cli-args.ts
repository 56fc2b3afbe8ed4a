import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import {
  isLoopbackHost,
  parseBrokerUrl,
  isSlug,
  normalizeCaFingerprint,
  PresentedCredential,
  type PresentedCredential as Credential,
} from '@tobira/shared';
import { validateFaults, type Faults } from './faults.js';
import { lockIds } from './fleet.js';

/** The CLI configuration, parsed once and frozen. */
export interface CliConfig {
  readonly gatewayId: string;
  readonly lockIds: readonly string[];
  readonly mqttUrl: string;
  readonly mqttUsername: string | null;
  readonly mqttPassword: string | null;
  readonly siteLogin: boolean;
  /** The site CA file and the fingerprint pinned at pairing (both for mqtts://). */
  readonly siteCaFile: string | null;
  readonly siteCaFingerprint: string | null;
  readonly secretsFile: string | null;
  /** Where each lock keeps its replay window across a restart of this process (FleetOptions.replayWindowDir). */
  readonly replayDir: string;
  readonly printSecrets: boolean;
  readonly doorAjarMs: number | null;
  readonly faults: Faults | null;
  readonly present: readonly { readonly lockId: string; readonly credential: Credential }[];
  readonly interactive: boolean;
  readonly quiet: boolean;
}

export const USAGE = `Usage: npm run sim -- --gateway <id> [options]

Starts simulated lock controllers for one gateway (firmware-sim).

  --gateway, -g <id>       gateway id (required)
  --locks, -n <N>          run locks L1..LN (default 3)
  --lock-ids <a,b,c>       run these lock ids instead of L1..LN
  --mqtt <url>             site broker (default $MQTT_URL or mqtt://127.0.0.1:1883)
                           credentials from $MQTT_USERNAME / $MQTT_PASSWORD (one login for all locks)
  --site-ca <file.pem>     the site CA certificate (the gateway's tls/site-ca.crt): an
                           mqtts:// broker is trusted only with it ($SITE_CA_FILE)
  --site-ca-fingerprint <sha256>  the CA fingerprint pinned at pairing; a CA file with
                           another one is refused ($SITE_CA_FINGERPRINT)
                           plain mqtt:// is accepted only to a loopback address
  --site-login             each lock logs in as itself: username = lock id, password
                           derived from its pairing secret (what a site broker with
                           lock logins expects; see docs/gateway.md)
  --secrets <file.json>    pairing secrets {"L1":"<base64url>",...}; missing locks get
                           generated secrets and the file is (re)written with mode 0600
  --replay-dir <dir>       where each lock keeps the command ids it executed until they
                           expire, so a restarted sim refuses a replay (default
                           $SIM_REPLAY_DIR or <tmp>/tobira-sim-<gateway>)
  --print-secrets          print the pairing secrets (they are never printed otherwise)
  --door-ajar-ms <ms>      door-ajar alarm threshold (default 30000)
  --faults <json>          fault plan for every lock, e.g. '{"incoming":{"drop":0.1,"delayMs":50}}'
  --present <lock:type:value>  present a credential once all locks are online (repeatable),
                           e.g. --present L1:pin:1234
  --interactive, -i        read commands from stdin (type "help")
  --quiet, -q              print only startup and results, not every message
  --help, -h               this text

SIGINT / SIGTERM: every lock publishes {online:false} and disconnects; a second signal exits at once.`;

export class CliError extends Error {}

/** Parses argv (without node and script) and the environment. Throws CliError with a message for the user. */
export function parseCli(argv: readonly string[], env: Readonly<Record<string, string | undefined>>): CliConfig | 'help' {
  let values;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        gateway: { type: 'string', short: 'g' },
        locks: { type: 'string', short: 'n' },
        'lock-ids': { type: 'string' },
        mqtt: { type: 'string' },
        'site-login': { type: 'boolean' },
        'site-ca': { type: 'string' },
        'site-ca-fingerprint': { type: 'string' },
        secrets: { type: 'string' },
        'replay-dir': { type: 'string' },
        'print-secrets': { type: 'boolean' },
        'door-ajar-ms': { type: 'string' },
        faults: { type: 'string' },
        present: { type: 'string', multiple: true },
        interactive: { type: 'boolean', short: 'i' },
        quiet: { type: 'boolean', short: 'q' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (e) {
    throw new CliError((e as Error).message);
  }
  if (values.help) return 'help';
  const gatewayId = values.gateway;
  if (!gatewayId) throw new CliError('--gateway is required');
  if (!isSlug(gatewayId)) throw new CliError(`--gateway: not a valid id: ${gatewayId}`);

  let ids: string[];
  try {
    if (values['lock-ids'] !== undefined) {
      if (values.locks !== undefined) throw new CliError('give --locks or --lock-ids, not both');
      ids = lockIds(values['lock-ids'].split(',').map((s) => s.trim()));
    } else {
      ids = lockIds(values.locks === undefined ? 3 : positiveInt(values.locks, '--locks'));
    }
  } catch (e) {
    throw new CliError(`lock ids: ${(e as Error).message}`);
  }

  let faults: Faults | null = null;
  if (values.faults !== undefined) {
    try {
      faults = validateFaults(JSON.parse(values.faults) as Faults);
    } catch (e) {
      throw new CliError(`--faults: ${(e as Error).message}`);
    }
  }

  const siteLogin = values['site-login'] ?? false;
  if (siteLogin && env.MQTT_USERNAME !== undefined)
    throw new CliError('--site-login: each lock logs in as itself; unset MQTT_USERNAME / MQTT_PASSWORD');

  const present = (values.present ?? []).map((p) => {
    const [lockId, type, ...rest] = p.split(':');
    const parsed = PresentedCredential.safeParse({ type, value: rest.join(':') });
    if (!lockId || !ids.includes(lockId)) throw new CliError(`--present ${p}: unknown lock ${lockId ?? ''}`);
    if (!parsed.success) throw new CliError(`--present ${p}: expected <lock>:<pin|card|mobile|mobile_token>:<value>`);
    return { lockId, credential: parsed.data };
  });

  const mqttUrl = values.mqtt ?? env.MQTT_URL ?? 'mqtt://127.0.0.1:1883';
  const siteCaFile = values['site-ca'] ?? env.SITE_CA_FILE ?? null;
  const siteCaFingerprint = values['site-ca-fingerprint'] ?? env.SITE_CA_FINGERPRINT ?? null;
  let u: URL;
  try {
    u = parseBrokerUrl(mqttUrl);
  } catch (e) {
    throw new CliError(`--mqtt ${mqttUrl}: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (u.protocol === 'mqtts:' && (siteCaFile === null || siteCaFingerprint === null))
    throw new CliError('--mqtt mqtts://: give --site-ca and --site-ca-fingerprint (the CA pinned at pairing)');
  if (u.protocol !== 'mqtts:' && !isLoopbackHost(u.hostname))
    throw new CliError(`--mqtt ${u.protocol}//${u.hostname}: plain MQTT only on loopback; use mqtts:// with --site-ca`);
  if (siteCaFingerprint !== null && !/^[0-9a-f]{64}$/.test(normalizeCaFingerprint(siteCaFingerprint)))
    throw new CliError('--site-ca-fingerprint: expected a SHA-256 fingerprint (64 hex digits, ":" allowed)');

  return Object.freeze({
    gatewayId,
    siteCaFile,
    siteCaFingerprint,
    lockIds: ids,
    mqttUrl,
    mqttUsername: env.MQTT_USERNAME ?? null,
    mqttPassword: env.MQTT_PASSWORD ?? null,
    siteLogin,
    secretsFile: values.secrets ?? null,
    replayDir: values['replay-dir'] ?? env.SIM_REPLAY_DIR ?? join(tmpdir(), `tobira-sim-${gatewayId}`),
    printSecrets: values['print-secrets'] ?? false,
    doorAjarMs: values['door-ajar-ms'] === undefined ? null : positiveInt(values['door-ajar-ms'], '--door-ajar-ms'),
    faults,
    present,
    interactive: values.interactive ?? false,
    quiet: values.quiet ?? false,
  });
}

function positiveInt(s: string, what: string): number {
  const n = Number(s);
  if (!/^\d+$/.test(s) || !Number.isSafeInteger(n) || n < 1) throw new CliError(`${what}: expected a positive integer, got ${s}`);
  return n;
}

/** Reads a secrets file: a JSON object of lock id -> base64url secret. Throws CliError on anything else. */
export function parseSecretsFile(text: string): Record<string, string> {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new CliError(`secrets file is not JSON: ${(e as Error).message}`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    throw new CliError('secrets file must be a JSON object {"L1":"<base64url>",...}');
  const out: Record<string, string> = {};
  for (const [k, s] of Object.entries(v)) {
    if (!isSlug(k) || typeof s !== 'string' || !/^[A-Za-z0-9_-]{22,}$/.test(s))
      throw new CliError(`secrets file: bad entry for ${JSON.stringify(k)}`);
    out[k] = s;
  }
  return out;
}
