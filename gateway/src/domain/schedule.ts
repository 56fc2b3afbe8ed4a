/**
 * Schedules are evaluated with the shared definition (shared/src/schedule.ts),
 * the same one the cloud validates with when it issues a key, so that what
 * the cloud accepts is what the gateway opens for.
 */
export { inSchedule, knownTimeZone, localTime } from '@tobira/shared';
