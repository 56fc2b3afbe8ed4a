import type { AedesOptions } from 'aedes';
import type { Logger } from 'pino';
import { newCorrelationId } from './ids.js';
import { withCorrelation } from './logger.js';

/** The aedes hooks that make an embedded broker check logins and ACLs (startEmbeddedBroker({ aedes: hooks })). */
export type AedesAuthHooks = Required<Pick<AedesOptions, 'authenticate' | 'authorizeSubscribe' | 'authorizePublish' | 'authorizeForward'>>;
export type AedesClient = Parameters<AedesAuthHooks['authenticate']>[0];

/** What one logged-in account may do; pure, so a Mosquitto ACL can be derived from the same rules. */
export interface BrokerAcl<A> {
  maySubscribe(account: A, filter: string): boolean;
  mayPublish(account: A, topic: string): boolean;
  mayReceive(account: A, topic: string): boolean;
}

export interface AclHooksOptions<A> {
  /** The account of a login, or null to refuse it (CONNACK "not authorized"). A rejection is an outage: the client is told "server unavailable" and retries. */
  authenticate(client: AedesClient, username: string | undefined, password: Readonly<Buffer> | undefined): Promise<A | null>;
  readonly acl: BrokerAcl<A>;
  readonly log: Logger;
  /** Called once a login is accepted (e.g. to track live sessions). */
  onLogin?(client: AedesClient, username: string, account: A): void;
}

/**
 * One implementation of login and ACL enforcement on an embedded (aedes)
 * broker, shared by the cloud broker's gateway accounts and a site broker's
 * lock accounts: an account is bound to the client at CONNECT, and every
 * subscribe, publish and delivery is checked against the ACL. Deny by
 * default: a client without an account can do nothing. A refused publish
 * closes the offender's connection (aedes has no "acknowledge and drop");
 * either way nobody receives it. A refused subscription gets SUBACK failure.
 * Every refusal is one warn line with its own correlation id.
 */
export function aclHooks<A>(o: AclHooksOptions<A>): AedesAuthHooks {
  const accounts = new WeakMap<AedesClient, A>();
  const refused = (fields: Record<string, unknown>, msg: string) => withCorrelation(o.log, newCorrelationId()).warn(fields, msg);
  return {
    authenticate: (client, username, password, done) => {
      o.authenticate(client, username, password).then(
        (account) => {
          if (account !== null && username !== undefined) {
            accounts.set(client, account);
            o.onLogin?.(client, username, account);
          } else refused({ username: username ?? null, clientId: client.id }, 'broker login refused');
          done(null, account !== null && username !== undefined);
        },
        (e: unknown) => {
          withCorrelation(o.log, newCorrelationId()).error({ err: String(e), clientId: client.id }, 'broker login check failed');
          // 3: server unavailable (the client retries), not "bad password"
          done(Object.assign(new Error('account store unavailable'), { returnCode: 3 as const }), false);
        },
      );
    },
    authorizeSubscribe: (client, sub, done) => {
      const account = client ? accounts.get(client) : undefined;
      const ok = account !== undefined && o.acl.maySubscribe(account, sub.topic);
      if (!ok) refused({ clientId: client?.id ?? null, filter: sub.topic }, 'broker subscribe refused');
      done(null, ok ? sub : null);
    },
    authorizePublish: (client, packet, done) => {
      // client null: a will left by a client of an earlier broker run; nobody vouches for it
      const account = client ? accounts.get(client) : undefined;
      if (account !== undefined && o.acl.mayPublish(account, packet.topic)) return done(null);
      refused({ clientId: client?.id ?? null, topic: packet.topic }, 'broker publish refused');
      done(new Error('publish not allowed'));
    },
    authorizeForward: (client, packet) => {
      const account = accounts.get(client);
      return account !== undefined && o.acl.mayReceive(account, packet.topic) ? packet : null;
    },
  };
}
