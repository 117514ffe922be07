import { defined } from '../../support/defined';
import { mkdtempSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { files } from '../../../src/db/schema';
import type { BlobStore } from '../../../src/lib/blob-store';
import { directoryBlobStore } from '../../../src/runtime/node/blob-store';
import { fakeThread, startFakeUpstream, type FakeScenario, type FakeUpstreamServer } from '../../support/fake-upstream';
import { png } from '../../support/files';
import { createTestGateway, type Tenant, type TestGateway } from '../../support/gateway';
import { waitFor } from '../../support/wait';

/**
 * What a run sends its provider and holds while it does, bounded per request and shared fairly:
 * the request's size (GATEWAY_MAX_UPSTREAM_REQUEST_BYTES: older history left out to fit, then
 * images, and a run whose turn does not fit fails saying so), images streamed from the blob store
 * as the request is sent (a provider that reads nothing holds back the reading of the file), and
 * the provider calls a workspace may have in flight (GATEWAY_UPSTREAM_CALLS_PER_WORKSPACE: the
 * rest wait their turn within the first-byte timeout). The same against a gateway process, as an
 * attacker does them: test/reliability/turn-bounds.test.ts.
 */

const REQUEST_BYTES = 64 * 1024;
const FIRST_BYTE_MS = 3000;
/** `bounded`'s requests built and not yet sent, per workspace. */
const HELD_BYTES = 48 * 1024;

let fake: FakeUpstreamServer;
/** A gateway whose requests are at most REQUEST_BYTES, a workspace's held at most HELD_BYTES. */
let bounded: TestGateway;
/** A gateway with two provider calls at once per workspace and a short first-byte timeout, on its own data directory. */
let shared: TestGateway;
let sharedDataDir: string;
/** Bytes read from `shared`'s blob store, by key. */
const readBytes = new Map<string, number>();

beforeAll(async () => {
  fake = await startFakeUpstream();
  bounded = await createTestGateway({
    env: {
      GATEWAY_MAX_UPSTREAM_REQUEST_BYTES: String(REQUEST_BYTES),
      GATEWAY_UPSTREAM_BYTES_PER_WORKSPACE: String(HELD_BYTES),
    },
  });
  sharedDataDir = mkdtempSync(join(tmpdir(), 'gateway-test-shares-'));
  shared = await createTestGateway({
    env: {
      DATA_DIR: sharedDataDir,
      GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS: String(FIRST_BYTE_MS),
      GATEWAY_UPSTREAM_CALLS_PER_WORKSPACE: '2',
    },
    deps: { blobs: counted(directoryBlobStore(join(sharedDataDir, 'files'))) },
  });
});
afterAll(async () => {
  await bounded?.close();
  await shared?.close();
  await fake?.close();
  rmSync(sharedDataDir, { recursive: true, force: true });
});

/** The real blob store, with what is read of each blob counted as it streams. */
function counted(store: BlobStore): BlobStore {
  return {
    ...store,
    async get(key) {
      const stream = await store.get(key);
      return (
        stream?.pipeThrough(
          new TransformStream<Uint8Array, Uint8Array>({
            transform(chunk, controller) {
              readBytes.set(key, (readBytes.get(key) ?? 0) + chunk.byteLength);
              controller.enqueue(chunk);
            },
          }),
        ) ?? null
      );
    },
  };
}

/** A tenant of `gateway` with a virtual key on the fake (at `path` before /v1), and an assistant. */
async function setUp(
  gateway: TestGateway,
  path = '',
): Promise<{ tenant: Tenant; openai: OpenAI; assistantId: string }> {
  const tenant = await gateway.tenant();
  const slug = await gateway.virtualKey(tenant, { base_url: `${fake.url}${path}/v1` });
  const openai = gateway.openai({ 'x-gateway-api-key': tenant.workspaceKey, 'x-gateway-virtual-key': slug });
  const assistantId = (await openai.beta.assistants.create({ model: 'fake-model', instructions: 'Be brief.' })).id;
  return { tenant, openai, assistantId };
}

/** The provider's requests for the run whose thread says `marker`. */
const requestsOf = (marker: string) => fake.requests.filter((request) => request.rawBody.includes(marker));

describe("a request's bound (GATEWAY_MAX_UPSTREAM_REQUEST_BYTES)", () => {
  it('leaves out the oldest history to fit it', async () => {
    const { openai, assistantId } = await setUp(bounded);
    const marker = `history-${crypto.randomUUID()}`;
    const old = Array.from({ length: 6 }, (_, i) => ({
      role: 'user' as const,
      content: `${i} ${'old words '.repeat(2000)}`,
    }));
    const thread = await openai.beta.threads.create({
      messages: [...old, { role: 'user', content: `${marker} the question` }],
    });
    const run = await openai.beta.threads.runs.createAndPoll(
      thread.id,
      { assistant_id: assistantId },
      { pollIntervalMs: 10 },
    );
    expect(run.status).toBe('completed');
    const [request] = requestsOf(marker);
    expect(defined(request).rawBody.length).toBeLessThanOrEqual(REQUEST_BYTES);
    const users = defined(defined(request).body)
      .messages.filter((message: { role: string }) => message.role === 'user')
      .map((message: { content: string }) => message.content);
    // Of what the bound leaves for the messages (REQUEST_FIELDS_BYTES set aside), two of the six
    // old ones (20 KB each) fit beside the question, the newest two.
    expect(users.map((content: string) => content.slice(0, 2))).toEqual(['4 ', '5 ', marker.slice(0, 2)]);
  });

  it('fails a run whose turn does not fit, saying so, without calling the provider', async () => {
    const { openai, assistantId } = await setUp(bounded);
    const marker = `too-large-${crypto.randomUUID()}`;
    const run = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistantId,
        thread: { messages: [{ role: 'user', content: `${marker} ${'x'.repeat(REQUEST_BYTES)}` }] },
      },
      { pollIntervalMs: 10 },
    );
    expect(run.status).toBe('failed');
    expect(run.last_error).toEqual({
      code: 'invalid_prompt',
      message: expect.stringMatching(
        new RegExp(
          `^The request to the provider would be \\d+ bytes, over the gateway's limit of ${REQUEST_BYTES} \\(GATEWAY_MAX_UPSTREAM_REQUEST_BYTES\\): the run's instructions`,
        ),
      ),
    });
    expect(requestsOf(marker)).toEqual([]);
  });

  it('leaves out an image it has no room for, saying so', async () => {
    const { openai, assistantId } = await setUp(bounded);
    const marker = `no-room-${crypto.randomUUID()}`;
    const small = (await openai.files.create({ file: await toFile(png(1000), 'small.png'), purpose: 'vision' })).id;
    const large = (await openai.files.create({ file: await toFile(png(60_000), 'large.png'), purpose: 'vision' })).id;
    const run = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistantId,
        thread: {
          messages: [
            {
              role: 'user',
              content: [
                { type: 'text', text: marker },
                { type: 'image_file', image_file: { file_id: large } },
                { type: 'image_file', image_file: { file_id: small } },
              ],
            },
          ],
        },
      },
      { pollIntervalMs: 10 },
    );
    expect(run.status).toBe('completed');
    const content = defined(defined(requestsOf(marker)[0]).body).messages.at(-1).content;
    expect(content[1]).toEqual({
      type: 'text',
      text: `[image ${large} not included: the request to the provider has no room left for it (GATEWAY_MAX_UPSTREAM_REQUEST_BYTES)]`,
    });
    expect(content[2].image_url.url).toBe(`data:image/png;base64,${Buffer.from(png(1000)).toString('base64')}`);
  });
});

