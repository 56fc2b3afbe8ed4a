import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import { systemClock } from '@tobira/shared';
import { pgBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_CODES } from '../../src/http/codes.js';
import { startAdminApi, type AdminApi } from '../../src/cloud.js';
import { createApiToken } from '../../src/adapters/db/tokens.js';
import { startCloud } from '../cloud-helpers.js';
import { openTestDb, testLog, type TestDb } from '../helpers.js';

const run = promisify(execFile);
const DOC = new URL('../../../docs/api.md', import.meta.url);

/** The ```bash blocks of docs/api.md that carry an `# expect: NNN` line, in order. */
async function examples(): Promise<{ expect: number; script: string }[]> {
  const md = await readFile(DOC, 'utf8');
  return [...md.matchAll(/```bash\n([\s\S]*?)```/g)].flatMap((m) => {
    const script = m[1] ?? '';
    const e = /^# expect: (\d{3})$/m.exec(script);
    return e ? [{ expect: Number(e[1]), script }] : [];
  });
}

describe.each(pgBackends())('docs/api.md curl examples on %s', (backend) => {
  let t: TestDb;
  let broker: MqttTestBroker;
  let cloud: Awaited<ReturnType<typeof startCloud>>;
  let api: AdminApi;
  let token: string;
  beforeAll(async () => {
    t = await openTestDb(backend);
    broker = await startMqttBackend('aedes');
    cloud = await startCloud(t, broker.url);
    // the wall clock: the examples use real dates
    api = await startAdminApi({ cloud, db: cloud.db, log: testLog, clock: systemClock, host: '127.0.0.1', port: 0 });
    token = (await createApiToken(cloud.db, { name: 'docs', role: 'admin' })).token;
  });
  afterAll(async () => {
    await api?.close();
    await cloud?.stop();
    await broker?.stop();
    await t?.close();
  });

  it('run as printed (bash -c, real HTTP) and answer the status each one names', async () => {
    const list = await examples();
    expect(list.length).toBeGreaterThanOrEqual(10);
    // curl prints the body, then the status on its own line
    const preamble = `set -euo pipefail\ncurl() { command curl -w '\\n%{http_code}' "$@"; }\n`;
    for (const ex of list) {
      const { stdout } = await run('bash', ['-c', preamble + ex.script], {
        env: { ...process.env, TOBIRA_API: api.url, TOBIRA_TOKEN: token },
      });
      const lines = stdout.trimEnd().split('\n');
      const status = Number(lines.pop());
      const body = JSON.parse(lines.join('\n')) as Record<string, unknown>;
      expect({ script: ex.script, status }).toEqual({ script: ex.script, status: ex.expect });
      if (status >= 300) expect(body).toMatchObject({ status: expect.stringMatching(/^(refused|conflict)$/), code: expect.any(String) });
    }
  });

  it('document every code the HTTP layer answers with', async () => {
    const md = await readFile(DOC, 'utf8');
    for (const code of Object.keys(API_CODES)) expect(md).toContain(`\`${code}\``);
  });
});
