import { createHash, timingSafeEqual } from 'node:crypto';
import { aclHooks, systemClock, type AedesAuthHooks, type AedesClient, type Clock, type Logger } from '@tobira/shared';
import type { Db, Queryable, Tx } from '../db/db.js';
import { migrate } from '../db/migrate.js';
import { openDb } from '../db/open.js';
import type { CloudConfig } from '../../config.js';
import type { BrokerAccounts, BrokerCredentials } from '../../app/broker-accounts.js';
import { gatewayUsername, mayPublish, mayReceive, maySubscribe, mayUseClientId, type BrokerAccount } from './acl.js';
import { DUMMY_HASH, hashPassword, newBrokerPassword, verifyPassword } from './password.js';

export type { AedesAuthHooks } from '@tobira/shared';

/**
 * Broker accounts for the embedded (aedes) cloud broker, stored in the cloud
 * database (table broker_accounts, migration 0009): provisioning writes the
 * gateway's account in the registration's transaction, and `hooks()` make
 * aedes authenticate every CONNECT against the table and enforce the ACL of
 * acl.ts on every subscribe, publish and delivery (shared `aclHooks`, which
 * the gateway's site broker uses too), and a gateway login's client id at
 * CONNECT, as Mosquitto's dynamic
 * security does with the same rules (dynsec.ts). One difference: Mosquitto
 * acknowledges and drops a denied publish, aedes closes the connection; in
 * both, no one receives it.
 *
 * Verified passwords are cached for `cacheMs` keyed by the stored hash, so a
 * rotation (a new hash) takes effect for the next connection at once; the
 * cache only saves the scrypt work of a reconnect storm.
 *
 * A rotation also cuts the sessions that logged in before it: the hooks keep
 * the live clients of each username, and provisionGateway closes them (their
 * last will is published, as for any dropped client). Two races are closed:
 * a reconnect during the rotation's transaction reads the account row
 * `FOR SHARE`, so it waits for the commit (PGlite: for the one connection)
 * and checks the new hash; a login that read the old hash before the
 * rotation and finishes after it sees the username's rotation count moved
 * and checks again. A rotation whose transaction rolls back has still cut the
 * sessions; they log in again with the password that stayed valid.
 */
export class EmbeddedBrokerAccounts implements BrokerAccounts {
  readonly kind = 'embedded';
  readonly #db: Queryable;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #cacheMs: number;
  readonly #verified = new Map<string, { digest: Buffer; until: number }>();
  /** The clients that logged in as each username (closed ones are pruned as they are met). */
  readonly #sessions = new Map<string, Set<AedesClient>>();
  /** How many rotations each username has had in this process: a login that spans one checks again. */
  readonly #rotations = new Map<string, number>();

  constructor(opts: { db: Queryable; log: Logger; clock?: Clock; cacheMs?: number }) {
    this.#db = opts.db;
    this.#log = opts.log;
    this.#clock = opts.clock ?? systemClock;
    this.#cacheMs = opts.cacheMs ?? 60_000;
  }

  async provisionGateway(db: Tx, gatewayId: string, log: Logger): Promise<BrokerCredentials> {
    const username = gatewayUsername(gatewayId);
    const password = newBrokerPassword();
    const now = this.#clock.now();
    const r = await db.query<{ created: boolean }>(
      `INSERT INTO broker_accounts (username, kind, gateway_id, password_hash, created_at, rotated_at) VALUES ($1, 'gateway', $2, $3, $4, $4)
        ON CONFLICT (username) DO UPDATE SET password_hash = EXCLUDED.password_hash, rotated_at = EXCLUDED.rotated_at
        RETURNING (xmax = 0) AS created`,
      [username, gatewayId, await hashPassword(password), now],
    );
    // xmax = 0: the row was inserted, not updated (a first registration, not a rotation); unlike created_at = rotated_at it holds when both happen in one millisecond
    const created = r.rows[0]?.created ?? null;
    log.info({ gatewayId, username, broker: this.kind, created }, 'broker account password set');
    if (created !== true) {
      const cut = this.#cutSessions(username);
      log.info({ gatewayId, username, broker: this.kind, sessionsCut: cut }, 'broker sessions of the old password cut');
    }
    return { username, password };
  }

  /** Closes the live clients logged in as `username` and makes a login in flight check again; answers how many were closed. */
  #cutSessions(username: string): number {
    this.#rotations.set(username, (this.#rotations.get(username) ?? 0) + 1);
    const live = [...(this.#sessions.get(username) ?? [])].filter((c) => !c.closed);
    this.#sessions.delete(username);
    for (const c of live) c.close();
    return live.length;
  }

  #track(username: string, client: AedesClient): void {
    const set = this.#sessions.get(username) ?? new Set<AedesClient>();
    for (const c of set) if (c.closed) set.delete(c);
    set.add(client);
    this.#sessions.set(username, set);
  }

