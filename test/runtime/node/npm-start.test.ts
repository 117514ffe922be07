import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, startFakeUpstreamProcess, startGatewayProcess, type FakeUpstreamProcess } from '../../support/processes';

/**
 * `npm start` on a checkout that was never built (no dist/), as on a fresh clone after
 * `npm install`: the script builds what it runs (a prestart hook would not do: the repository's
 * .npmrc sets ignore-scripts, which skips npm's pre- and post- hooks too), and what it built is
 * whole: the threads the server starts from files beside it (the database writer, the document
 * parsers) are there. The checkout is a copy of what the script uses, beside this repository's
 * node_modules.
 */

const CHECKOUT = ['package.json', '.npmrc', 'tsconfig.json', 'bin', 'scripts', 'src', 'drizzle'];

let checkout: string;
let upstream: FakeUpstreamProcess;
beforeAll(async () => {
  checkout = mkdtempSync(join(tmpdir(), 'gateway-checkout-'));
  for (const entry of CHECKOUT) cpSync(join(ROOT, entry), join(checkout, entry), { recursive: true });
  symlinkSync(join(ROOT, 'node_modules'), join(checkout, 'node_modules'), 'dir');
  upstream = await startFakeUpstreamProcess();
});
afterAll(async () => {
  await upstream?.stop();
  rmSync(checkout, { recursive: true, force: true });
});

describe('npm start on a checkout without dist/', () => {
  it('builds the server, starts it on an empty data directory, serves runs and ingests an HTML file on its parser thread', async () => {
    expect(existsSync(join(checkout, 'dist'))).toBe(false);
    const gateway = await startGatewayProcess({ DATA_DIR: join(checkout, 'data'), LOG_LEVEL: 'info' }, 60_000, {
      command: ['npm', 'start'],
      cwd: checkout,
    });
    try {
      expect(existsSync(join(checkout, 'dist', 'node.js'))).toBe(true);
      const apiKey = /workspace API key\s+(gk_\S+)/.exec(gateway.stdout())?.[1];
      expect(apiKey).toBeDefined();
      const created = await fetch(`${gateway.url}/v1/virtual-keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          slug: 'fake',
          provider: 'openai',
          base_url: upstream.baseURL,
          api_key: 'none',
          default: true,
        }),
      });
      expect(created.status).toBe(200);

      const openai = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey, maxRetries: 0 });
      const assistant = await openai.beta.assistants.create({ model: 'gpt-4o' });
      const run = await openai.beta.threads.createAndRunPoll(
        { assistant_id: assistant.id, thread: { messages: [{ role: 'user', content: 'Hello' }] } },
        { pollIntervalMs: 20 },
      );
      expect(run.status).toBe('completed');

      const html =
        '<html><body><h1>Refunds</h1><p>Refunds are accepted within <b>30 days</b> of delivery.</p></body></html>';
      const file = await openai.files.create({
        file: await toFile(new TextEncoder().encode(html), 'refunds.html'),
        purpose: 'assistants',
      });
      const store = await openai.vectorStores.create({ name: 'docs' });
      const added = await openai.vectorStores.files.createAndPoll(
        store.id,
        { file_id: file.id },
        { pollIntervalMs: 20 },
      );
      expect(added.last_error).toBeNull();
      expect(added.status).toBe('completed');
      const found = await openai.vectorStores.search(store.id, { query: 'refunds within 30 days' });
      expect(found.data[0]?.content[0]?.text).toContain('Refunds are accepted within 30 days of delivery.');

      // The lazy route groups (app.ts) are chunks the server loads on their first request, not at its
      // start, and so is a response's stream of events (runtime/node/deps.ts, Deps.responseEvents,
      // whose module esbuild's unminified bundle opens with its path): the modules it imports
      // statically hold none of their code; the chunks beside it do.
      const dist = join(checkout, 'dist');
      const eager = staticImports(dist, 'node.js');
      const chunks = readdirSync(dist).filter((name) => /^node-.*\.js$/.test(name) && !eager.has(name));
      for (const summary of [
        'Create a model response',
        'Create a conversation',
        'Create a container',
        '// src/resources/responses/events.ts',
      ]) {
        expect([...eager].filter((name) => readFileSync(join(dist, name), 'latin1').includes(summary))).toEqual([]);
        expect(chunks.some((name) => readFileSync(join(dist, name), 'latin1').includes(summary))).toBe(true);
      }
      const response = await openai.responses.create({ model: 'gpt-4o', input: 'Hello' });
      expect(response.status).toBe('completed');
      // Streamed, its events come from the chunk the server loads for them.
      const events: string[] = [];
      for await (const event of await openai.responses.create({ model: 'gpt-4o', input: 'Hello', stream: true }))
        events.push(event.type);
      expect(events.at(0)).toBe('response.created');
      expect(events.at(-1)).toBe('response.completed');
    } finally {
      await gateway.stop('SIGTERM');
    }
  });
});

/** `entry` and the files of `dist` it imports statically, and they in turn: what a start loads. */
function staticImports(dist: string, entry: string, found = new Set<string>()): Set<string> {
  found.add(entry);
  const text = readFileSync(join(dist, entry), 'latin1');
  for (const [, imported] of text.matchAll(/^import\s(?:[^;]*?from\s*)?"\.\/([^"]+)"/gm)) {
    if (imported && !found.has(imported)) staticImports(dist, imported, found);
  }
  return found;
}
