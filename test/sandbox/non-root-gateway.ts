import { parseConfig } from '../../src/config';
import { localSandbox } from '../../src/runtime/node/sandbox';
import { sandboxLimits } from '../../src/sandbox/limits';

/**
 * A gateway's local sandbox in a process of its own, for test/sandbox/non-root.test.ts to start as
 * a user who is not root: it opens a session, runs the code given as its argument, and prints the
 * sandbox's availability and the call's result as one JSON line.
 */

const sandbox = localSandbox({ limits: sandboxLimits(parseConfig({ GATEWAY_SANDBOX_DISK_MB: '64' })) });
const availability = await sandbox.availability();
const result = availability.available
  ? await sandbox.open({ workspaceId: 'ws_non_root', threadId: 'thread_non_root' }).then(async (session) => {
      const answer = await session.run(process.argv[2] ?? '');
      await session.close();
      return answer;
    })
  : null;
await sandbox.close();
process.stdout.write(`${JSON.stringify({ uid: process.getuid?.(), availability, result })}\n`);
