import { failLeased } from '../lease-fail.js';

/** Fail for the notification queue (see failLeased): back to pending with backoff, or dead at maxAttempts; `last_error` leads with its code. */
export const failNotification = failLeased('notification_outbox');
