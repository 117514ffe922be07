import { formatInitResult } from './cli/output';
import { nodeConfig } from './runtime/node/config';
import { startGateway } from './runtime/node/start';
import { listVirtualKeys } from './resources/virtual-keys/commands';

/** `npm start`: the gateway on Node, on the embedded database unless LIBSQL_URL says otherwise. */
async function main() {
  const gateway = await startGateway(nodeConfig(process.env));
  if (gateway.initialised) process.stdout.write(formatInitResult(gateway.initialised));
  // Always said, whatever LOG_LEVEL: where to send requests.
  process.stdout.write(`Gateway listening on ${gateway.url} (database: ${gateway.database.location})\n`);
  if ((await listVirtualKeys(gateway.deps.db, {})).length === 0) {
    process.stdout.write(
      'No virtual key yet, so runs have no provider. To try the gateway without an account, start the bundled\n' +
        'fake provider in another terminal (`npm run fake-provider`) and follow the README\'s "A first run".\n',
    );
  }

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    gateway.deps.log.info('shutting down', { signal });
    void gateway.close().then(() => process.exit(0));
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
