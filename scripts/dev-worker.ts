import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { migrateDatabase, openDatabase } from '../src/db/node';
import { generateKeyBase64 } from '../src/lib/secrets';
import { DEV_SQLD_ARGS, startSqld } from './sqld';
import { devDataDir, devRegistryPath, exitCode, ROOT, spawnWrangler } from './wrangler';

/**
 * `npm run dev:worker [-- --port N --data DIR]`: the Worker on http://127.0.0.1:8788 (beside
 * `npm start`'s 8787) under `wrangler dev` (workerd, offline), on a local libSQL server (sqld) on
 * 127.0.0.1:8080 with its data in ./data/sqld (DIR/sqld), migrated first. Ctrl-C or SIGTERM stops
 * wrangler (and its workerd), then sqld. `npm run dev:scheduled -- gateway|ingest` runs a Worker's
 * cron handler in it (scripts/dev-scheduled.ts).
 *
 * The Worker's other variables come from .dev.vars, created from .dev.vars.example on the first
 * run with a fresh GATEWAY_ENCRYPTION_KEY: the key has to outlive the process, because the
 * provider secrets in ./data/sqld are encrypted under it.
 */

const SQLD_PORT = 8080;
const LIBSQL_URL = `http://127.0.0.1:${SQLD_PORT}`;

const { port: WORKER_PORT, data: DATA_DIR } = options(process.argv.slice(2));

/**
 * `--port N`: where the Worker listens; 8788 by default, so that `npm start` can keep 8787.
 * `--data DIR`: the local data (sqld's, the Durable Objects', the buckets' and queues'); ./data by default.
 */
function options(args: string[]): { port: number; data: string } {
  let values: { port?: string; data?: string } = {};
  try {
    ({ values } = parseArgs({
      args,
      options: { port: { type: 'string', short: 'p' }, data: { type: 'string' } },
      strict: true,
    }));
  } catch (error) {
    usage((error as Error).message);
  }
  const data = devDataDir(values.data);
  const { port } = values;
  if (port === undefined) return { port: 8788, data };
  const number = Number(port);
  if (!Number.isInteger(number) || number < 1 || number > 65535)
    usage(`--port must be a port number (1-65535), got '${port}'`);
  return { port: number, data };
}

function usage(problem: string): never {
  console.error(`${problem}\nUsage: npm run dev:worker [-- --port <port> --data <dir>]`);
  process.exit(2);
}

ensureDevVars();

const sqld = await startSqld({ port: SQLD_PORT, dataDir: join(DATA_DIR, 'sqld'), args: DEV_SQLD_ARGS });
try {
  const database = await openDatabase({ DATA_DIR, LIBSQL_URL });
  try {
    await migrateDatabase(database.db);
  } finally {
    database.close();
  }
} catch (error) {
  await sqld.stop();
  throw error;
}
console.log(`sqld on ${LIBSQL_URL} (data in ${join(DATA_DIR, 'sqld')}), migrated. Bootstrap keys with:`);
console.log(`  LIBSQL_URL=${LIBSQL_URL} npm run gateway -- init\n`);

const wrangler = spawnWrangler(
  [
    'dev',
    // Both Workers in one workerd, so that the gateway's queue reaches the ingest Worker: the first
    // config is the one served on WORKER_PORT and the one the flags below apply to.
    '-c',
    'wrangler.toml',
    '-c',
    'wrangler.ingest.toml',
    '--local',
    '--ip',
    '127.0.0.1',
    '--port',
    String(WORKER_PORT),
    '--show-interactive-dev-session=false',
    // Keeps Durable Object storage with the rest of the local data.
    '--persist-to',
    join(DATA_DIR, 'wrangler'),
    // Always this sqld, whatever .dev.vars says.
    '--var',
    `LIBSQL_URL:${LIBSQL_URL}`,
    // A development database may hold several workspaces, and local model servers (and the fake
    // upstream) listen on loopback: allowed, as an admin would allow them.
    '--var',
    'GATEWAY_ALLOW_PRIVATE_UPSTREAMS:true',
  ],
  // The registry where wrangler dev says where each Worker runs, which `npm run dev:scheduled`
  // reads: this checkout's own, not the user's (~/.config/.wrangler/registry), which every
  // `wrangler dev` on the machine writes its Workers into by name.
  { WRANGLER_REGISTRY_PATH: devRegistryPath(DATA_DIR) },
);

let stopping = false;
async function stop(code: number) {
  if (stopping) return;
  stopping = true;
  if (wrangler.exitCode === null && wrangler.signalCode === null) wrangler.kill('SIGTERM');
  const exited = await exitCode(wrangler);
  await sqld.stop();
  process.exit(code || exited);
}
process.on('SIGINT', () => void stop(0));
process.on('SIGTERM', () => void stop(0));
void exitCode(wrangler).then((code) => stop(code));
// `npm run` signals only its shell, which exits without passing SIGTERM on: notice being orphaned.
const parent = process.ppid;
setInterval(() => process.ppid !== parent && void stop(0), 500).unref();

function ensureDevVars() {
  const devVars = join(ROOT, '.dev.vars');
  if (existsSync(devVars)) return;
  const text = readFileSync(join(ROOT, '.dev.vars.example'), 'utf8').replace(
    /^GATEWAY_ENCRYPTION_KEY=$/m,
    `GATEWAY_ENCRYPTION_KEY=${generateKeyBase64()}`,
  );
  writeFileSync(devVars, text, { flag: 'wx', mode: 0o600 });
  console.log('Created .dev.vars from .dev.vars.example, with a new GATEWAY_ENCRYPTION_KEY.');
}
