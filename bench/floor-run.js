// @ts-check
/**
 * bench:compare's stored floor: a whole streamed run (POST /v1/threads/runs) on this gateway's
 * stack and storage, and nothing else. hono on @hono/node-server; the embedded database as the
 * gateway opens it (a libSQL connection on the event loop, a writer thread that commits with
 * `synchronous = FULL`, the writes that arrive while it commits sharing its next transaction);
 * undici's pooled Agent to the provider. It stores the thread, its message and the run before it
 * tells anything, streams the provider's words as the Assistants API's events (those the gateway
 * sends for such a run), then stores the run's step, its answer and its end before it tells the run
 * completed: the rows the gateway stores of such a run, in as many commits.
 *
 * No keys, settings, validation, policies, limits, timeouts, bounds or recovery: what storing and
 * streaming a run costs on this stack at the least, for the gateway's own run to be read against
 * (`this_gateway_over_stored_floor`), as bench/floor-proxy.js is for a completion passed through.
 *
 * Plain JavaScript, run by bench/compare.ts as `node bench/floor-run.js <port> <provider origin>`
 * without a TypeScript loader, so that its process holds what the stack holds and nothing else.
 */
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { Agent } from 'undici';

const [port, origin] = process.argv.slice(2);
if (!port || !origin) throw new Error('usage: node bench/floor-run.js <port> <provider origin>');

const SCHEMA = `
  PRAGMA journal_mode = WAL;
  CREATE TABLE IF NOT EXISTS threads (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL);
  CREATE TABLE IF NOT EXISTS messages (id TEXT PRIMARY KEY, thread_id TEXT NOT NULL, role TEXT NOT NULL,
    content TEXT NOT NULL, created_at INTEGER NOT NULL);
  CREATE INDEX IF NOT EXISTS messages_thread ON messages (thread_id, created_at);
  CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, thread_id TEXT NOT NULL, assistant_id TEXT NOT NULL,
    status TEXT NOT NULL, created_at INTEGER NOT NULL, completed_at INTEGER);
  CREATE INDEX IF NOT EXISTS runs_thread ON runs (thread_id, created_at);
  CREATE TABLE IF NOT EXISTS run_steps (id TEXT PRIMARY KEY, run_id TEXT NOT NULL, message_id TEXT NOT NULL,
    status TEXT NOT NULL, created_at INTEGER NOT NULL);
  CREATE INDEX IF NOT EXISTS run_steps_run ON run_steps (run_id, created_at);`;

/**
 * The writer thread: each message a caller's writes ([statement, args] pairs), committed with the
 * others that arrived meanwhile in one transaction; each caller answered by its id once it is durable.
 */
const WRITER = `
  const { parentPort, workerData } = require('node:worker_threads');
  const db = new (require('libsql'))(workerData.path);
  db.exec('PRAGMA synchronous = FULL');
  const statements = {
    thread: db.prepare('INSERT INTO threads (id, created_at) VALUES (?, ?)'),
    message: db.prepare('INSERT INTO messages (id, thread_id, role, content, created_at) VALUES (?, ?, ?, ?, ?)'),
    run: db.prepare('INSERT INTO runs (id, thread_id, assistant_id, status, created_at) VALUES (?, ?, ?, ?, ?)'),
    step: db.prepare('INSERT INTO run_steps (id, run_id, message_id, status, created_at) VALUES (?, ?, ?, ?, ?)'),
    ended: db.prepare('UPDATE runs SET status = ?, completed_at = ? WHERE id = ?'),
  };
  let queued = [];
  const commit = () => {
    const group = queued;
    queued = [];
    db.exec('BEGIN IMMEDIATE');
    for (const { writes } of group) for (const [name, args] of writes) statements[name].run(args);
    db.exec('COMMIT');
    for (const { id } of group) parentPort.postMessage(id);
  };
  parentPort.on('message', (write) => {
    if (queued.push(write) === 1) setImmediate(commit);
  });`;

const path = join(mkdtempSync(join(tmpdir(), 'bench-floor-run-')), 'floor.db');
{
  const { default: Database } = await import('libsql');
  new Database(path).exec(SCHEMA);
}
const writer = new Worker(WRITER, { eval: true, workerData: { path } });
/** @type {Map<number, () => void>} */
const waiting = new Map();
let nextWrite = 0;
writer.on('message', (/** @type {number} */ id) => {
  waiting.get(id)?.();
  waiting.delete(id);
});
writer.unref();

/** @param {[string, unknown[]][]} writes */
const commit = (writes) =>
  new Promise((resolve) => {
    const id = nextWrite++;
    waiting.set(id, () => resolve(undefined));
    writer.postMessage({ id, writes });
  });

/** @param {string} prefix */
const newId = (prefix) => `${prefix}_${randomBytes(12).toString('base64url')}`;
const encoder = new TextEncoder();
/** @param {string} name @param {unknown} data */
const event = (name, data) => encoder.encode(`event: ${name}\ndata: ${JSON.stringify(data)}\n\n`);

const agent = new Agent({ headersTimeout: 0, bodyTimeout: 0 });
const app = new Hono();

