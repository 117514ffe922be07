import { serve } from '@hono/node-server';
import { randomBytes } from 'node:crypto';
import { lookup as dnsLookup } from 'node:dns/promises';
import { link, mkdir, readFile, stat, unlink, writeFile } from 'node:fs/promises';
import { isIP, type AddressInfo, type Socket } from 'node:net';
import { dirname, join } from 'node:path';
import { createApp } from './app';
import { parseConfig, type Config } from './config';
import { migrateDatabase, openDatabase, type NodeDatabase } from './db/node';
import type { Deps } from './deps';
import { generateKeyBase64, SecretBox, secretBoxFromEnv } from './lib/secrets';
import { checkResolvedAddress, type UpstreamUrlOptions } from './lib/upstream-url';
import { TaskTracker } from './lib/tasks';
import { createLogger } from './logger';
import { UpstreamError } from './providers/types';
import { LibsqlCounterStore, PolicyCache } from './ratelimit';
import { abortInProcess, dispatchInProcess, streamInProcess } from './runs/dispatch';
import { sweepRuns } from './runs/recovery';
import { initialise, type InitResult } from './services/organisations';
import { leaseMs } from './services/runs';
import { upstreamRules } from './services/upstream-rules';
import { nodeSlices } from './node-slices';

/**
 * How the gateway runs on Node: the runtime half that node.ts (the entry), the CLI, the tests, the
 * demo and the benchmarks share. Nothing here runs on import.
 */

/**
 * The configuration on Node: the schema Workers use too, with no default of Node's own (private
 * upstreams, which local model servers need, follow the database's workspaces on both).
 */
export function nodeConfig(env: Record<string, string | undefined>): Config {
  return parseConfig(env);
}

export const ENCRYPTION_KEY_FILE = 'encryption.key';

/**
 * The box for provider secrets on Node (the server and the CLI): GATEWAY_ENCRYPTION_KEY when set.
 * Otherwise, on the embedded database only, the key in DATA_DIR/encryption.key, generated on first
 * use. A remote database is shared with other hosts (Workers, other servers) that must all hold the
 * same key, so there the key has to be configured: a local file would silently diverge.
 */
export async function loadSecretBox(config: Config): Promise<SecretBox> {
  if (config.GATEWAY_ENCRYPTION_KEY) return secretBoxFromEnv(config.GATEWAY_ENCRYPTION_KEY);
  if (config.LIBSQL_URL) {
    throw new Error(
      'GATEWAY_ENCRYPTION_KEY is required with LIBSQL_URL: set it to the same 32-byte base64 key on every ' +
        'host that uses this database (generate one with `openssl rand -base64 32`).',
    );
  }
  const path = join(config.DATA_DIR, ENCRYPTION_KEY_FILE);
  const text = await readKeyFile(path);
  return SecretBox.fromBase64(text).catch((error: Error) => {
    throw new Error(`Invalid encryption key in ${path}: ${error.message}`);
  });
}

/**
 * Reads the key file, creating it first if there is none. The key is written to a private
 * temporary file and then hard-linked into place: the link either appears complete or fails
 * because another process got there first, whose key is then read. (Writing the final name with
 * the 'wx' flag alone would let a racing reader see it empty.) A file that others can read is
 * refused rather than fixed, as ssh refuses a loose private key: it may already have leaked.
 */
async function readKeyFile(path: string): Promise<string> {
  const existing = await readPrivateFile(path);
  if (existing !== null) return existing;
  // The data directory, when the key comes first, is as private as the key (db/node.ts).
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  const temporary = `${path}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  await writeFile(temporary, `${generateKeyBase64()}\n`, { flag: 'wx', mode: 0o600 });
  try {
    await link(temporary, path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  } finally {
    await unlink(temporary);
  }
  const created = await readPrivateFile(path);
  if (created === null) throw new Error(`Could not create the encryption key file ${path}.`);
  return created;
}

async function readPrivateFile(path: string): Promise<string | null> {
  let mode: number;
  try {
    mode = (await stat(path)).mode;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw error;
  }
  // Windows has no such permission bits to check.
  if (process.platform !== 'win32' && (mode & 0o077) !== 0) {
    throw new Error(
      `The encryption key file ${path} is accessible to other users (mode ${(mode & 0o777).toString(8)}). ` +
        `Restrict it with \`chmod 600 ${path}\` (and consider the key exposed if others could read it).`,
    );
  }
  return readFile(path, 'utf8');
}

