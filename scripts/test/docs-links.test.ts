import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * The docs are the authoritative version of the design, so their links must lead somewhere: every
 * relative link of README.md and docs/*.md names a file of the repository, and a `#anchor` names a
 * heading of that page (GitHub's slugs: lower case, punctuation dropped, spaces to hyphens, repeats
 * numbered).
 */
const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const pages = [
  'README.md',
  'deploy/README.md',
  ...readdirSync(join(root, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

export function slugs(markdown: string): Set<string> {
  const out = new Set<string>();
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const m = fenced ? null : /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m?.[1]) continue;
    const base = m[1]
      .replace(/`/g, '')
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

function links(markdown: string): { target: string; line: number }[] {
  const out: { target: string; line: number }[] = [];
  let fenced = false;
  markdown.split('\n').forEach((text, i) => {
    if (text.startsWith('```')) fenced = !fenced;
    if (fenced) return;
    const noCode = text.replace(/`[^`]*`/g, '');
    for (const m of noCode.matchAll(/\]\(([^)\s]+)\)/g)) if (m[1]) out.push({ target: m[1], line: i + 1 });
  });
  return out;
}

describe('the docs links', () => {
  it('slugs headings as GitHub does', () => {
    expect([...slugs('# A title\n## Site TLS (the LAN)\n## `npm run chaos:money`\n## A title\n```\n# not a heading\n```')]).toEqual([
      'a-title',
      'site-tls-the-lan',
      'npm-run-chaosmoney',
      'a-title-1',
    ]);
  });

  it('lead to a file of the repository and, with an anchor, to a heading of it', () => {
    const broken: string[] = [];
    for (const page of pages) {
      const text = readFileSync(join(root, page), 'utf8');
      for (const { target, line } of links(text)) {
        if (/^[a-z]+:/i.test(target)) continue; // http:, https:, mailto:
        const [path = '', anchor] = target.split('#');
        const file = path === '' ? join(root, page) : resolve(dirname(join(root, page)), decodeURIComponent(path));
        const where = `${page}:${line} → ${target}`;
        if (relative(root, file).startsWith('..')) broken.push(`${where} (outside the repository)`);
        else if (!existsSync(file)) broken.push(`${where} (no such file)`);
        else if (anchor !== undefined && anchor !== '' && file.endsWith('.md') && !slugs(readFileSync(file, 'utf8')).has(anchor))
          broken.push(`${where} (no such heading)`);
      }
    }
    expect(broken).toEqual([]);
  });
});
