import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

/** Small helpers for the demo's data folder: JSON files made once and kept (secrets with mode 0600). */
export function readJson<T>(path: string): T | undefined {
  return existsSync(path) ? (JSON.parse(readFileSync(path, 'utf8')) as T) : undefined;
}

export function writeJson(path: string, value: unknown, secret = false): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, `${JSON.stringify(value, null, 2)}\n`, { mode: secret ? 0o600 : 0o644 });
  if (secret) chmodSync(path, 0o600);
}

export async function once<T>(path: string, make: () => T | Promise<T>, secret = false): Promise<T> {
  const have = readJson<T>(path);
  if (have !== undefined) return have;
  const value = await make();
  writeJson(path, value, secret);
  return value;
}