/**
 * The Node deps around an open database. `overrides` lets tests swap the clock, the logger or the
 * secret box; without one, the box comes from loadSecretBox.
 */
export async function createNodeDeps(config: Config, database: NodeDatabase, overrides: Partial<Deps> = {}) {
  const tasks = new TaskTracker();
  const log = overrides.log ?? createLogger(config.LOG_LEVEL);
  const deps: Deps = {
    db: database.db,
    config,
    log,
    secrets: overrides.secrets ?? (await loadSecretBox(config)),
    counters: new LibsqlCounterStore(database.countersClient, { log }),
    policyCache: new PolicyCache(database.db),
    now: Date.now,
    background: (_c, task) => tasks.track(task),
    dispatchRun: dispatchInProcess,
    streamRun: streamInProcess,
    abortRun: abortInProcess,
    slices: nodeSlices,
    fetch: upstreamFetch({ rules: () => upstreamRules(database.db, config, { now: deps.now() }) }),
    ...overrides,
  };
  return { deps, tasks };
}

type Resolve = (hostname: string) => Promise<{ address: string }[]>;

const resolveAll: Resolve = (hostname) => dnsLookup(hostname, { all: true, verbatim: true });

/**
 * Node's upstream fetch. A virtual key's base_url was checked as written (lib/upstream-url.ts),
 * but a name can point anywhere, a metadata service or a private address included: so a name is
 * resolved just before the fetch and every address it has is judged by the rules in force
 * (`rules`, read per fetch: they follow the database's workspaces). A name's addresses are reused
 * for NAME_ADDRESSES_MS, so that each run does not pay a second lookup before its first byte (the
 * fetch resolves the name again anyway). A name that does not resolve is left to fetch, which
 * fails as it would. What this cannot stop is a name that resolves differently a moment later
 * (DNS rebinding with a zero TTL); `resolve` is a parameter for tests.
 */
export function upstreamFetch(options: {
  rules: () => UpstreamUrlOptions | Promise<UpstreamUrlOptions>;
  resolve?: Resolve;
}): typeof fetch {
  const resolve = options.resolve ?? resolveAll;
  const known = new Map<string, { addresses: string[]; until: number }>();
  const addressesOf = async (hostname: string): Promise<string[] | null> => {
    const cached = known.get(hostname);
    if (cached && cached.until > Date.now()) return cached.addresses;
    const resolved = await resolve(hostname).catch(() => null);
    if (resolved === null) return null;
    const addresses = resolved.map(({ address }) => address);
    known.delete(hostname);
    if (known.size >= NAME_ADDRESSES_MAX) known.delete(known.keys().next().value!);
    known.set(hostname, { addresses, until: Date.now() + NAME_ADDRESSES_MS });
    return addresses;
  };
  return async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    if (!url.hostname.startsWith('[') && isIP(url.hostname) === 0) {
      const addresses = await addressesOf(url.hostname);
      if (addresses !== null) {
        const rules = await options.rules();
        let problem: string | null = null;
        for (const address of addresses) problem ??= checkResolvedAddress(address, rules, url);
        // Not the address itself: it would tell a tenant about the gateway's network.
        if (problem) throw new UpstreamError('address', `The virtual key's base_url is not allowed: ${problem}`);
      }
    }
    return fetch(input, init);
  };
}

const NAME_ADDRESSES_MS = 10_000;
const NAME_ADDRESSES_MAX = 1_000;

export interface RunningGateway {
  url: string;
  deps: Deps;
  database: NodeDatabase;
  /** Keys created by this start, when the database was empty. */
  initialised: InitResult | null;
  /** Stops listening, waits for background work (up to `drainMs`), closes the database. */
  close(drainMs?: number): Promise<void>;
}

/**
 * @hono/node-server reads up to three chunks of a body that is not declared chunked, with a timer
 * between reads, to give it a Content-Length: an event stream would wait for that before its
 * headers and first events leave. Declaring event streams chunked sends each event as it comes.
 * (Workers frame responses themselves; this is Node's alone.)
 */
