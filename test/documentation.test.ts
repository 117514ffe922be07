import { defined } from './support/defined';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  CHAPTERS,
  checkChapters,
  documentationFiles,
  runExamples,
  shellExamples,
  showsOutput,
} from '../scripts/check-docs';
import { configSchema } from '../src/config';
import { ROOT } from './support/processes';

/**
 * The documentation cannot drift: the chapters' shell examples run in their reading order, as
 * written, on one fresh gateway, and every output they show is what came back (scripts/check-docs.ts);
 * the configuration table lists exactly the variables the gateway reads, and every relative link
 * leads to a file.
 */

const read = (file: string) => readFileSync(file, 'utf8');

describe('the documentation', () => {
  it('keeps the README short: what it is, the two commands, a first run, links', () => {
    expect(read(join(ROOT, 'README.md')).split('\n').length).toBeLessThanOrEqual(150);
  });

  it('lists every configuration variable, and only those, in the table of docs/operations.md', () => {
    const variables = Object.keys(configSchema().shape).sort();
    const table = [...read(join(ROOT, 'docs/operations.md')).matchAll(/^\| `([A-Z][A-Z0-9_]+)` \|/gm)].map(
      (match) => match[1],
    );
    expect([...new Set(table)].sort()).toEqual(variables);
  });

  it('links only to files that exist', () => {
    for (const file of documentationFiles()) {
      for (const [, target] of read(file).matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)) {
        if (/^[a-z]+:/.test(defined(target))) continue;
        expect(existsSync(resolve(dirname(file), defined(target))), `${file} links to ${target}`).toBe(true);
      }
    }
  });

  it('lists in CHAPTERS, the order check:docs follows, every file with shell examples', () => {
    const withExamples = documentationFiles().filter((file) => shellExamples(file, read(file)).length > 0);
    expect(withExamples.map((file) => relative(ROOT, file)).sort()).toEqual([...CHAPTERS].sort());
  });

  it('links each chapter after the README to the one before it', () => {
    for (const [index, chapter] of CHAPTERS.entries()) {
      if (index === 0) continue;
      const before = defined(CHAPTERS[index - 1]);
      const link = relative(dirname(join(ROOT, chapter)), join(ROOT, before));
      expect(read(join(ROOT, chapter)), `${chapter} names ${before}`).toContain(`](${link}`);
    }
  });

  it('runs every chapter’s shell examples in order on one gateway, and each output they show is what came back', async ({
    expect,
  }) => {
    expect((await checkChapters()).problem).toBeNull();
  }, 300_000);
});

describe('the README’s wait_run', () => {
  it('ends on a run that failed, printing its status and its last_error, as on any final status', async ({
    expect,
  }) => {
    const readme = read(join(ROOT, 'README.md'));
    const helpers = /^json\(\) \{.*\n(?:wait_run\(\) \{[^]*?\n\}\n)/m.exec(readme)?.[0];
    expect(helpers).toContain('wait_run() {');
    const code = [
      defined(helpers),
      `curl -s $GATEWAY/v1/virtual-keys -H "Authorization: Bearer $GATEWAY_API_KEY" -H 'content-type: application/json' -d '{"slug":"fake","provider":"openai","base_url":"'$FAKE_PROVIDER'","api_key":"none","default":true}' > /dev/null`,
      `ID=$(curl -s $GATEWAY/v1/assistants -H "Authorization: Bearer $GATEWAY_API_KEY" -H 'content-type: application/json' -d '{"model":"gpt-4o"}' | json .id)`,
      `RUN=$(curl -s $GATEWAY/v1/threads/runs -H "Authorization: Bearer $GATEWAY_API_KEY" -H 'content-type: application/json' -d '{"assistant_id":"'$ID'","thread":{"messages":[{"role":"user","content":"Hi\\n#fake {\\"status\\":503}"}]}}')`,
      'wait_run $(echo "$RUN" | json .thread_id) $(echo "$RUN" | json .id)',
      '# → failed',
      '# → The upstream answered HTTP 503: …',
    ].join('\n');
    expect((await checkChapters(shellExamples('wait_run.md', `\`\`\`sh\n${code}\n\`\`\``))).problem).toBeNull();
  }, 120_000);
});

describe('check:docs', () => {
  const example = (code: string) => shellExamples('example.md', `\`\`\`sh\n${code}\n\`\`\``);

  it('fails when a shown output differs from what the command printed, naming the line and both', async () => {
    const { problem } = await runExamples(
      example('echo \'{"data":[]}\'\n# → {"data":[{"file_id":"file-…"}]}'),
      process.env,
    );
    expect(problem).toContain('example.md:3: shows');
    expect(problem).toContain('{"data":[{"file_id":"file-…"}]}');
    expect(problem).toContain('but the commands above it printed\n    {"data":[]}');
  });

  it('passes a shown output that matches, `…` standing for anything in a line and a `…` line for any lines', async () => {
    const code = [
      'echo "id: abc123 at 1767225600"',
      '# → id: … at …',
      "printf 'a\\nb\\nc\\nd\\n'",
      '# → a',
      '# → …',
      '# → d',
      'echo tail',
      '# → tail',
    ];
    expect((await runExamples(example(code.join('\n')), process.env)).problem).toBeNull();
  });

  it('fails an example that fails, and an output shown without `# →`', async () => {
    expect((await runExamples(example('false'), process.env)).problem).toContain('an example failed (exit 1)');
    expect(() => example('curl -s $GATEWAY/health\n# {"status":"ok"}')).toThrow(
      /example\.md:3: an output shown without '# →' is not compared/,
    );
  });

  it('matches shown lines at the end of what was printed, as the table says', () => {
    const table: [string[], string, boolean][] = [
      [['{"a":1}'], 'noise\n{"a":1}\n', true],
      [['{"a":…}'], '{"a":42}', true],
      [['{"a":…}'], '{"b":42}', false],
      [['x', '…', 'y'], 'x\ny', true],
      [['x', '…', 'y'], 'x\n1\n2\ny\n\n', true],
      [['x', 'y'], 'x\n1\ny', false],
      [['a.b'], 'axb', false], // a shown line is text, not a pattern
      [['end'], 'the end', false], // whole lines only
    ];
    for (const [shown, printed, matches] of table)
      expect(showsOutput(shown, printed), `${JSON.stringify(shown)} in ${JSON.stringify(printed)}`).toBe(matches);
  });
});
