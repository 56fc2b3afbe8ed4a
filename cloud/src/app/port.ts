import type { CorrelationId } from '@tobira/shared';
import type { Tx } from '../adapters/db/db.js';
import type { SecretBox } from '../adapters/kek.js';
import type { rotateGatewayBrokerCredentials } from './broker-rotation.js';
import type * as keys from './keys.js';
import type * as registry from './registry.js';
import type * as stays from './stays.js';
import type * as notifications from './notifications.js';
import type { SiteScope } from '../adapters/db/scope.js';
import type * as memberships from './memberships.js';
import type * as signing from './signing-keys.js';
import type { Jwks } from '@tobira/shared';
import type * as mobileTokens from './mobile-tokens.js';
import type * as modes from './modes.js';
import type * as uplinkKeys from './uplink-keys.js';
import type * as walkIns from './walk-ins.js';

/**
 * Options of a write verb. `db`: run inside the caller's open transaction
 * (the verb's own transaction becomes a savepoint of it), so the caller can
 * commit its own rows with the effect: the admin API stores an idempotent
 * response this way.
 */
export interface VerbOptions {
  readonly db?: Tx;
}

/**
 * The verbs the admin API calls. A port, so the HTTP layer depends on this
 * narrow interface and not on the composition root that implements it
 * (`createCloud`), and tests may pass a fake.
 */
