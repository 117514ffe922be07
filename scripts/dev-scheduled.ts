import { parseArgs } from 'node:util';
import { Miniflare } from 'miniflare';
import { unstable_readConfig } from 'wrangler';
import { TARGETS } from './bundle-worker';
import { devDataDir, devRegistryPath } from './wrangler';

/**
 * `npm run dev:scheduled -- gateway|ingest [--data DIR]`: runs that Worker's scheduled handler once
 * in the running `npm run dev:worker`, as its cron trigger would (wrangler dev never fires crons):
 * the gateway's recovery sweep, or the ingest Worker's wake-up for files waiting unclaimed.
 * Answers when the handler has returned; exits 1 when it threw or no dev:worker was found.
 *
 * Not the `curl …/cdn-cgi/handler/scheduled` that wrangler prints: under `[assets]` it reaches the
 * assets' router, which has no scheduled handler (500 "exception"), and it can reach only the
 * Worker served on the port, never the ingest Worker. Here a Worker in a workerd of its own calls
 * the named Worker's handler through the registry where dev:worker's wrangler says where its
 * Workers run (scripts/wrangler.ts devRegistryPath), as a service binding to a Worker of another
 * `wrangler dev` would.
 */

const { positionals, values } = parse(process.argv.slice(2));
const [which] = positionals;
if (positionals.length !== 1 || (which !== 'gateway' && which !== 'ingest'))
  usage(`name one Worker: gateway or ingest${which ? `, not '${positionals.join(' ')}'` : ''}`);
const config = unstable_readConfig({ config: TARGETS[which].config });
const { name } = config;
const cron = config.triggers.crons?.[0];
if (!name || !cron) usage(`${TARGETS[which].config} names no Worker or no cron`);

const caller = new Miniflare({
  unsafeDevRegistryPath: devRegistryPath(devDataDir(values.data)),
  modules: true,
  compatibilityDate: '2026-05-01',
  serviceBindings: { WORKER: name },
  script: `export default {
    async fetch(request, env) {
      const cron = new URL(request.url).searchParams.get('cron');
      try {
        await env.WORKER.scheduled({ cron });
        return new Response('ok');
      } catch (error) {
        return new Response(String(error?.message ?? error), { status: 500 });
      }
    },
  };`,
});
try {
  const response = await caller.dispatchFetch(`http://localhost/?cron=${encodeURIComponent(cron)}`);
  const text = await response.text();
  if (!response.ok) {
    console.error(`${name}'s scheduled handler did not run: ${text}\nIs \`npm run dev:worker\` running?`);
    process.exitCode = 1;
  } else console.log(`${name}: the scheduled handler ran (cron ${cron}); its logs are dev:worker's`);
} finally {
  await caller.dispose();
}

function parse(args: string[]) {
  try {
    return parseArgs({ args, options: { data: { type: 'string' } }, allowPositionals: true, strict: true });
  } catch (error) {
    return usage((error as Error).message);
  }
}

function usage(problem: string): never {
  console.error(`${problem}\nUsage: npm run dev:scheduled -- gateway|ingest [--data <dir>]`);
  process.exit(2);
}
