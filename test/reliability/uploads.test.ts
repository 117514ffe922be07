import { defined } from '../support/defined';
import { mkdtempSync, rmSync } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@libsql/client';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { startGatewayProcess, type GatewayProcess } from '../support/processes';
import { recordTally } from '../support/tally';
import { holdsPattern, sendUpload, uploadBody, type Sent } from '../support/uploads';
import { openDataDir, recordFigures, waitFor } from './support';

/**
 * Quotas before the bytes (issue 34, F8 and F9), against gateway processes sharing one data
 * directory, with uploads sent as the SDKs send them (chunked, no Content-Length):
 *
 * - the race: GATEWAY_MAX_FILE_BYTES_PER_WORKSPACE 10 MB, eight uploads of 8 MB at once, four to
 *   each of two processes, while a sampler sums the bytes under DATA_DIR/files: exactly one is
 *   admitted, the others are 400 quota_exceeded naming `file`, and what is on disk never passes
 *   the quota;
 * - a kill -9 of a process with uploads under way, while another process holds an upload of its
 *   own half sent: after the restart, the temporary files and blobs without a row that the kill
 *   left are deleted (once their reservations lapse, UPLOAD_LEASE_MS), the other process's upload
 *   is never touched and completes, and every acknowledged upload is there, byte for byte.
 */

const MB = 1000 * 1000;
const QUOTA = 10 * MB;
const FILE = 8 * MB;
/** UPLOAD_LEASE_MS (resources/files/reservation.ts), and the sweeps' period with a lease of LEASE_SECONDS. */
const UPLOAD_LEASE_MS = 30_000;
const LEASE_SECONDS = 3;

let dataDir: string;
let processes: GatewayProcess[] = [];
let db: Client | undefined;
beforeEach(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'reliability-uploads-'));
});
afterEach(async () => {
  db?.close();
  await Promise.all(processes.map((gateway) => gateway.stop('SIGKILL')));
  processes = [];
  rmSync(dataDir, { recursive: true, force: true });
});

/** Two gateway processes on the data directory, and the workspace key the first one printed. */
async function twoGateways(env: Record<string, string>): Promise<{ urls: string[]; key: string }> {
  const first = await startGatewayProcess({ LOG_LEVEL: 'warn', DATA_DIR: dataDir, ...env });
  processes.push(first);
  const key = await waitFor(
    async () => /workspace API key\s+(gk_[A-Za-z0-9_-]+)/.exec(first.stdout())?.[1],
    (found) => found !== undefined,
    10_000,
  );
  if (!key) throw new Error(`no workspace key printed:\n${first.stdout()}`);
  processes.push(await startGatewayProcess({ LOG_LEVEL: 'warn', DATA_DIR: dataDir, ...env }));
  db = openDataDir(dataDir);
  return { urls: processes.map((gateway) => gateway.url), key };
}

/** The files under `directory` (temporary ones included), each counted once however it was renamed meanwhile. */
async function filesUnder(directory: string): Promise<{ path: string; bytes: number }[]> {
  const entries = await readdir(directory, { recursive: true, withFileTypes: true }).catch(() => []);
  const seen = new Set<number>();
  const found: { path: string; bytes: number }[] = [];
  for (const entry of entries) {
    if (!entry.isFile()) continue;
    const path = join(entry.parentPath, entry.name);
    const stats = await stat(path).catch(() => null);
    if (!stats || seen.has(stats.ino)) continue;
    seen.add(stats.ino);
    found.push({ path, bytes: stats.size });
  }
  return found;
}

const rows = async (query: string) => (await defined(db).execute(query)).rows;

