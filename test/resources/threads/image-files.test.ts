import { defined } from '../../support/defined';
import OpenAI, { BadRequestError, toFile } from 'openai';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { sniffImageType } from '../../../src/resources/files/images';
import { MAX_PROMPT_IMAGE_BYTES } from '../../../src/resources/runs/execution/prompt-images';
import { startFakeUpstream, type FakeUpstreamServer } from '../../support/fake-upstream';
import { png } from '../../support/files';
import { createTestGateway, type Tenant, type TestGateway } from '../../support/gateway';

/**
 * Uploaded images in messages: an `image_file` part names a file of purpose vision or assistants,
 * checked when the message is written, and a run sends the provider the image's bytes as a data:
 * URL. A deleted file, or images past the prompt's budget, become a text part that says so.
 */

let fake: FakeUpstreamServer;
let gateway: TestGateway;
let tenant: Tenant;
let openai: OpenAI;
let assistantId: string;

beforeAll(async () => {
  fake = await startFakeUpstream();
  gateway = await createTestGateway();
  tenant = await gateway.tenant();
  const slug = await gateway.virtualKey(tenant, { base_url: fake.baseURL, slug: 'fake' });
  openai = gateway.openai({ 'x-gateway-api-key': tenant.workspaceKey, 'x-gateway-virtual-key': slug });
  assistantId = (await openai.beta.assistants.create({ model: 'fake-model', instructions: 'Describe images.' })).id;
});
afterAll(async () => {
  await gateway.close();
  await fake.close();
});
beforeEach(() => fake.reset());
afterEach(async () => {
  expect(await gateway.tasks.drain(30_000)).toBe(true);
});

const upload = async (bytes: Uint8Array, purpose: 'vision' | 'assistants' | 'batch' = 'vision', name = 'picture.png') =>
  (await openai.files.create({ file: await toFile(bytes, name), purpose })).id;

/** The user content of the provider's last request. */
const lastUserContent = () =>
  defined(defined(fake.requests.at(-1)).body).messages.findLast((m: { role: string }) => m.role === 'user').content;

