// Rewrites the generated example blocks of docs/protocol.md. `--check` only
// compares and exits 1 when the document is stale.
import { readFileSync, writeFileSync } from 'node:fs';
import { DOC_PATH, applyExamples, renderProtocolExamples } from './protocol-examples.js';

const doc = readFileSync(DOC_PATH, 'utf8');
const next = applyExamples(doc, await renderProtocolExamples());
if (process.argv.includes('--check')) {
  if (next !== doc) {
    console.error('docs/protocol.md is stale: run npm run docs:protocol');
    process.exit(1);
  }
  console.log('docs/protocol.md is up to date');
} else {
  writeFileSync(DOC_PATH, next);
  console.log(next === doc ? 'docs/protocol.md unchanged' : 'docs/protocol.md examples regenerated');
}