it('admits exactly one of eight 8 MB uploads under a 10 MB quota, two processes at once, never holding more than the quota on disk', async () => {
  const { urls, key } = await twoGateways({ GATEWAY_MAX_FILE_BYTES_PER_WORKSPACE: String(QUOTA) });
  const filesDir = join(dataDir, 'files');
  let uploading = true;
  let peak = 0;
  let samples = 0;
  /** The most each file was seen to hold: how much of each upload the gateway wrote. */
  const written = new Map<string, number>();
  const sampler = (async () => {
    while (uploading) {
      const found = await filesUnder(filesDir);
      peak = Math.max(
        peak,
        found.reduce((sum, file) => sum + file.bytes, 0),
      );
      for (const file of found) written.set(file.path, Math.max(written.get(file.path) ?? 0, file.bytes));
      samples++;
    }
  })();
  const started = performance.now();
  let answers: Sent[];
  try {
    answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) => sendUpload(defined(urls[i % 2]), key, uploadBody(FILE, { seed: i }))),
    );
  } finally {
    uploading = false;
    await sampler;
  }
  const seconds = (performance.now() - started) / 1000;
  const admitted = answers.filter((answer) => answer.status === 200);
  const refused = answers.filter((answer) => answer.status !== 200);
  // The refused uploads' temporary files: what the gateway wrote of each before refusing it.
  const admittedId = admitted[0]?.body.id as string | undefined;
  const refusedWritten = [...written.entries()]
    .filter(([path]) => path.includes('/.uploads/') && (admittedId === undefined || !path.includes(admittedId)))
    .map(([, bytes]) => bytes)
    .sort((a, b) => a - b);
  const mb = (bytes: number | undefined) => Math.round(((bytes ?? 0) / MB) * 100) / 100;
  recordFigures('uploads race', {
    peak_on_disk_mb: mb(peak),
    quota_mb: QUOTA / MB,
    samples,
    admitted: admitted.length,
    refused_written_mb_max: mb(refusedWritten.at(-1)),
    refused_sent_mb_max: mb(Math.max(...refused.map((answer) => answer.sentBeforeAnswer))),
    seconds: Math.round(seconds * 100) / 100,
  });
  recordTally('uploads', {
    inputsTried: answers.length,
    answered5xx: answers.filter((answer) => answer.status >= 500).length,
  });
  console.log(
    `uploads race: ${admitted.length} of 8 admitted in ${seconds.toFixed(2)} s; peak on disk ${mb(peak)} MB over ${samples} samples ` +
      `(quota ${QUOTA / MB} MB); the refused uploads were written to ${refusedWritten.map(mb).join(', ')} MB at most, ` +
      `their clients had sent ${refused.map((answer) => mb(answer.sentBeforeAnswer)).join(', ')} MB when answered (socket buffers included)`,
  );

  expect(admitted).toHaveLength(1);
  for (const answer of refused) {
    expect(answer).toMatchObject({ status: 400, body: { error: { code: 'quota_exceeded', param: 'file' } } });
    expect(answer.body.error.message).toContain('GATEWAY_MAX_FILE_BYTES_PER_WORKSPACE');
  }
  expect(samples).toBeGreaterThan(10);
  expect(peak).toBeLessThanOrEqual(QUOTA);
  // Refused as their room ran out, not once read whole: none was written past the quota's share left beside the winner's.
  expect(refusedWritten.length).toBeGreaterThan(0);
  for (const bytes of refusedWritten) expect(bytes).toBeLessThan(FILE);
  // Afterwards: the one file, whole; no reservation and nothing else on disk.
  const [file] = admitted;
  expect(defined(file).body.bytes).toBe(FILE);
  const content = await fetch(`${urls[0]}/v1/files/${defined(file).body.id}/content`, {
    headers: { 'x-gateway-api-key': key },
  });
  expect(await holdsPattern(defined(content.body), FILE, answers.indexOf(defined(file)))).toBe(true);
  expect(await rows('SELECT id FROM files')).toHaveLength(1);
  expect(await rows('SELECT blob_key FROM file_reservations')).toEqual([]);
  expect((await filesUnder(filesDir)).map((found) => found.bytes)).toEqual([FILE]);
});