describe('image_file content parts', () => {
  it('are stored as OpenAI answers them, and a run sends the image as a data: URL', async () => {
    const bytes = png(5000);
    const fileId = await upload(bytes);
    const run = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistantId,
        thread: {
          messages: [
            {
              role: 'user',
              content: [
                { type: 'text', text: 'What is this?' },
                { type: 'image_file', image_file: { file_id: fileId, detail: 'low' } },
              ],
            },
          ],
        },
      },
      { pollIntervalMs: 10 },
    );
    expect(run.status).toBe('completed');
    const [message] = (await openai.beta.threads.messages.list(run.thread_id, { order: 'asc' })).data;
    expect(defined(message).content).toEqual([
      { type: 'text', text: { value: 'What is this?', annotations: [] } },
      { type: 'image_file', image_file: { file_id: fileId, detail: 'low' } },
    ]);
    expect(lastUserContent()).toEqual([
      { type: 'text', text: 'What is this?' },
      {
        type: 'image_url',
        image_url: { url: `data:image/png;base64,${Buffer.from(bytes).toString('base64')}`, detail: 'low' },
      },
    ]);
  });

  it('take files of purpose assistants, in a message added to a thread, detail defaulting to auto', async () => {
    const bytes = png(3001, 5);
    const fileId = await upload(bytes, 'assistants');
    const thread = await openai.beta.threads.create();
    const message = await openai.beta.threads.messages.create(thread.id, {
      role: 'user',
      content: [{ type: 'image_file', image_file: { file_id: fileId } }],
    });
    expect(message.content).toEqual([{ type: 'image_file', image_file: { file_id: fileId, detail: 'auto' } }]);
    const run = await openai.beta.threads.runs.createAndPoll(
      thread.id,
      { assistant_id: assistantId },
      { pollIntervalMs: 10 },
    );
    expect(run.status).toBe('completed');
    expect(lastUserContent()).toEqual([
      {
        type: 'image_url',
        image_url: { url: `data:image/png;base64,${Buffer.from(bytes).toString('base64')}`, detail: 'auto' },
      },
    ]);
  });

  it("refuse a file that is missing, another workspace's, of another purpose, or not an image, naming the part", async () => {
    const other = await gateway.tenant();
    const theirs = (
      await gateway
        .openai({ 'x-gateway-api-key': other.workspaceKey })
        .files.create({ file: await toFile(png(100), 'p.png'), purpose: 'vision' })
    ).id;
    const cases: [string, string, RegExp][] = [
      ['file-doesNotExist', 'missing', /no file found/],
      [theirs, "another workspace's", /no file found/],
      [await upload(png(100), 'batch'), 'batch', /purpose is 'batch'/],
      [
        await upload(new TextEncoder().encode('not an image at all'), 'vision', 'notes.txt'),
        'text',
        /not a PNG, JPEG, GIF or WebP/,
      ],
    ];
    const thread = await openai.beta.threads.create();
    for (const [fileId, what, message] of cases) {
      const refused = await openai.beta.threads.messages
        .create(thread.id, {
          role: 'user',
          content: [
            { type: 'text', text: 'see' },
            { type: 'image_file', image_file: { file_id: fileId } },
          ],
        })
        .catch((error: unknown) => error);
      expect(refused, what).toBeInstanceOf(BadRequestError);
      expect(refused, what).toMatchObject({ status: 400, param: 'content[1].image_file.file_id' });
      expect((refused as BadRequestError).message, what).toMatch(message);
    }
    expect((await openai.beta.threads.messages.list(thread.id)).data).toEqual([]);
    const created = await openai.beta.threads
      .create({
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'user', content: [{ type: 'image_file', image_file: { file_id: 'file-nope' } }] },
        ],
      })
      .catch((error: unknown) => error);
    expect(created).toMatchObject({ status: 400, param: 'messages[1].content[0].image_file.file_id' });
  });

  it('of a file deleted since become a text part that says so', async () => {
    const fileId = await upload(png(400));
    const thread = await openai.beta.threads.create({
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Look' },
            { type: 'image_file', image_file: { file_id: fileId } },
          ],
        },
      ],
    });
    await openai.files.delete(fileId);
    const run = await openai.beta.threads.runs.createAndPoll(
      thread.id,
      { assistant_id: assistantId },
      { pollIntervalMs: 10 },
    );
    expect(run.status).toBe('completed');
    expect(lastUserContent()).toEqual([
      { type: 'text', text: 'Look' },
      { type: 'text', text: `[image ${fileId} not included: the file was deleted]` },
    ]);
  });

  it("past the prompt's image budget, the oldest images are left out first", async () => {
    const size = Math.floor(MAX_PROMPT_IMAGE_BYTES / 2) + 1;
    const older = await upload(png(size, 1));
    const newer = await upload(png(size, 2));
    const thread = await openai.beta.threads.create({
      messages: [
        { role: 'user', content: [{ type: 'image_file', image_file: { file_id: older } }] },
        { role: 'user', content: [{ type: 'image_file', image_file: { file_id: newer } }] },
      ],
    });
    const run = await openai.beta.threads.runs.createAndPoll(
      thread.id,
      { assistant_id: assistantId },
      { pollIntervalMs: 10 },
    );
    expect(run.status).toBe('completed');
    const users = defined(defined(fake.requests.at(-1)).body).messages.filter(
      (m: { role: string }) => m.role === 'user',
    );
    expect(users[0].content).toEqual([
      {
        type: 'text',
        text: `[image ${older} not included: the images of this prompt exceed the gateway's ${MAX_PROMPT_IMAGE_BYTES} bytes]`,
      },
    ]);
    expect(users[1].content[0].image_url.url.length).toBe('data:image/png;base64,'.length + Math.ceil(size / 3) * 4);
  });
});

describe('sniffImageType', () => {
  it.each([
    ['png', [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0], 'image/png'],
    ['jpeg', [0xff, 0xd8, 0xff, 0xe0], 'image/jpeg'],
    ['gif', [...'GIF89a'].map((c) => c.charCodeAt(0)), 'image/gif'],
    ['webp', [...'RIFF\0\0\0\0WEBPVP8 '].map((c) => c.charCodeAt(0)), 'image/webp'],
    ['riff that is not webp', [...'RIFF\0\0\0\0WAVE'].map((c) => c.charCodeAt(0)), null],
    ['text', [...'hello'].map((c) => c.charCodeAt(0)), null],
    ['empty', [], null],
  ])('%s', (_, bytes, type) => {
    expect(sniffImageType(new Uint8Array(bytes))).toBe(type);
  });
});