app.post('/v1/threads/runs', async (c) => {
  /** @type {{ assistant_id: string, thread: { messages: { role: string, content: string }[] } }} */
  const body = await c.req.json();
  const now = Math.floor(Date.now() / 1000);
  const [threadId, messageId, runId, answerId, stepId] = ['thread', 'msg', 'run', 'msg', 'step'].map(newId);
  const content = body.thread.messages.map((message) => message.content).join('\n');
  await commit([
    ['thread', [threadId, now]],
    ['message', [messageId, threadId, 'user', content, now]],
    ['run', [runId, threadId, body.assistant_id, 'queued', now]],
  ]);
  const thread = { id: threadId, object: 'thread', created_at: now, metadata: {} };
  // The objects with the fields the API gives them (and the SDKs' types require), as the gateway sends them.
  const run = {
    id: runId,
    object: 'thread.run',
    created_at: now,
    assistant_id: body.assistant_id,
    thread_id: threadId,
    status: 'queued',
    started_at: null,
    expires_at: now + 600,
    cancelled_at: null,
    failed_at: null,
    completed_at: null,
    required_action: null,
    last_error: null,
    model: 'bench-model',
    instructions: '',
    tools: [],
    tool_resources: {},
    metadata: {},
    temperature: 1,
    top_p: 1,
    max_completion_tokens: null,
    max_prompt_tokens: null,
    truncation_strategy: { type: 'auto', last_messages: null },
    incomplete_details: null,
    usage: null,
    response_format: 'auto',
    tool_choice: 'auto',
    parallel_tool_calls: true,
  };
  const message = {
    id: answerId,
    object: 'thread.message',
    created_at: now,
    thread_id: threadId,
    status: 'in_progress',
    incomplete_details: null,
    completed_at: null,
    incomplete_at: null,
    role: 'assistant',
    content: [],
    assistant_id: body.assistant_id,
    run_id: runId,
    attachments: [],
    metadata: {},
  };
  const step = {
    id: stepId,
    object: 'thread.run.step',
    created_at: now,
    assistant_id: body.assistant_id,
    thread_id: threadId,
    run_id: runId,
    type: 'message_creation',
    status: 'in_progress',
    cancelled_at: null,
    completed_at: null,
    expired_at: null,
    failed_at: null,
    last_error: null,
    step_details: { type: 'message_creation', message_creation: { message_id: answerId } },
    metadata: {},
    usage: null,
  };

  const upstream = await agent.request({
    origin,
    path: '/v1/chat/completions',
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'bench-model', stream: true, messages: [{ role: 'user', content }] }),
  });
  const chunks = upstream.body[Symbol.asyncIterator]();
  const decoder = new TextDecoder();
  let pending = '';
  let answer = '';
  let opened = false;
  let ended = false;

  /** The events of the provider's lines in `text`, and whether its [DONE] came. */
  const deltas = (/** @type {string} */ text) => {
    pending += text;
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    /** @type {Uint8Array[]} */
    const out = [];
    let done = false;
    for (const line of lines) {
      if (!line.startsWith('data: ')) continue;
      const data = line.slice(6);
      if (data === '[DONE]') {
        done = true;
        continue;
      }
      const words = JSON.parse(data).choices?.[0]?.delta?.content;
      if (typeof words !== 'string' || words === '') continue;
      answer += words;
      out.push(
        event('thread.message.delta', {
          id: answerId,
          object: 'thread.message.delta',
          delta: { content: [{ index: 0, type: 'text', text: { value: words, annotations: [] } }] },
        }),
      );
    }
    return { out, done };
  };

  const stream = new ReadableStream({
    async pull(controller) {
      if (!opened) {
        opened = true;
        controller.enqueue(
          Buffer.concat([
            event('thread.created', thread),
            event('thread.run.created', run),
            event('thread.run.queued', run),
            event('thread.run.in_progress', { ...run, status: 'in_progress', started_at: now }),
            event('thread.run.step.created', step),
            event('thread.run.step.in_progress', step),
            event('thread.message.created', message),
            event('thread.message.in_progress', message),
          ]),
        );
        return;
      }
      if (ended) return;
      for (;;) {
        const { done, value } = await chunks.next();
        const read = done ? { out: [], done: true } : deltas(decoder.decode(value, { stream: true }));
        if (read.done) {
          ended = true;
          const at = Math.floor(Date.now() / 1000);
          await commit([
            ['step', [stepId, runId, answerId, 'completed', at]],
            ['message', [answerId, threadId, 'assistant', answer, at]],
            ['ended', ['completed', at, runId]],
          ]);
          const answered = [{ type: 'text', text: { value: answer, annotations: [] } }];
          const usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
          controller.enqueue(
            Buffer.concat([
              ...read.out,
              event('thread.message.completed', {
                ...message,
                status: 'completed',
                completed_at: at,
                content: answered,
              }),
              event('thread.run.step.completed', { ...step, status: 'completed', completed_at: at, usage }),
              event('thread.run.completed', { ...run, status: 'completed', started_at: now, completed_at: at, usage }),
              encoder.encode('event: done\ndata: [DONE]\n\n'),
            ]),
          );
          controller.close();
          return;
        }
        if (read.out.length > 0) {
          controller.enqueue(Buffer.concat(read.out));
          return;
        }
      }
    },
    cancel: () => {
      upstream.body.destroy();
    },
  });
  return c.body(stream, 200, { 'content-type': 'text/event-stream' });
});

serve({ fetch: app.fetch, port: Number(port), hostname: '127.0.0.1' }, () => console.log('ready'));
