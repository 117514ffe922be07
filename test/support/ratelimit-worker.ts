import { defined } from './defined';
import { createInterface } from 'node:readline';
import { openDatabase } from '../../src/db/node';
import { ApiError } from '../../src/errors';
import { nodeConfig } from '../../src/runtime/node/config';
import { createNodeDeps } from '../../src/runtime/node/deps';
import { admitRequest, type RequestAttributes } from '../../src/ratelimit';
import { createPolicy } from '../../src/resources/policies/queries';
import { workspaceCaps } from '../../src/resources/identities/quotas';

/**
 * A second gateway process for test/ratelimit/enforcement.test.ts: it opens the database under
 * DATA_DIR with the gateway's own Node wiring (its own connection, counter store and policy
 * cache) and, with the clock stopped at <now ms>, does one of:
 *
 *   admit <attributes json> <count> <now ms>
 *     loads the workspace's policies, prints `ready`, waits for a line on stdin, then makes <count>
 *     admissions at once and prints {"admitted":n,"refused":m}
 *   create-policy <{organisationId, workspaceId} json> <policy body json> <now ms>
 *     creates the policy and prints its id
 */

const [command, first, second, nowText] = process.argv.slice(2);
const now = Number(nowText);
const config = nodeConfig({ DATA_DIR: process.env.DATA_DIR, LOG_LEVEL: 'silent' });
const database = await openDatabase(config);
const deps = await createNodeDeps(config, database, { now: () => now });

if (command === 'admit') {
  const attributes = JSON.parse(defined(first)) as RequestAttributes;
  await deps.policyCache.get(attributes.workspace_id);
  process.stdout.write('ready\n');
  const input = createInterface({ input: process.stdin });
  await new Promise((resolve) => input.once('line', resolve));
  input.close();
  const outcomes = await Promise.all(
    Array.from({ length: Number(second) }, () =>
      admitRequest(deps, attributes, { reservation: 0, baseTokens: 0 }).then(
        () => 'admitted' as const,
        (error: unknown) => {
          if (error instanceof ApiError && error.code === 'rate_limit_exceeded') return 'refused' as const;
          throw error;
        },
      ),
    ),
  );
  const count = (outcome: string) => outcomes.filter((o) => o === outcome).length;
  process.stdout.write(`${JSON.stringify({ admitted: count('admitted'), refused: count('refused') })}\n`);
} else if (command === 'create-policy') {
  const policy = await createPolicy(deps.db, JSON.parse(defined(first)), JSON.parse(defined(second)), now, {
    createdBy: 'workspace',
    caps: workspaceCaps(config),
  });
  process.stdout.write(`${policy.id}\n`);
} else {
  throw new Error(`unknown command ${command}`);
}
database.close();
