// @ts-check
/**
 * bench:memory-floor's servers: what this gateway's stack holds in memory before any of the
 * gateway's own code. Plain JavaScript, run as `node bench/memory-floor-server.js <port> <mode>`
 * without a TypeScript loader, so that its process holds what the stack holds and nothing else.
 *
 * - `framework`: hono on @hono/node-server, one route that answers the body it was sent.
 * - `database`: the same, and the embedded database as the gateway opens it: a libSQL connection
 *   on the event loop that reads, and a writer thread with its own connection that commits
 *   (`synchronous = FULL`), each request's body inserted there before it is answered.
 */
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';

const [port, mode] = process.argv.slice(2);
if (!port || (mode !== 'framework' && mode !== 'database')) {
  throw new Error('usage: node bench/memory-floor-server.js <port> framework|database');
}

const database = mode === 'database' ? await openDatabase() : null;
const app = new Hono();
app.post('/echo', async (c) => c.text(await store(await c.req.text())));
serve({ fetch: app.fetch, port: Number(port), hostname: '127.0.0.1' }, () => console.log('ready'));

/**
 * framework: the body as it came; database: the body once committed, with the rows read back.
 *
 * @param {string} body
 */
async function store(body) {
  if (!database) return body;
  await database.commit(body);
  // A raw statement's row is an array, which libsql's types leave as unknown.
  const row = database.count.get();
  return `${Array.isArray(row) ? row[0] : row} ${body}`;
}

async function openDatabase() {
  const { default: Database } = await import('libsql');
  const path = join(mkdtempSync(join(tmpdir(), 'bench-memory-floor-')), 'floor.db');
  const db = new Database(path);
  db.exec('PRAGMA journal_mode = WAL; CREATE TABLE IF NOT EXISTS bodies (id INTEGER PRIMARY KEY, body TEXT NOT NULL)');
  const count = db.prepare('SELECT count(*) FROM bodies').raw(true);
  const writer = new Worker(
    `const { parentPort, workerData } = require('node:worker_threads');
     const db = new (require('libsql'))(workerData.path);
     db.exec('PRAGMA synchronous = FULL');
     const insert = db.prepare('INSERT INTO bodies (body) VALUES (?)');
     parentPort.on('message', ({ id, body }) => { insert.run(body); parentPort.postMessage(id); });`,
    { eval: true, workerData: { path } },
  );
  /** @type {Map<number, (value?: unknown) => void>} */
  const waiting = new Map();
  let next = 0;
  writer.on('message', (/** @type {number} */ id) => {
    const resolve = waiting.get(id);
    if (!resolve) throw new Error(`the writer answered commit ${id}, which nobody waits for`);
    waiting.delete(id);
    resolve();
  });
  writer.unref();
  return {
    count,
    commit: (/** @type {string} */ body) =>
      new Promise((resolve) => {
        const id = next++;
        waiting.set(id, resolve);
        writer.postMessage({ id, body });
      }),
  };
}