export interface CloudVerbs {
  /** The KEK box that seals and opens the stored secrets (docs/security.md "Secrets at rest"); after start(). */
  readonly secrets: SecretBox;
  createSite(input: Parameters<typeof registry.createSite>[1], o?: VerbOptions): ReturnType<typeof registry.createSite>;
  registerGateway(input: Parameters<typeof registry.registerGateway>[2], o?: VerbOptions): ReturnType<typeof registry.registerGateway>;
  /** A new cloud-broker password for a gateway (BROKER_ACCOUNTS_UNMANAGED when accounts are not managed). */
  rotateGatewayBrokerCredentials(
    input: Parameters<typeof rotateGatewayBrokerCredentials>[1],
    o?: VerbOptions,
  ): ReturnType<typeof rotateGatewayBrokerCredentials>;
  createDoor(input: Parameters<typeof registry.createDoor>[1], o?: VerbOptions): ReturnType<typeof registry.createDoor>;
  createPerson(input: Parameters<typeof registry.createPerson>[1], o?: VerbOptions): ReturnType<typeof registry.createPerson>;
  issueKey(input: keys.IssueKeyInput, o?: VerbOptions): ReturnType<typeof keys.issueKey>;
  revokeKey(input: keys.RevokeKeyInput, o?: VerbOptions): ReturnType<typeof keys.revokeKey>;
  retryDeadLetter(
    id: number,
    o?: VerbOptions,
  ): Promise<
    | { readonly status: 'applied'; readonly code: 'MESSAGE_APPLIED' }
    | { readonly status: 'refused'; readonly code: 'DEAD_LETTER_NOT_FOUND' }
  >;
  /** Stays. bookStay runs its own transactions: it calls Stripe between them, so it takes no caller transaction. */
  bookStay(input: stays.BookStayInput): Promise<stays.StayResult>;
  cancelStay(input: stays.CancelStayInput, o?: VerbOptions): Promise<stays.StayResult>;
  checkInStay(input: Parameters<typeof stays.checkInStay>[1], o?: VerbOptions): Promise<stays.StayResult>;
  checkOutStay(input: Parameters<typeof stays.checkOutStay>[1], o?: VerbOptions): Promise<stays.StayResult>;
  createRoom(input: stays.CreateRoomInput, o?: VerbOptions): ReturnType<typeof stays.createRoom>;
  setStaySettings(input: stays.StaySettingsInput, o?: VerbOptions): ReturnType<typeof stays.setStaySettings>;
  receiveStripeWebhook(raw: Buffer, header: string | undefined, cid: CorrelationId): Promise<stays.WebhookReceipt>;
  readonly billingConfigured: boolean;
  /** A dead notification back to pending. */
  retryNotification(
    input: { id: number; siteScope?: SiteScope; cid?: CorrelationId },
    o?: VerbOptions,
  ): ReturnType<typeof notifications.retryNotification>;
  /** Where and in which language a person is told; a site's fallback locale. */
  savePersonContact(
    input: Parameters<typeof notifications.savePersonContact>[1],
    o?: VerbOptions,
  ): ReturnType<typeof notifications.savePersonContact>;
  saveSiteLocale(
    input: Parameters<typeof notifications.saveSiteLocale>[1],
    o?: VerbOptions,
  ): ReturnType<typeof notifications.saveSiteLocale>;
  /** Memberships: Stripe is called between their transactions, so they take no caller transaction. */
  createPlan(input: memberships.CreatePlanInput): ReturnType<typeof memberships.createPlan>;
  retirePlan(input: Parameters<typeof memberships.retirePlan>[1]): ReturnType<typeof memberships.retirePlan>;
  applyMembership(input: memberships.ApplyMembershipInput): ReturnType<typeof memberships.applyMembership>;
  approveMembership(input: Parameters<typeof memberships.approveMembership>[1]): ReturnType<typeof memberships.approveMembership>;
  endMembership(input: memberships.EndMembershipInput): ReturnType<typeof memberships.endMembership>;
  selfCancelMembership(input: Parameters<typeof memberships.selfCancelMembership>[1]): ReturnType<typeof memberships.selfCancelMembership>;
  /** Check-in gates, walk-ins and quotas: a walk-in calls Stripe between its transactions. */
  createWalkIn(input: walkIns.CreateWalkInInput): ReturnType<typeof walkIns.createWalkIn>;
  cancelWalkIn(input: Parameters<typeof walkIns.cancelWalkIn>[1]): ReturnType<typeof walkIns.cancelWalkIn>;
  blockPerson(input: Parameters<typeof walkIns.blockPerson>[1]): ReturnType<typeof walkIns.blockPerson>;
  unblockPerson(input: Parameters<typeof walkIns.unblockPerson>[1]): ReturnType<typeof walkIns.unblockPerson>;
  quotaView(input: Parameters<typeof walkIns.quotaView>[1]): ReturnType<typeof walkIns.quotaView>;
  /** Both MQTT links (inbox and publishing) are connected (`/readyz`). */
  readonly mqttConnected: boolean;
  /** Signing-key rotation (docs/operations.md); these run their own transactions. */
  readonly jwks: Jwks;
  listSigningKeys(): Promise<signing.SigningKeyView[]>;
  publishSigningKey(input: Parameters<typeof signing.publishSigningKey>[1], o?: VerbOptions): Promise<signing.SigningResult>;
  switchSigningKey(input: Parameters<typeof signing.switchSigningKey>[1], o?: VerbOptions): Promise<signing.SigningResult>;
  resignLiveGrants(input?: Parameters<typeof signing.resignLiveGrants>[1], o?: VerbOptions): Promise<signing.SigningResult>;
  retireSigningKey(input: Parameters<typeof signing.retireSigningKey>[1], o?: VerbOptions): Promise<signing.SigningResult>;
  /** A short-lived signed token for a mobile key's phone. */
  issueMobileToken(input: mobileTokens.MobileTokenInput): Promise<mobileTokens.MobileTokenResult>;
  /** Operating modes from the cloud: lockdown / passage for a site or every site in scope. */
  requestMode(input: modes.RequestModeInput, o?: VerbOptions): ReturnType<typeof modes.requestMode>;
  /** Rotation of a gateway's own uplink key. */
  rotateUplinkKey(input: Parameters<typeof uplinkKeys.rotateUplinkKey>[1], o?: VerbOptions): ReturnType<typeof uplinkKeys.rotateUplinkKey>;
  listUplinkKeyRotations(gatewayId: string, scope: SiteScope): ReturnType<typeof uplinkKeys.listUplinkKeyRotations>;
  getModeRequest(requestId: string, scope: SiteScope): Promise<modes.ModeRequestView | null>;
  listSiteModeRequests(siteId: string, scope: SiteScope, limit?: number): Promise<modes.ModeRequestView[] | null>;
}