  /** The aedes hooks that enforce the accounts (startEmbeddedBroker({ aedes: accounts.hooks() })). */
  hooks(): AedesAuthHooks {
    return aclHooks<BrokerAccount>({
      authenticate: async (client, username, password) => {
        const found = await this.#authenticate(username, password);
        // checked here, before aedes evicts a live client with the same id: a refused CONNECT takes over nothing
        if (found !== null && !mayUseClientId(found, client.id)) {
          this.#log.warn({ username: username ?? null, clientId: client.id }, 'broker login refused: not the client id of this login');
          return null;
        }
        return found;
      },
      acl: { maySubscribe, mayPublish, mayReceive },
      log: this.#log,
      onLogin: (client, username) => this.#track(username, client),
    });
  }

  async #authenticate(username: string | undefined, password: Readonly<Buffer> | undefined): Promise<BrokerAccount | null> {
    if (username === undefined || password === undefined) return null;
    for (;;) {
      const rotations = this.#rotations.get(username) ?? 0;
      const account = await this.#check(username, password);
      // a rotation ran while this login was checked against the hash it read: check again, against the new one
      if ((this.#rotations.get(username) ?? 0) === rotations) return account;
    }
  }

  async #check(username: string, password: Readonly<Buffer>): Promise<BrokerAccount | null> {
    // FOR SHARE: a rotation not yet committed holds the row; wait for it rather than accept the password it replaces
    const r = await this.#db.query<{ kind: 'gateway' | 'service'; gateway_id: string | null; password_hash: string }>(
      'SELECT kind, gateway_id, password_hash FROM broker_accounts WHERE username = $1 FOR SHARE',
      [username],
    );
    const row = r.rows[0];
    const pw = password.toString('utf8');
    const hash = row?.password_hash ?? DUMMY_HASH;
    const cacheKey = `${username}\n${hash}`;
    const digest = createHash('sha256').update(pw).digest();
    const cached = this.#verified.get(cacheKey);
    const now = Date.now();
    let ok: boolean;
    if (cached && cached.until > now) ok = timingSafeEqual(cached.digest, digest);
    else {
      ok = await verifyPassword(pw, hash);
      if (ok && row) {
        this.#verified.set(cacheKey, { digest, until: now + this.#cacheMs });
        if (this.#verified.size > 10_000) this.#verified.clear();
      }
    }
    if (!ok || !row) return null;
    if (row.kind === 'service') return { kind: 'service' };
    return row.gateway_id === null ? null : { kind: 'gateway', gatewayId: row.gateway_id };
  }
}

/**
 * Creates the cloud's own service account (full access to tobira/v1/gw/#) or
 * gives it a new random password; answers the login to connect with. The
 * demo calls it at each start, so no service password is kept on disk and
 * none is a default.
 */
export async function setServiceAccount(db: Queryable, username: string, now: number): Promise<BrokerCredentials> {
  if (username.startsWith('gw:')) throw new Error(`a service account cannot be named like a gateway: ${username}`);
  const password = newBrokerPassword();
  await db.query(
    `INSERT INTO broker_accounts (username, kind, gateway_id, password_hash, created_at, rotated_at) VALUES ($1, 'service', NULL, $2, $3, $3)
      ON CONFLICT (username) DO UPDATE SET password_hash = EXCLUDED.password_hash, rotated_at = EXCLUDED.rotated_at
      WHERE broker_accounts.kind = 'service'`,
    [username, await hashPassword(password), now],
  );
  return { username, password };
}

/**
 * The embedded broker's accounts for a cloud that runs next to it (the demo):
 * opens and migrates the cloud database first, so the cloud's own service
 * login exists before the broker and the cloud start. Pass `db` to
 * createCloud ({ db }) and close it after the cloud stopped.
 */
export async function openEmbeddedBrokerAccounts(
  config: Pick<CloudConfig, 'databaseUrl' | 'pgliteDataDir'>,
  opts: { log: Logger; clock?: Clock; serviceUsername?: string; cacheMs?: number },
): Promise<{ db: Db; accounts: EmbeddedBrokerAccounts; service: BrokerCredentials }> {
  const clock = opts.clock ?? systemClock;
  const db = await openDb({ databaseUrl: config.databaseUrl, pgliteDataDir: config.pgliteDataDir }, opts.log);
  try {
    await migrate(db, opts.log, clock.now());
    const service = await setServiceAccount(db, opts.serviceUsername ?? 'tobira-cloud', clock.now());
    const accounts = new EmbeddedBrokerAccounts({
      db,
      log: opts.log,
      clock,
      ...(opts.cacheMs !== undefined ? { cacheMs: opts.cacheMs } : {}),
    });
    return { db, accounts, service };
  } catch (e) {
    await db.close();
    throw e;
  }
}
