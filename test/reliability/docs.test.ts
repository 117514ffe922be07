import { spawn } from 'node:child_process';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { DOCS_SCRIPT } from '../../src/openapi/docs-page';
import { atRest, closeArena, openArena, percentile, whileMeasured, type Arena, type Watch } from './support';

/**
 * /docs and its script are public (no key) and the script is 4.9 MB: anyone can ask for it many
 * times at once, and read it slowly. On a gateway process, with another tenant's streamed runs
 * going on (whileMeasured): 48 clients download it at once while 16 others read it at 1 KB/s.
 * Every download is the whole file (its sha384 the page's integrity); the slow readers cost no
 * more than what their sockets hold (the file is streamed as it is read, not held: 64 copies would
 * be over 300 MB); the other tenant's runs complete and /health does not stall. The clients are
 * curl processes at the lowest priority, as openArena's hostile fake: in this process, receiving
 * 230 MB would hold the event loop that times /health, and at the usual priority 64 clients and
 * their hashing take the machine's two cores from the gateway under test.
 */

const DOWNLOADS = 48;
const SLOW_READERS = 16;
/** Peak RSS growth allowed: chunks in flight and not yet collected, far below one copy per client. */
const RSS_BOUND_MB = 120;

const tally = { inputsTried: 0, answered5xx: 0, gatewayStalls: 0, outOfMemoryDeaths: 0 };
const figures: Record<string, number> = {};
let arena: Arena | undefined;
let watch: Watch;

beforeAll(async () => {
  arena = await openArena('docs', { LOG_LEVEL: 'warn', GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true' }, tally);
  ({ watch } = await atRest(arena, tally, figures));
}, 120_000);

afterAll(() => closeArena(arena, 'docs', tally, figures));

/** `curl … | sha384sum` in a shell of its own: the status, the body's integrity as the page writes it, the time. */
function download(url: string): Promise<{ status: number; integrity: string; ms: number }> {
  const started = performance.now();
  // The status goes to stderr (curl's %{stderr}), the body through sha384sum to stdout.
  const child = spawn('nice', ['-n', '19', 'sh', '-c', `curl -sS -w '%{stderr}%{http_code}' '${url}' | sha384sum`], { stdio: ['ignore', 'pipe', 'pipe'] });
  let hash = '';
  let status = '';
  child.stdout.on('data', (chunk: Buffer) => (hash += chunk));
  child.stderr.on('data', (chunk: Buffer) => (status += chunk));
  return new Promise((resolve) =>
    child.on('close', () =>
      resolve({ status: Number(status.trim()), integrity: `sha384-${Buffer.from(hash.split(' ')[0] ?? '', 'hex').toString('base64')}`, ms: performance.now() - started }),
    ),
  );
}

/** A curl reading `url` at 1 KB/s until it is stopped: it ends when its process has. */
function slowReader(url: string): { stop(): Promise<void> } {
  const child = spawn('nice', ['-n', '19', 'curl', '-sS', '--limit-rate', '1K', '-o', '/dev/null', url], { stdio: 'ignore' });
  const closed = new Promise<void>((resolve) => child.on('close', () => resolve()));
  return {
    stop: () => {
      child.kill('SIGKILL');
      return closed;
    },
  };
}

it('serves its script whole to many clients at once, slow readers included, without holding copies', async () => {
  const url = `${arena!.gateway.url}/docs/${DOCS_SCRIPT.file}`;
  const { result } = await whileMeasured(
    watch,
    'docs_script',
    async () => {
      const slow = Array.from({ length: SLOW_READERS }, () => slowReader(url));
      const downloads = await Promise.all(Array.from({ length: DOWNLOADS }, () => download(url)));
      await Promise.all(slow.map((reader) => reader.stop()));
      return downloads;
    },
    RSS_BOUND_MB,
  );
  tally.inputsTried += DOWNLOADS + SLOW_READERS;
  tally.answered5xx += result.filter(({ status }) => status >= 500).length;
  expect(result.map(({ status }) => status)).toEqual(Array(DOWNLOADS).fill(200));
  expect(result.filter(({ integrity }) => integrity !== DOCS_SCRIPT.integrity)).toEqual([]);
  figures.docs_script_downloads = DOWNLOADS;
  figures.docs_script_slow_readers = SLOW_READERS;
  figures.docs_script_p50_ms = Math.round(percentile(result.map(({ ms }) => ms), 0.5));
  // The gateway still answers the page and the document afterwards.
  expect((await fetch(`${arena!.gateway.url}/docs`)).status).toBe(200);
  expect((await fetch(`${arena!.gateway.url}/openapi.json`)).status).toBe(200);
}, 180_000);
