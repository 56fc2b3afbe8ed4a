import { dictionary } from '@zxcvbn-ts/language-common';

/**
 * What a staff password must be (docs/gateway.md "Staff accounts and
 * sessions"): long rather than clever, so a passphrase of ordinary words is
 * welcome (12 to 1024 characters, any characters, spaces included), and not
 * one that guessers try first. "Tried first" is the common-password list
 * zxcvbn-ts ships (@zxcvbn-ts/language-common, about 49,000 passwords from
 * breach corpora), compared without case, spaces or separators, and with
 * digits and symbols stripped from both ends, since `Password123456!` is
 * what a guesser's rules make of `password`. A password of fewer than five
 * different characters (`aaaaaaaaaaaa`, `abababababab`) is refused too.
 */
export const PASSWORD_MIN = 12;
export const PASSWORD_MAX = 1024;
const MIN_DISTINCT = 5;

let common: ReadonlySet<string> | null = null;
const commonPasswords = (): ReadonlySet<string> => (common ??= new Set(dictionary['passwords-common'].map((p) => p.toLowerCase())));

export type PasswordProblem = { readonly code: 'WEAK_PASSWORD' | 'BREACHED_PASSWORD'; readonly detail: string };

/** null: acceptable. */
export function passwordProblem(pw: string, username: string): PasswordProblem | null {
  const weak = (detail: string): PasswordProblem => ({ code: 'WEAK_PASSWORD', detail });
  // Length in characters as a person counts them (a kanji passphrase is not penalised for its UTF-16 length).
  const length = [...pw].length;
  if (length < PASSWORD_MIN) return weak(`at least ${PASSWORD_MIN} characters`);
  if (length > PASSWORD_MAX) return weak(`at most ${PASSWORD_MAX} characters`);
  if (pw.toLowerCase().includes(username.toLowerCase())) return weak('must not contain the username');
  if (new Set(pw.toLowerCase()).size < MIN_DISTINCT) return weak(`at least ${MIN_DISTINCT} different characters`);
  const squashed = pw.toLowerCase().replace(/[\s._-]+/g, '');
  const core = squashed.replace(/^[^\p{L}]+|[^\p{L}]+$/gu, '');
  const list = commonPasswords();
  if (list.has(squashed) || (core.length >= 4 && list.has(core)))
    return { code: 'BREACHED_PASSWORD', detail: 'a commonly used password (found in breach lists)' };
  return null;
}