describe('requests built and not yet sent (GATEWAY_UPSTREAM_BYTES_PER_WORKSPACE)', () => {
  it("hold a workspace's calls back once they pass its bytes, until a request is sent", async () => {
    const { openai, assistantId } = await setUp(bounded);
    const marker = `held-${crypto.randomUUID()}`;
    // Two prompts of 30 KB: the second would pass the workspace's 48 KiB while the first is not sent.
    const text = (i: number) => `${marker}-${i} ${'words '.repeat(5000)}`;
    const first = openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistantId,
        thread: {
          messages: [{ role: 'user', content: `${text(1)}\n#fake {"first_byte_delay_ms":1000,"reply":"late"}` }],
        },
      },
      { pollIntervalMs: 10 },
    );
    await waitFor(
      () => requestsOf(`${marker}-1`).length,
      (n) => n === 1,
    );
    const second = await openai.beta.threads.createAndRunPoll(
      { assistant_id: assistantId, thread: { messages: [{ role: 'user', content: text(2) }] } },
      { pollIntervalMs: 10 },
    );
    expect([(await first).status, second.status]).toEqual(['completed', 'completed']);
    // Sent once the first's answer began: a second after it, at the earliest.
    expect(
      defined(requestsOf(`${marker}-2`)[0]).receivedAt - defined(requestsOf(`${marker}-1`)[0]).receivedAt,
    ).toBeGreaterThanOrEqual(1000);
  });
});

