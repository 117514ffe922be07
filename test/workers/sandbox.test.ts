import { inject, describe, expect, it } from 'vitest';
import { remoteSandbox } from '../../src/sandbox/remote';

/**
 * The sandbox client a Worker uses (fetch alone), run inside workerd against `gateway sandbox`'s
 * server on this host (test/support/workers-global-setup.ts): a session, a file, pandas and a chart,
 * the bytes back; a wrong secret refused. Skipped, saying so, where the host has no sandbox.
 */

const served = inject('sandboxServer');
if (!served) console.warn('test/workers/sandbox.test.ts: skipped, this host has no local sandbox to serve.');

const MiB = 1024 * 1024;
const client = (secret: string) =>
  remoteSandbox({ url: served?.url ?? '', secret, fileBytes: 32 * MiB, logBytes: 64 * 1024, timeoutMs: 60_000 });

describe.skipIf(!served)('the remote sandbox, from workerd', () => {
  it('runs code in a session: a file put in, pandas, a chart back as PNG bytes, state kept', async () => {
    const sandbox = client(served?.secret ?? '');
    expect(await sandbox.availability()).toEqual({ available: true });
    const session = await sandbox.open({ workspaceId: 'ws_workers', threadId: 'thread_workers' });
    await session.putFile('points.csv', new TextEncoder().encode('x,y\n1,1\n2,4\n3,9\n'));
    const result = await session.run(
      "import pandas as pd, matplotlib.pyplot as plt\npoints = pd.read_csv('points.csv')\nplt.plot(points.x, points.y)\npoints.y.max()",
    );
    expect(result).toMatchObject({ status: 'ok', logs: '9\n', files: [] });
    expect(result.images).toHaveLength(1);
    expect([...(result.images[0]?.bytes.subarray(0, 4) ?? [])]).toEqual([0x89, 0x50, 0x4e, 0x47]);
    expect(await session.run('len(points)')).toMatchObject({ status: 'ok', logs: '3\n' });
    await session.close();
  });

  it('is refused with another secret, and says so without it', async () => {
    const answer = await client('not-the-secret-but-long-enough-to-be-one').availability();
    expect(answer).toEqual({ available: false, reason: 'The sandbox refused GATEWAY_SANDBOX_SECRET.' });
  });
});
