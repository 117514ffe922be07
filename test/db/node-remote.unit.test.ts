import { defined } from '../support/defined';
import { createServer, request, type Server } from 'node:http';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSqld, type RunningSqld } from '../../scripts/sqld';
import { openDatabase } from '../../src/db/node';
import { sleep, waitFor } from '../support/wait';

/**
 * The Node server's client of a libSQL server (LIBSQL_URL), as db/node.ts builds it, seen from a
 * proxy in front of a real sqld: what it asks for, and how many writes it has in flight.
 */

let sqld: RunningSqld;
let proxy: Server;
let proxyUrl: string;
const seen = {
  acceptEncodings: new Set<string>(),
  contentEncodings: new Set<string>(),
  inFlight: 0,
  most: 0,
  gather: 1,
};
/**
 * Each request is held until `seen.gather` are in flight (on a loaded machine the client's requests
 * arrive spread out; a client that never sends that many waits GATHER_MS), then HOLD_MS more: long
 * enough for any others to pile up.
 */
const GATHER_MS = 5_000;
const HOLD_MS = 30;

beforeAll(async () => {
  sqld = await startSqld();
  const target = new URL(sqld.url);
  proxy = createServer((incoming, outgoing) => {
    seen.acceptEncodings.add(String(incoming.headers['accept-encoding']));
    seen.most = Math.max(seen.most, ++seen.inFlight);
    const chunks: Buffer[] = [];
    incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
    incoming.on(
      'end',
      () =>
        void waitFor(() => seen.inFlight >= seen.gather, Boolean, GATHER_MS, 5)
          .then(() => sleep(HOLD_MS))
          .then(() => {
            const forwarded = request(
              {
                host: target.hostname,
                port: target.port,
                path: incoming.url,
                method: incoming.method,
                headers: incoming.headers,
              },
              (answer) => {
                seen.contentEncodings.add(String(answer.headers['content-encoding']));
                outgoing.writeHead(defined(answer.statusCode), answer.headers);
                answer.pipe(outgoing);
                answer.on('end', () => seen.inFlight--);
              },
            );
            forwarded.end(Buffer.concat(chunks));
          }),
    );
  });
  await new Promise<void>((listening) => proxy.listen(0, '127.0.0.1', listening));
  const address = proxy.address();
  if (!address || typeof address === 'string') throw new Error('the proxy has no port');
  proxyUrl = `http://127.0.0.1:${address.port}`;
});
afterAll(async () => {
  proxy.close();
  await sqld.stop();
});

describe("the Node server's libSQL client", () => {
  it('asks for answers uncompressed, and sends at most GATEWAY_DATABASE_WRITERS writes at once while reads go beside them, together', async () => {
    const database = await openDatabase({
      DATA_DIR: mkdtempSync(join(tmpdir(), 'remote-')),
      LIBSQL_URL: proxyUrl,
      GATEWAY_DATABASE_WRITERS: 2,
    });
    try {
      await database.client.execute('CREATE TABLE IF NOT EXISTS w (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)');
      seen.most = 0;
      seen.gather = 2;
      await Promise.all(
        Array.from({ length: 12 }, (_, n) =>
          database.client.execute({ sql: 'INSERT INTO w (n) VALUES (?)', args: [n] }),
        ),
      );
      expect(seen.most).toBe(2);
      seen.most = 0;
      seen.gather = 3;
      const reads = await Promise.all([
        ...Array.from({ length: 4 }, (_, n) =>
          database.client.execute({ sql: 'INSERT INTO w (n) VALUES (?)', args: [100 + n] }),
        ),
        ...Array.from({ length: 3 }, () => database.client.execute('SELECT count(*) AS n FROM w')),
      ]);
      // Two writes at a time, and beside them the three reads, sent together as one request
      // (coalescing-client.ts): one snapshot, so all three saw the same count.
      expect(seen.most).toBe(3);
      expect(new Set(reads.slice(4).map((read) => defined(read.rows[0]).n)).size).toBe(1);
      seen.gather = 1;
      expect(defined((await database.client.execute('SELECT count(*) AS n FROM w')).rows[0]).n).toBe(16);
    } finally {
      database.close();
    }
    // sqld gzips an answer for a client that accepts it (Node's fetch does, by default).
    expect([...seen.acceptEncodings]).toEqual(['identity']);
    expect([...seen.contentEncodings]).toEqual(['undefined']);
  });
});