describe('images, streamed as the request is sent', () => {
  it('are read only as far as a provider reads: one that reads nothing holds back the file, which is closed when the call ends', async () => {
    const { openai, assistantId } = await setUp(shared, '/unread');
    const bytes = png(8 * 1024 * 1024);
    const file = await openai.files.create({ file: await toFile(bytes, 'large.png'), purpose: 'vision' });
    const run = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistantId,
        thread: { messages: [{ role: 'user', content: [{ type: 'image_file', image_file: { file_id: file.id } }] }] },
      },
      { pollIntervalMs: 20 },
    );
    expect(run.status).toBe('failed');
    expect(defined(run.last_error).message).toBe(`The upstream sent no first byte within ${FIRST_BYTE_MS} ms.`);
    const [key, read] = defined([...readBytes.entries()].find(([blobKey]) => blobKey.endsWith(file.id)));
    // What the socket's buffers took, not the file (whole, it was read before the request was sent).
    expect(read).toBeGreaterThan(0);
    expect(read).toBeLessThan(bytes.byteLength);
    const open = () =>
      readdirSync('/proc/self/fd').filter((fd) => {
        try {
          return readlinkSync(`/proc/self/fd/${fd}`).endsWith(key);
        } catch {
          return false;
        }
      });
    expect(await waitFor(open, (fds) => fds.length === 0)).toEqual([]);
  });

  it('fail the run saying so when a file holds more bytes than its row says', async () => {
    const { openai, assistantId } = await setUp(shared);
    const file = await openai.files.create({ file: await toFile(png(3000), 'grown.png'), purpose: 'vision' });
    const [row] = await shared.database.db.select({ blobKey: files.blobKey }).from(files).where(eq(files.id, file.id));
    writeFileSync(join(sharedDataDir, 'files', defined(row).blobKey), png(5000));
    const run = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistantId,
        thread: { messages: [{ role: 'user', content: [{ type: 'image_file', image_file: { file_id: file.id } }] }] },
      },
      { pollIntervalMs: 20 },
    );
    expect(run.status).toBe('failed');
    expect(run.last_error).toEqual({
      code: 'server_error',
      message: `The image ${file.id} could not be sent to the provider: its bytes are more than the 3000 its file says.`,
    });
  });
});

describe('provider calls, shared fairly (GATEWAY_UPSTREAM_CALLS_PER_WORKSPACE)', () => {
  it("holds a workspace to its calls at once, the rest waiting their turn, and never another workspace's runs", async () => {
    const a = await setUp(shared);
    const b = await setUp(shared);
    const marker = `shares-${crypto.randomUUID()}`;
    const slow: FakeScenario = { first_byte_delay_ms: 1000, reply: 'late' };
    const first = [1, 2].map((i) =>
      a.openai.beta.threads.createAndRunPoll(
        { assistant_id: a.assistantId, thread: fakeThread(`${marker}-${i}`, slow) },
        { pollIntervalMs: 20 },
      ),
    );
    await waitFor(
      () => requestsOf(marker).length,
      (n) => n === 2,
    );
    const third = a.openai.beta.threads.createAndRunPoll(
      { assistant_id: a.assistantId, thread: fakeThread(`${marker}-3`, { reply: 'third' }) },
      { pollIntervalMs: 20 },
    );
    // Another workspace's run meanwhile: sent at once, answered at once.
    const other = await b.openai.beta.threads.createAndRunPoll(
      { assistant_id: b.assistantId, thread: fakeThread(`${marker}-b`, { reply: 'mine' }) },
      { pollIntervalMs: 20 },
    );
    expect(other.status).toBe('completed');
    expect(requestsOf(`${marker}-3`)).toEqual([]);
    const runs = await Promise.all([...first, third]);
    expect(runs.map((run) => run.status)).toEqual(['completed', 'completed', 'completed']);
    // The third was sent once one of the first two had its answer (a second later, at the earliest).
    const sentAt = (suffix: string) => defined(requestsOf(`${marker}-${suffix}`)[0]).receivedAt;
    expect(sentAt('3') - Math.min(sentAt('1'), sentAt('2'))).toBeGreaterThanOrEqual(1000);
  });

  it('fails a run whose turn does not come within the first-byte timeout, naming the limit', async () => {
    const { openai, assistantId } = await setUp(shared);
    const marker = `no-turn-${crypto.randomUUID()}`;
    // Two calls that answer and then hold their streams open: they keep their shares until cancelled.
    const holding: FakeScenario = { reply: 'a b c d', stall_after_chunks: 2 };
    const first = await Promise.all(
      [1, 2].map((i) =>
        openai.beta.threads.createAndRun({ assistant_id: assistantId, thread: fakeThread(`${marker}-${i}`, holding) }),
      ),
    );
    await waitFor(
      () => requestsOf(marker).length,
      (n) => n === 2,
    );
    const third = await openai.beta.threads.createAndRunPoll(
      { assistant_id: assistantId, thread: fakeThread(`${marker}-3`, { reply: 'never' }) },
      { pollIntervalMs: 20 },
    );
    expect(third.status).toBe('failed');
    expect(third.last_error).toEqual({
      code: 'rate_limit_exceeded',
      message: `No call to the provider could start within ${FIRST_BYTE_MS} ms: this workspace's 2 provider calls at once (GATEWAY_UPSTREAM_CALLS_PER_WORKSPACE) were all in flight.`,
    });
    expect(requestsOf(`${marker}-3`)).toEqual([]);
    for (const run of first) await openai.beta.threads.runs.cancel(run.id, { thread_id: run.thread_id });
    for (const run of first) {
      const ended = await waitFor(
        () => openai.beta.threads.runs.retrieve(run.id, { thread_id: run.thread_id }),
        (current) => current.status === 'cancelled',
      );
      expect(ended.status).toBe('cancelled');
    }
  });
});
