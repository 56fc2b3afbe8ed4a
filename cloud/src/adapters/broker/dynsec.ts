import { connectMqtt, gatewayCloudClientId, newCorrelationId, withCorrelation, type Logger } from '@tobira/shared';
import type { MqttClient } from 'mqtt';
import type { Tx } from '../db/db.js';
import { BrokerUnavailable, type BrokerAccounts, type BrokerCredentials } from '../../app/broker-accounts.js';
import { SERVICE_ROLE, gatewayDynsecAcls, gatewayRoleName, gatewayUsername, serviceDynsecAcls } from './acl.js';
import { newBrokerPassword } from './password.js';

const CONTROL = '$CONTROL/dynamic-security/v1';
const RESPONSE = `${CONTROL}/response`;

export interface DynsecOptions {
  /** The Mosquitto broker (the cloud broker). */
  readonly url: string;
  /** A login that holds the dynsec admin role (made by `mosquitto_ctrl dynsec init`). */
  readonly username: string;
  readonly password: string;
  /** How long a command may wait for its answer before the change is refused as BROKER_UNAVAILABLE. */
  readonly timeoutMs?: number;
  readonly clientId?: string;
  readonly log: Logger;
}

interface DynsecResponse {
  readonly command: string;
  readonly error?: string;
  readonly data?: unknown;
  readonly correlationData?: string;
}

/**
 * Per-gateway accounts on Mosquitto 2 with the dynamic security plugin. The
 * cloud holds an admin connection of its own (start()/stop()) and sends JSON
 * commands to `$CONTROL/dynamic-security/v1`, matching each answer on
 * `.../response` by its correlationData.
 *
 * On every connect it sets the default ACL access to deny for all four types
 * (a client gets nothing it was not granted) and makes sure the role
 * `tobira-cloud` (everything under tobira/v1/gw/#) exists for the cloud's own
 * link account. A gateway gets a role named like its client (`gw:{id}`) with
 * exactly the ACLs of acl.ts, a fixed `clientid` (the gateway's cloud link
 * id, so the login cannot connect as any other client and take over its
 * session; dynsec refuses such a CONNECT), and a fresh random password at
 * each provisioning or rotation. A rotation also disconnects every live session of
 * the client (disable, then enable), so a session that logged in with the old
 * password does not outlive it.
 *
 * Not transactional with the database: the broker change is made inside the
 * registration's transaction and cannot be rolled back with it. A commit that
 * fails after the change leaves an account whose password nobody knows, and
 * registering the gateway again sets a new one.
 */
export class DynsecBrokerAccounts implements BrokerAccounts {
  readonly kind = 'mosquitto-dynsec';
  readonly #o: DynsecOptions;
  readonly #timeoutMs: number;
  readonly #pending = new Map<string, (r: DynsecResponse) => void>();
  #client: MqttClient | undefined;
  #ready = false;

  constructor(o: DynsecOptions) {
    this.#o = o;
    this.#timeoutMs = o.timeoutMs ?? 5_000;
  }

