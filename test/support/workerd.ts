import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { Readable } from 'node:stream';
import { Miniflare } from 'miniflare';
import { unstable_getMiniflareWorkerOptions } from 'wrangler';
import { bundleWorker, TARGETS } from '../../scripts/bundle-worker';
import { startSqld, type RunningSqld } from '../../scripts/sqld';
import { migrateDatabase, openDatabase } from '../../src/db/node';
import { generateKeyBase64 } from '../../src/lib/secrets';
import { initialise } from '../../src/resources/identities/organisations';

/**
 * The gateway Worker in a workerd of its own, driven from outside over HTTP: the bundle `wrangler
 * deploy` uploads (scripts/bundle-worker.ts), with wrangler.toml's bindings, started by Miniflare
 * (as the workerd tests start the ingest Worker), its Durable Objects' storage in memory, on a
 * local sqld migrated and initialised here. For bench:worker and the reliability suite. Not
 * `wrangler dev`: it turns on the inspector's network events, which workerd then emits for every
 * subrequest (each SQL statement is one), and puts a second workerd in front as a proxy.
 */

export interface LocalWorker {
  /** Where the Worker listens, e.g. http://127.0.0.1:PORT. */
  url: string;
  /** The workspace API key of the tenant initialised on start. */
  workspaceKey: string;
  sqld: RunningSqld;
  /** Miniflare's workerd: this process's one child of that name (Linux /proc). */
  pid(): number;
  stop(): Promise<void>;
}

export async function startLocalWorker(
  options: {
    sqldArgs?: string[];
    bindings?: Record<string, string>;
    /** The DevTools protocol on this port (a profile of the Worker). */
    inspectorPort?: number;
    /**
     * Without Miniflare's own plumbing, which deployed Workers do not have: requests reach the
     * Worker on a socket of its own rather than through Miniflare's entry Worker (request logging,
     * Accept-Encoding, live reload: JavaScript that ran for every request), and its subrequests
     * (each SQL statement is one) leave without passing through the Worker that strips
     * CF-Connecting-IP. For bench:worker, which measures the Worker's CPU in the process's.
     */
    bare?: boolean;
  } = {},
): Promise<LocalWorker> {
  const bundleDir = mkdtempSync(join(tmpdir(), 'local-worker-'));
  const sqld = await startSqld({ args: options.sqldArgs });
  let worker: Miniflare | undefined;
  const stop = async () => {
    await worker?.dispose();
    await sqld.stop();
    rmSync(bundleDir, { recursive: true, force: true });
  };
  try {
    const workspaceKey = await initialiseTenant(sqld);
    const script = await bundleWorker(TARGETS.gateway, bundleDir, 'ignore');
    // Wrangler announces the .dev.vars it reads on stdout, where a bench prints its JSON.
    process.env.WRANGLER_LOG ??= 'warn';
    const { workerOptions } = unstable_getMiniflareWorkerOptions(TARGETS.gateway.config);
    worker = new Miniflare({
      host: '127.0.0.1',
      port: 0,
      inspectorPort: options.inspectorPort,
      // The Worker's logs (warnings and errors) on stderr: a bench's stdout is its JSON.
      handleRuntimeStdio: (stdout: Readable, stderr: Readable) => {
        stdout.pipe(process.stderr);
        stderr.pipe(process.stderr);
      },
      workers: [
        {
          ...workerOptions,
          modules: true,
          scriptPath: script,
          modulesRoot: dirname(script),
          ...(options.bare
            ? { stripCfConnectingIp: false, unsafeDirectSockets: [{ host: '127.0.0.1', port: 0 }] }
            : {}),
          bindings: {
            ...workerOptions.bindings,
            LIBSQL_URL: sqld.url,
            GATEWAY_ENCRYPTION_KEY: generateKeyBase64(),
            GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true',
            LOG_LEVEL: 'warn',
            ...options.bindings,
          },
        },
      ],
    });
    const ready = await worker.ready;
    const url = options.bare ? (await worker.unsafeGetDirectURL()).origin : ready.origin;
    return { url, workspaceKey, sqld, pid: workerdProcess, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/**
 * Migrates sqld and creates the tenant, as `npm run gateway -- init` does; answers its workspace key.
 * Also for `npm run dev:worker`'s sqld (test/reliability/dev-worker.test.ts).
 */
export async function initialiseTenant(sqld: Pick<RunningSqld, 'url' | 'dir'>): Promise<string> {
  const database = await openDatabase({ DATA_DIR: sqld.dir, LIBSQL_URL: sqld.url });
  try {
    await migrateDatabase(database.db);
    const created = await initialise(database.db, Date.now());
    if (!created) throw new Error('a fresh sqld database was already initialised');
    return created.workspace_api_key;
  } finally {
    database.close();
  }
}

function workerdProcess(): number {
  const found = readdirSync('/proc').filter((entry) => {
    if (!/^\d+$/.test(entry)) return false;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const parent = Number(stat.slice(stat.lastIndexOf(') ') + 2).split(' ')[1]);
      return parent === process.pid && stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(') ')) === 'workerd';
    } catch {
      return false; // exited meanwhile
    }
  });
  if (found.length !== 1) throw new Error(`expected one workerd child process, found ${found.length}`);
  return Number(found[0]);
}
