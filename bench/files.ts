import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { memoryOf, resetPeakMemory, startGatewayProcess } from '../test/support/processes';
import { sendUpload, uploadBody } from '../test/support/uploads';
import { pidOf, printedWorkspaceKey, required, round } from './support';

/**
 * `npm run bench:files`: uploads and downloads through the Node server, from outside over HTTP,
 * as the SDKs send them (multipart, the file part first, chunked, no Content-Length), bytes
 * generated as they are sent so that the client holds none of them.
 *
 * - one upload of BENCH_FILE_MIB (default 256) MiB, and its download: MiB/s, and the gateway's
 *   peak RSS over each against its RSS before (flat: the file streams to disk, never whole in memory);
 * - BENCH_FILE_CONCURRENT (default 4) uploads of a quarter of that at once: MiB/s together, peak RSS;
 * - an upload over the cap (GATEWAY_MAX_FILE_BYTES set to 16 MiB for it, a 1 GiB body): the time to
 *   its 413, and how much of the body the client got to send (the rest is never read).
 */

const MIB = 1024 * 1024;
const FILE_MIB = Number(process.env.BENCH_FILE_MIB ?? 256);
const CONCURRENT = Number(process.env.BENCH_FILE_CONCURRENT ?? 4);

async function upload(
  url: string,
  key: string,
  bytes: number,
): Promise<{ status: number; body: { id?: string }; sent: number }> {
  const { status, body, sentBeforeAnswer } = await sendUpload(url, key, uploadBody(bytes));
  return { status, body, sent: sentBeforeAnswer };
}

async function gatewayWith(env: Record<string, string>) {
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-files-'));
  const gateway = await startGatewayProcess({
    LOG_LEVEL: 'warn',
    DATA_DIR: dataDir,
    GATEWAY_REQUEST_TIMEOUT_MS: '600000',
    ...env,
  });
  const key = await printedWorkspaceKey(() => gateway.stdout());
  return {
    gateway,
    key,
    async stop() {
      await gateway.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Runs `fn`, answering its seconds and the gateway's peak RSS over it (MB). */
async function timed<T>(pid: number, fn: () => Promise<T>): Promise<{ value: T; seconds: number; peakMb: number }> {
  resetPeakMemory(pid);
  const started = performance.now();
  const value = await fn();
  const seconds = (performance.now() - started) / 1000;
  return { value, seconds, peakMb: memoryOf(pid).peakMb };
}

async function main() {
  const { gateway, key, stop } = await gatewayWith({});
  const pid = pidOf(gateway.child);
  try {
    await upload(gateway.url, key, 4 * MIB); // warm up
    const baseline = memoryOf(pid).rssMb;
    const one = await timed(pid, () => upload(gateway.url, key, FILE_MIB * MIB));
    if (one.value.status !== 200)
      throw new Error(`upload answered ${one.value.status}: ${JSON.stringify(one.value.body)}`);
    const download = await timed(pid, async () => {
      const response = await fetch(`${gateway.url}/v1/files/${one.value.body.id}/content`, {
        headers: { 'x-gateway-api-key': key },
      });
      let bytes = 0;
      for await (const chunk of required(response.body, 'the download body')) bytes += chunk.byteLength;
      return bytes;
    });
    if (download.value !== FILE_MIB * MIB) throw new Error(`downloaded ${download.value} bytes`);
    const each = Math.floor((FILE_MIB * MIB) / CONCURRENT);
    const many = await timed(pid, () =>
      Promise.all(Array.from({ length: CONCURRENT }, () => upload(gateway.url, key, each))),
    );
    if (many.value.some((result) => result.status !== 200)) throw new Error('a concurrent upload failed');

    const capped = await gatewayWith({ GATEWAY_MAX_FILE_BYTES: String(16 * MIB) });
    let over;
    try {
      over = await timed(pidOf(capped.gateway.child), () => upload(capped.gateway.url, capped.key, 1024 * MIB));
    } finally {
      await capped.stop();
    }
    return {
      file_mib: FILE_MIB,
      rss_before_mb: round(baseline, 1),
      upload: { mib_per_s: round(FILE_MIB / one.seconds, 1), peak_rss_mb: round(one.peakMb, 1) },
      download: { mib_per_s: round(FILE_MIB / download.seconds, 1), peak_rss_mb: round(download.peakMb, 1) },
      concurrent_uploads: {
        count: CONCURRENT,
        mib_per_s: round(FILE_MIB / many.seconds, 1),
        peak_rss_mb: round(many.peakMb, 1),
      },
      over_cap: {
        cap_mib: 16,
        body_mib: 1024,
        status: over.value.status,
        seconds_to_answer: round(over.seconds, 2),
        file_mib_sent_before_answer: round(over.value.sent / MIB, 1),
      },
    };
  } finally {
    await stop();
  }
}

console.log(JSON.stringify(await main(), null, 2));