async function declareStreams(response: Response | Promise<Response>): Promise<Response> {
  const answer = await response;
  if (answer.body && answer.headers.get('content-type')?.startsWith('text/event-stream')) {
    answer.headers.set('transfer-encoding', 'chunked');
  }
  return answer;
}

/**
 * Lingering close, as web servers do it. When Node closes a connection after its last response
 * (the client asked for `connection: close`), it closes the socket as soon as the answer is
 * written. If the client is still sending a body the gateway refused early (a 413 after the
 * limit), the unread bytes make the kernel reset the connection, and a reset can destroy the 413
 * before the client reads it. So the socket only half-closes: the answer and a FIN go out, the
 * rest of the body is read and dropped, and the socket closes when the client closes its side,
 * or after LINGER_MS.
 */
const LINGER_MS = 2_000;

function lingerOnClose(socket: Socket) {
  socket.destroySoon = function lingeringClose(this: Socket) {
    this.end();
    const timer = setTimeout(() => this.destroy(), LINGER_MS);
    timer.unref();
    this.once('close', () => clearTimeout(timer));
  };
}

/** Opens and migrates the database, initialises an empty one, and listens on HOST:PORT. */
export async function startGateway(config: Config, overrides: Partial<Deps> = {}): Promise<RunningGateway> {
  // The key first: a missing one stops the start before the database is touched.
  const secrets = overrides.secrets ?? (await loadSecretBox(config));
  const database = await openDatabase(config);
  await migrateDatabase(database.db);
  const { deps, tasks } = await createNodeDeps(config, database, { ...overrides, secrets });
  const initialised = await initialise(database.db, deps.now());
  for (const warning of database.warnings) deps.log.warn(warning);
  const app = createApp(deps);
  const server = serve({
    fetch: (request) => declareStreams(app.fetch(request)),
    hostname: config.HOST,
    port: config.PORT,
    // A client has this long for a request's headers, and for the whole request: what a slow
    // sender can hold. They bound receiving the request only, never the answer, so a long event
    // stream is not cut. Node checks them every connectionsCheckingInterval (30 s by default).
    serverOptions: {
      headersTimeout: config.GATEWAY_HEADERS_TIMEOUT_MS,
      requestTimeout: config.GATEWAY_REQUEST_TIMEOUT_MS,
      connectionsCheckingInterval: Math.min(1_000, config.GATEWAY_HEADERS_TIMEOUT_MS),
    },
  });
  // Connections past this are closed as they arrive, so that many clients cannot exhaust the
  // process's file descriptors and memory; those already open are served as before.
  server.maxConnections = config.GATEWAY_MAX_CONNECTIONS;
  server.on('connection', lingerOnClose);
  // A connection with no traffic either way for this long is closed: a client that stopped
  // reading a stream (its run carries on without it) would otherwise hold its socket for ever.
  // Twice the upstream timeouts: a healthy stream is never silent longer than those.
  server.setTimeout(2 * Math.max(config.GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS, config.GATEWAY_UPSTREAM_IDLE_TIMEOUT_MS));
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;
  deps.log.info('listening', { url, database: database.location });

  // Runs left behind by a crash of this or another process, now and periodically.
  const sweep = () =>
    tasks.track(
      sweepRuns(deps).then(
        (settled) => settled > 0 && deps.log.warn('settled runs left behind', { count: settled }),
        (error: unknown) => deps.log.error('run recovery sweep failed', { error }),
      ),
    );
  sweep();
  // Twice per lease: a run whose executor died is settled at most 1.5 leases after its last renewal.
  const sweeper = setInterval(sweep, leaseMs(config) / 2);
  sweeper.unref();

  return {
    url,
    deps,
    database,
    initialised,
    async close(drainMs = 10_000) {
      clearInterval(sweeper);
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        // Idle keep-alive connections would hold close() open; streams in flight end on their own.
        if ('closeIdleConnections' in server) server.closeIdleConnections();
      });
      if (!(await tasks.drain(drainMs))) {
        deps.log.warn('background tasks still running at exit', { count: tasks.size });
      }
      database.close();
    },
  };
}