  /** Connects the admin link and prepares the broker. Not fatal when the broker is down: it keeps reconnecting, and provisioning is refused until it is back. */
  async start(): Promise<void> {
    const log = withCorrelation(this.#o.log, newCorrelationId(), { part: 'broker-accounts' });
    const client = connectMqtt(this.#o.url, {
      username: this.#o.username,
      password: this.#o.password,
      clean: true,
      ...(this.#o.clientId ? { clientId: this.#o.clientId } : {}),
    });
    this.#client = client;
    client.on('message', (topic, payload) => {
      if (topic === RESPONSE) this.#onResponse(payload, log);
    });
    client.on('close', () => {
      this.#ready = false;
    });
    client.on('error', (e) => log.warn({ err: e.message }, 'dynsec admin link error'));
    const prepared = new Promise<boolean>((resolve) => {
      client.on('connect', () => {
        this.#prepare(log).then(
          () => {
            this.#ready = true;
            log.info({ url: this.#o.url }, 'dynsec admin link ready');
            resolve(true);
          },
          (e: unknown) => {
            log.error({ err: String(e) }, 'dynsec broker preparation failed');
            resolve(false);
          },
        );
      });
    });
    const ok = await Promise.race([prepared, new Promise<boolean>((r) => setTimeout(() => r(false), this.#timeoutMs * 2).unref())]);
    if (!ok) log.warn({ url: this.#o.url }, 'dynsec admin link not ready yet; gateway registrations answer BROKER_UNAVAILABLE until it is');
  }

  async stop(): Promise<void> {
    const c = this.#client;
    this.#client = undefined;
    this.#ready = false;
    for (const [, reject] of this.#pending) reject({ command: 'stop', error: 'stopped' });
    this.#pending.clear();
    await c?.endAsync(true);
  }

  /** Connected and prepared. */
  get ready(): boolean {
    return this.#ready;
  }

  async provisionGateway(_db: Tx, gatewayId: string, log: Logger): Promise<BrokerCredentials> {
    if (!this.#ready) throw new BrokerUnavailable('dynsec admin link is not connected');
    const username = gatewayUsername(gatewayId);
    const rolename = gatewayRoleName(gatewayId);
    const acls = gatewayDynsecAcls(gatewayId);
    const password = newBrokerPassword();
    const role = await this.command({ command: 'createRole', rolename, acls }, log);
    // an existing role gets exactly these ACLs again (modifyRole replaces the list)
    if (role.error === 'Role already exists') need(await this.command({ command: 'modifyRole', rolename, acls }, log));
    else need(role);
    const clientid = gatewayCloudClientId(gatewayId);
    const created = await this.command({ command: 'createClient', username, password, clientid, roles: [{ rolename }] }, log);
    if (created.error === 'Client already exists') {
      need(await this.command({ command: 'setClientPassword', username, password }, log));
      // an account made before the pin gets it now (the same id again is harmless)
      need(await this.command({ command: 'setClientId', username, clientid }, log));
      // cut the sessions that logged in with the old password: disableClient kicks every connection of the
      // username, enableClient lets the new password in again. Failing between the two leaves the account
      // disabled; the rotation answers BROKER_UNAVAILABLE and a retry enables it.
      need(await this.command({ command: 'disableClient', username }, log));
      need(await this.command({ command: 'enableClient', username }, log));
      // dynsec kicks without saying how many connections it closed
      log.info({ gatewayId, username, broker: this.kind, sessionsCut: null }, 'broker sessions of the old password cut');
      const got = need(await this.command({ command: 'getClient', username }, log));
      const roles = (got.data as { client?: { roles?: { rolename?: string }[] } } | undefined)?.client?.roles ?? [];
      if (!roles.some((r) => r.rolename === rolename)) need(await this.command({ command: 'addClientRole', username, rolename }, log));
      log.info({ gatewayId, username, broker: this.kind }, 'broker account password rotated');
    } else {
      need(created);
      log.info({ gatewayId, username, broker: this.kind }, 'broker account created');
    }
    return { username, password };
  }

  /** Sends one dynsec command and waits for its answer (an `error` in the answer is returned, not thrown); a timeout throws BrokerUnavailable. */
  async command(cmd: Record<string, unknown> & { command: string }, log: Logger): Promise<DynsecResponse> {
    const client = this.#client;
    if (!client?.connected) throw new BrokerUnavailable('dynsec admin link is not connected');
    const correlationData = newCorrelationId();
    const answer = new Promise<DynsecResponse>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(correlationData);
        reject(new BrokerUnavailable(`dynsec ${cmd.command}: no answer within ${this.#timeoutMs} ms`));
      }, this.#timeoutMs);
      this.#pending.set(correlationData, (r) => {
        clearTimeout(timer);
        this.#pending.delete(correlationData);
        if (r.command === 'stop') reject(new BrokerUnavailable('dynsec admin link stopped'));
        else resolve(r);
      });
    });
    answer.catch(() => {});
    try {
      await client.publishAsync(CONTROL, JSON.stringify({ commands: [{ ...cmd, correlationData }] }), { qos: 1 });
    } catch (e) {
      this.#pending.get(correlationData)?.({ command: 'stop', error: String(e) });
      throw new BrokerUnavailable(`dynsec ${cmd.command}: ${e instanceof Error ? e.message : String(e)}`);
    }
    const r = await answer;
    log.debug({ command: cmd.command, error: r.error ?? null, broker: this.kind }, 'dynsec command answered');
    return r;
  }

  async #prepare(log: Logger): Promise<void> {
    await this.#client?.subscribeAsync(RESPONSE, { qos: 1 });
    need(
      await this.command(
        {
          command: 'setDefaultACLAccess',
          acls: (['publishClientSend', 'publishClientReceive', 'subscribe', 'unsubscribe'] as const).map((acltype) => ({
            acltype,
            allow: false,
          })),
        },
        log,
      ),
    );
    const acls = serviceDynsecAcls();
    const role = await this.command({ command: 'createRole', rolename: SERVICE_ROLE, acls }, log);
    if (role.error === 'Role already exists') need(await this.command({ command: 'modifyRole', rolename: SERVICE_ROLE, acls }, log));
    else need(role);
  }

  #onResponse(payload: Buffer, log: Logger): void {
    let body: { responses?: DynsecResponse[] };
    try {
      body = JSON.parse(payload.toString('utf8')) as { responses?: DynsecResponse[] };
    } catch {
      return void log.warn('unreadable dynsec response');
    }
    for (const r of body.responses ?? []) {
      if (typeof r.correlationData === 'string') this.#pending.get(r.correlationData)?.(r);
    }
  }
}

/** An error answer from the broker is a failed change: BROKER_UNAVAILABLE, nothing committed. */
function need(r: DynsecResponse): DynsecResponse {
  if (r.error !== undefined) throw new BrokerUnavailable(`dynsec ${r.command}: ${r.error}`);
  return r;
}
