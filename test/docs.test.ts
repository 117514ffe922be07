import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { documentationFiles, runExamples, shellExamples } from '../scripts/check-docs';
import { configSchema } from '../src/config';
import { ROOT } from './support/processes';

/**
 * The documentation cannot drift: every shell example of README.md and docs/ runs as written
 * against a fresh gateway (scripts/check-docs.ts), the configuration table lists exactly the
 * variables the gateway reads, and every relative link leads to a file.
 */

const read = (file: string) => readFileSync(file, 'utf8');

describe('the documentation', () => {
  it('keeps the README short: what it is, the two commands, a first run, links', () => {
    expect(read(join(ROOT, 'README.md')).split('\n').length).toBeLessThanOrEqual(150);
  });

  it('lists every configuration variable, and only those, in the table of docs/operations.md', () => {
    const variables = Object.keys(configSchema.shape).sort();
    const table = [...read(join(ROOT, 'docs/operations.md')).matchAll(/^\| `([A-Z][A-Z0-9_]+)` \|/gm)].map((match) => match[1]);
    expect([...new Set(table)].sort()).toEqual(variables);
  });

  it('links only to files that exist', () => {
    for (const file of documentationFiles()) {
      for (const [, target] of read(file).matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)) {
        if (/^[a-z]+:/.test(target!)) continue;
        expect(existsSync(resolve(dirname(file), target!)), `${file} links to ${target}`).toBe(true);
      }
    }
  });

  // Each file's examples run against a gateway and a fake provider of their own: the files run at once.
  for (const file of documentationFiles()) {
    const examples = shellExamples(file, read(file));
    if (examples.length === 0) continue;
    it.concurrent(`runs the ${examples.length} shell examples of ${file.slice(ROOT.length)} as written`, async ({ expect }) => {
      expect(await runExamples(file, examples)).toBeNull();
    }, 180_000);
  }
});
