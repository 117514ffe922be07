import { defined } from '../support/defined';
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { DOCS_SCRIPT } from '../../src/http/openapi/docs-page';
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

/**
 * The clients, all started by one shell at the lowest priority: `downloads` of `url` through
 * `curl … | sha384sum` (each one's status, integrity as the page writes it, and time), beside
 * `slowReaders` reading it at 1 KB/s until the downloads are over. Spawning 64 processes from this
 * one would hold, for a few hundred ms, the event loop that times /health.
 */
const CLIENTS = `
url="$1"; downloads="$2"; slow="$3"; dir=$(mktemp -d)
readers=""; fetchers=""
for i in $(seq "$slow"); do curl -sS --limit-rate 1K -o /dev/null "$url" & readers="$readers $!"; done
for i in $(seq "$downloads"); do
  ( s=$(date +%s%N); h=$(curl -sS -w '%{stderr}%{http_code}' "$url" 2>"$dir/$i" | sha384sum); e=$(date +%s%N)
    echo "$(cat "$dir/$i") \${h%% *} $(( (e - s) / 1000000 ))" ) &
  fetchers="$fetchers $!"
done
wait $fetchers; kill $readers 2>/dev/null; wait; rm -rf "$dir"
`;

function clients(
  url: string,
  downloads: number,
  slowReaders: number,
): Promise<{ status: number; integrity: string; ms: number }[]> {
  const child = spawn(
    'nice',
    ['-n', '19', 'bash', '-c', CLIENTS, 'clients', url, String(downloads), String(slowReaders)],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk));
  return new Promise((resolve) =>
    child.on('close', () =>
      resolve(
        out
          .trim()
          .split('\n')
          .filter(Boolean)
          .map((line) => {
            const [status, hash, ms] = line.split(' ');
            return {
              status: Number(status),
              integrity: `sha384-${Buffer.from(hash ?? '', 'hex').toString('base64')}`,
              ms: Number(ms),
            };
          }),
      ),
    ),
  );
}

it('serves its script whole to many clients at once, slow readers included, without holding copies', async () => {
  const url = `${defined(arena).gateway.url}/docs/${DOCS_SCRIPT.file}`;
  const { result } = await whileMeasured(
    watch,
    'docs_script',
    () => clients(url, DOWNLOADS, SLOW_READERS),
    RSS_BOUND_MB,
  );
  tally.inputsTried += DOWNLOADS + SLOW_READERS;
  tally.answered5xx += result.filter(({ status }) => status >= 500).length;
  expect(result.map(({ status }) => status)).toEqual(Array(DOWNLOADS).fill(200));
  expect(result.filter(({ integrity }) => integrity !== DOCS_SCRIPT.integrity)).toEqual([]);
  figures.docs_script_downloads = DOWNLOADS;
  figures.docs_script_slow_readers = SLOW_READERS;
  figures.docs_script_p50_ms = Math.round(
    percentile(
      result.map(({ ms }) => ms),
      0.5,
    ),
  );
  // The gateway still answers the page and the document afterwards.
  expect((await fetch(`${defined(arena).gateway.url}/docs`)).status).toBe(200);
  expect((await fetch(`${defined(arena).gateway.url}/openapi.json`)).status).toBe(200);
}, 180_000);