it("deletes what a kill -9 left of uploads after the restart, never another process's upload under way, and loses nothing acknowledged", async () => {
  const env = {
    GATEWAY_RUN_LEASE_SECONDS: String(LEASE_SECONDS),
    GATEWAY_REQUEST_TIMEOUT_MS: String(4 * UPLOAD_LEASE_MS),
  };
  const { urls, key } = await twoGateways(env);
  const [victimUrl, bystanderUrl] = urls as [string, string];
  const filesDir = join(dataDir, 'files');
  const partials = async () => (await filesUnder(join(filesDir, '.uploads'))).map((found) => found.path);

  // The other process's upload, held half sent until the end.
  const held = uploadBody(4 * MB, { seed: 99, holdAt: 2 * MB });
  const heldUpload = sendUpload(bystanderUrl, key, held);
  // Awaited at the end; a failure before that must not go unhandled.
  heldUpload.catch(() => undefined);
  const heldPartial = await waitFor(partials, (paths) => paths.length === 1, 10_000).then((paths) => defined(paths[0]));
  expect(heldPartial).toBeDefined();

  // Eight clients upload files of 1 to 3 MB back to back until the kill.
  const acknowledged: { id: string; bytes: number; seed: number }[] = [];
  let killed = false;
  let seed = 0;
  const client = async () => {
    while (!killed) {
      const bytes = MB + Math.floor(Math.random() * 2 * MB);
      const mine = ++seed;
      try {
        const answer = await sendUpload(victimUrl, key, uploadBody(bytes, { seed: mine }));
        if (answer.status === 200) acknowledged.push({ id: answer.body.id, bytes, seed: mine });
      } catch {
        // The process died under this upload: it was not acknowledged.
      }
    }
  };
  const clients = Array.from({ length: 8 }, client);
  // The kill comes once some uploads were acknowledged, and while others are being written.
  const underWay = async () => (acknowledged.length >= 8 ? (await partials()).length - 1 : 0);
  expect(await waitFor(underWay, (count) => count >= 4, 60_000)).toBeGreaterThanOrEqual(4);
  expect(await defined(processes[0]).stop('SIGKILL')).toBeNull();
  killed = true;
  await Promise.all(clients);

  const keys = async () => new Set((await rows('SELECT blob_key FROM files')).map((row) => String(row[0])));
  const leftovers = async () => {
    const owned = await keys();
    const found = await filesUnder(filesDir);
    return {
      partial: found.filter((file) => file.path.includes('/.uploads/') && file.path !== heldPartial).length,
      rowless: found.filter(
        (file) => !file.path.includes('/.uploads/') && !owned.has(file.path.slice(filesDir.length + 1)),
      ).length,
      reservations: (await rows('SELECT blob_key FROM file_reservations')).length - 1,
    };
  };
  const left = await leftovers();
  console.log(
    `uploads kill -9: ${acknowledged.length} acknowledged; left ${left.partial} temporary files, ${left.rowless} blobs without a row, ${left.reservations} reservations`,
  );
  // Uploads were under way at the kill: what they left is what the restart must sweep.
  expect(left.partial + left.rowless).toBeGreaterThan(0);

  const restarted = await startGatewayProcess({ LOG_LEVEL: 'warn', DATA_DIR: dataDir, ...env });
  processes[0] = restarted;
  const restartedAt = performance.now();
  // The other process's upload is never swept, however often the sweeps run meanwhile.
  let heldSwept = false;
  const clean = await waitFor(
    async () => {
      heldSwept ||= !(await partials()).includes(heldPartial);
      return leftovers();
    },
    (now) => now.partial + now.rowless + now.reservations === 0,
    UPLOAD_LEASE_MS * 2,
  );
  const secondsToClean = (performance.now() - restartedAt) / 1000;
  console.log(
    `uploads kill -9: nothing left ${secondsToClean.toFixed(1)} s after the restart (the uploads' lease ${UPLOAD_LEASE_MS / 1000} s)`,
  );
  expect(clean).toEqual({ partial: 0, rowless: 0, reservations: 0 });
  expect(heldSwept).toBe(false);

  held.release();
  const completed = await heldUpload;
  expect(completed).toMatchObject({ status: 200, body: { bytes: 4 * MB } });
  const served = async (url: string, id: string, bytes: number, seed: number) => {
    const response = await fetch(`${url}/v1/files/${id}/content`, { headers: { 'x-gateway-api-key': key } });
    return response.status === 200 && (await holdsPattern(defined(response.body), bytes, seed));
  };
  expect(await served(restarted.url, completed.body.id, 4 * MB, 99)).toBe(true);
  let lost = 0;
  for (const file of acknowledged) if (!(await served(restarted.url, file.id, file.bytes, file.seed))) lost++;
  const blobsAfter = await filesUnder(filesDir);
  const owned = await keys();
  const rowless = blobsAfter.filter((file) => !owned.has(file.path.slice(filesDir.length + 1))).length;

  recordFigures('uploads kill -9', {
    acknowledged: acknowledged.length,
    left_temporary_files: left.partial,
    left_blobs_without_row: left.rowless,
    seconds_to_clean_after_restart: Math.round(secondsToClean * 10) / 10,
    left_after_sweep: rowless,
    acknowledged_lost: lost,
  });
  recordTally('uploads', { faultsInjected: 1, rowsHalfWritten: rowless });
  expect(lost).toBe(0);
  expect(rowless).toBe(0);
  // Every acknowledged upload and the other process's; besides them, an upload the kill caught
  // between its commit and its answer is kept, unacknowledged (at most one a client).
  expect(blobsAfter.length).toBeGreaterThanOrEqual(acknowledged.length + 1);
  expect(blobsAfter.length).toBeLessThanOrEqual(acknowledged.length + 1 + clients.length);
});
