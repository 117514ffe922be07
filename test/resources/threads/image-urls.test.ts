import { defined } from '../../support/defined';
import { count, eq } from 'drizzle-orm';
import { BadRequestError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { messages, runs, threads } from '../../../src/db/schema';
import { imageUrlProblem } from '../../../src/resources/files/images';
import {
  parseUpstreamHostPatterns,
  type UpstreamHostPattern,
  type UpstreamUrlOptions,
} from '../../../src/lib/upstream-url';
import { WORKSPACE_COUNT_TTL_MS } from '../../../src/resources/virtual-keys/upstream-rules';
import { createFakeUpstream } from '../../support/fake-upstream';
import { createTestGateway, errorOf, type Tenant, type TestGateway } from '../../support/gateway';

/**
 * `image_url` content parts: the gateway fetches nothing, but a provider that fetches image URLs
 * fetches them from where it runs, so a URL is judged as a virtual key's base_url is, by its text:
 * https or http to a public host (or a private one the upstream rules allow), never a metadata or
 * link-local address; or a base64 data: URL of a PNG, JPEG, GIF or WebP image. Refused with a 400
 * naming the part when a message is written, and left out of a prompt when the rules refuse it by
 * the time a run sends it.
 */

const PNG = Uint8Array.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, 73, 72, 68, 82]);
const JPEG = Uint8Array.from([0xff, 0xd8, 0xff, 0xe0, 0, 16, 74, 70, 73, 70]);
const base64 = (bytes: Uint8Array) => Buffer.from(bytes).toString('base64');

const hosts = (text: string): UpstreamHostPattern[] => {
  const parsed = parseUpstreamHostPatterns(text);
  if (!('patterns' in parsed)) throw new Error(parsed.problem);
  return parsed.patterns;
};
const REFUSING: UpstreamUrlOptions = { allowPrivate: false };
const ALLOWING: UpstreamUrlOptions = { allowPrivate: true };
const LISTED: UpstreamUrlOptions = { allowPrivate: false, allowedHosts: hosts('10.0.0.1,images.localhost:8080') };

describe('imageUrlProblem', () => {
  // [url, refused under REFUSING, ALLOWING, LISTED: a pattern of the problem, or null when allowed]
  const table: [string, RegExp | null, RegExp | null, RegExp | null][] = [
    ['https://example.com/cat.png', null, null, null],
    ['http://example.com/cat.png?size=2', null, null, null],
    ['HTTPS://EXAMPLE.COM/CAT.PNG', null, null, null],
    // A name is judged by its text: the gateway resolves nothing for an image.
    ['http://intranet.corp/cat.png', null, null, null],
    ['file:///etc/passwd', /not 'file'/, /not 'file'/, /not 'file'/],
    ['gopher://example.com:70/_GET', /not 'gopher'/, /not 'gopher'/, /not 'gopher'/],
    ['ftp://example.com/cat.png', /not 'ftp'/, /not 'ftp'/, /not 'ftp'/],
    ['javascript:alert(1)', /not 'javascript'/, /not 'javascript'/, /not 'javascript'/],
    ['cat.png', /absolute/, /absolute/, /absolute/],
    ['http://169.254.169.254/latest/meta-data/', /metadata/, /metadata/, /metadata/],
    ['http://2852039166/latest/meta-data/', /metadata/, /metadata/, /metadata/],
    ['http://[fd00:ec2::254]/', /metadata/, /metadata/, /metadata/],
    ['http://metadata.google.internal/computeMetadata/v1/', /metadata/, /metadata/, /metadata/],
    ['http://[fe80::1]/', /metadata/, /metadata/, /metadata/],
    ['http://10.0.0.1/cat.png', /private/, null, null],
    ['http://10.0.0.2/cat.png', /private/, null, /private/],
    ['http://192.168.1.20/cat.png', /private/, null, /private/],
    ['http://100.64.0.1/cat.png', /private/, null, /private/],
    ['http://127.1/cat.png', /private/, null, /private/],
    ['http://0.0.0.0/cat.png', /private/, null, /private/],
    ['http://[::1]/cat.png', /private/, null, /private/],
    ['http://[::ffff:10.0.0.3]/cat.png', /private/, null, /private/],
    ['http://localhost/cat.png', /private/, null, /private/],
    ['http://images.localhost:8080/cat.png', /private/, null, null],
    ['http://images.localhost:8081/cat.png', /private/, null, /GATEWAY_ALLOWED_UPSTREAM_HOSTS=images.localhost:8081/],
    [`data:image/png;base64,${base64(PNG)}`, null, null, null],
    [`DATA:IMAGE/JPEG;BASE64,${base64(JPEG)}`, null, null, null],
    // Any of the four types: the first bytes must be an image, whichever the header names.
    [`data:image/webp;base64,${base64(PNG)}`, null, null, null],
    [
      `data:image/svg+xml;base64,${base64(new TextEncoder().encode('<svg/>'))}`,
      /image\/png, image\/jpeg/,
      /image\/png, image\/jpeg/,
      /image\/png, image\/jpeg/,
    ],
    ['data:text/html;base64,PGgxPg==', /image\/png, image\/jpeg/, /image\/png, image\/jpeg/, /image\/png, image\/jpeg/],
    ['data:image/png,%89PNG', /must be base64/, /must be base64/, /must be base64/],
    ['data:image/png;base64,iVBO!!==', /not valid base64/, /not valid base64/, /not valid base64/],
    ['data:image/png;base64,iVBORw0KGgo', /not valid base64/, /not valid base64/, /not valid base64/],
    [
      `data:image/png;base64,${base64(new TextEncoder().encode('hello, world'))}`,
      /not a PNG/,
      /not a PNG/,
      /not a PNG/,
    ],
    ['data:image/png;base64,', /not a PNG/, /not a PNG/, /not a PNG/],
  ];
  for (const [url, refusing, allowing, listed] of table) {
    it(url.length > 60 ? `${url.slice(0, 60)}…` : url, () => {
      for (const [rules, expected] of [
        [REFUSING, refusing],
        [ALLOWING, allowing],
        [LISTED, listed],
      ] as const) {
        const problem = imageUrlProblem(url, rules);
        if (expected === null) expect(problem).toBeNull();
        else expect(problem).toMatch(expected);
      }
    });
  }
});

/** A tenant whose default virtual key is the fake, and its SDK. */
async function member(gateway: TestGateway) {
  const tenant = await gateway.tenant();
  await gateway.virtualKey(tenant, { base_url: 'http://fake.test/v1', default: true });
  const client = gateway.openai({ 'x-gateway-api-key': tenant.workspaceKey });
  const assistant = await client.beta.assistants.create({ model: 'fake-model' });
  return { tenant, client, assistantId: assistant.id };
}

async function rowsOf(gateway: TestGateway, tenant: Tenant) {
  const { db } = gateway.database;
  const counted = async (table: typeof threads | typeof messages | typeof runs) =>
    defined((await db.select({ n: count() }).from(table).where(eq(table.workspaceId, tenant.workspace.id)))[0]).n;
  return { threads: await counted(threads), messages: await counted(messages), runs: await counted(runs) };
}

describe('image_url parts of messages', () => {
  const upstream = createFakeUpstream();
  let gateway: TestGateway;
  beforeAll(async () => {
    gateway = await createTestGateway({
      deps: { fetch: upstream.fetch },
      env: { GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'false' },
    });
  });
  afterAll(() => gateway?.close());

  it('are refused with a 400 naming the part wherever messages are written, and nothing is written', async () => {
    const { tenant, client, assistantId } = await member(gateway);
    const thread = await client.beta.threads.create();
    const content = (url: string) => [
      { type: 'text', text: 'What is in this picture?' },
      { type: 'image_url', image_url: { url } },
    ];
    const requests = (url: string) => [
      {
        path: '/v1/threads',
        body: {
          messages: [
            { role: 'user', content: 'first' },
            { role: 'user', content: content(url) },
          ],
        },
        param: 'messages[1].content[1].image_url.url',
      },
      {
        path: `/v1/threads/${thread.id}/messages`,
        body: { role: 'user', content: content(url) },
        param: 'content[1].image_url.url',
      },
      {
        path: `/v1/threads/${thread.id}/runs`,
        body: { assistant_id: assistantId, additional_messages: [{ role: 'user', content: content(url) }] },
        param: 'additional_messages[0].content[1].image_url.url',
      },
      {
        path: '/v1/threads/runs',
        body: { assistant_id: assistantId, thread: { messages: [{ role: 'user', content: content(url) }] } },
        param: 'thread.messages[0].content[1].image_url.url',
      },
    ];
    const urls = [
      'file:///etc/passwd',
      'gopher://example.com:70/_x',
      'http://169.254.169.254/latest/meta-data/',
      'http://10.0.0.1/',
      'http://localhost/',
      'data:image/svg+xml;base64,PHN2Zy8+',
    ];
    const before = await rowsOf(gateway, tenant);
    for (const url of urls) {
      for (const request of requests(url)) {
        const error = await errorOf(
          await gateway.request(request.path, { key: tenant.workspaceKey, body: request.body }),
        );
        expect({ url, ...error }).toMatchObject({ url, status: 400, code: 'invalid_value', param: request.param });
        expect(error.message).toMatch(new RegExp(`^Invalid '${request.param.replace(/[[\].]/g, '\\$&')}': `));
      }
    }
    expect(await rowsOf(gateway, tenant)).toEqual(before);

    // The SDK raises it as a BadRequestError with the part as its param.
    const refused = await client.beta.threads.messages
      .create(thread.id, {
        role: 'user',
        content: [{ type: 'image_url', image_url: { url: 'http://[::1]:8080/x.png' } }],
      })
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(BadRequestError);
    expect(refused).toMatchObject({ status: 400, param: 'content[0].image_url.url' });
  });

  it('are taken to a public host, a host GATEWAY_ALLOWED_UPSTREAM_HOSTS lists, or as a data: image, and sent to the provider as they are', async () => {
    const listing = await createTestGateway({
      deps: { fetch: upstream.fetch },
      env: {
        GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'false',
        GATEWAY_ALLOWED_UPSTREAM_HOSTS: 'images.internal.test,10.0.0.7:8080',
      },
    });
    try {
      const { client, assistantId } = await member(listing);
      const marker = `images-${crypto.randomUUID()}`;
      const parts = [
        { type: 'image_url' as const, image_url: { url: 'https://example.com/cat.png', detail: 'low' as const } },
        { type: 'image_url' as const, image_url: { url: 'http://10.0.0.7:8080/cat.png' } },
        { type: 'image_url' as const, image_url: { url: `data:image/png;base64,${base64(PNG)}` } },
      ];
      const run = await client.beta.threads.createAndRunPoll(
        {
          assistant_id: assistantId,
          thread: { messages: [{ role: 'user', content: [{ type: 'text', text: marker }, ...parts] }] },
        },
        { pollIntervalMs: 20 },
      );
      expect(run.status).toBe('completed');
      const sent = defined(upstream.requests.find((request) => request.rawBody.includes(marker)));
      const user = defined(sent.body).messages.findLast((message: { role: string }) => message.role === 'user');
      expect(user.content.slice(1)).toEqual([
        { type: 'image_url', image_url: { url: 'https://example.com/cat.png', detail: 'low' } },
        { type: 'image_url', image_url: { url: 'http://10.0.0.7:8080/cat.png', detail: 'auto' } },
        { type: 'image_url', image_url: { url: `data:image/png;base64,${base64(PNG)}`, detail: 'auto' } },
      ]);
    } finally {
      await listing.close();
    }
  });
});

describe('image_url parts under the default rules (GATEWAY_ALLOW_PRIVATE_UPSTREAMS unset)', () => {
  it('take a private host while the database holds one workspace; once it holds two, a message with one is refused, and a run leaves one already written out', async () => {
    const upstream = createFakeUpstream();
    const gateway = await createTestGateway({
      deps: { fetch: upstream.fetch },
      env: { GATEWAY_ALLOW_PRIVATE_UPSTREAMS: '' },
    });
    try {
      const { tenant, client, assistantId } = await member(gateway);
      const local = { type: 'image_url' as const, image_url: { url: 'http://127.0.0.1:8000/scan.png' } };
      const thread = await client.beta.threads.create({
        messages: [{ role: 'user', content: [{ type: 'text', text: 'one' }, local] }],
      });
      expect(defined((await client.beta.threads.messages.list(thread.id)).data[0]).content[1]).toEqual({
        ...local,
        image_url: { ...local.image_url, detail: 'auto' },
      });

      await gateway.tenant();
      // The workspace count is read again once its cache has expired.
      gateway.clock.advance(WORKSPACE_COUNT_TTL_MS + 1);
      const refused = await gateway.request(`/v1/threads/${thread.id}/messages`, {
        key: tenant.workspaceKey,
        body: { role: 'user', content: [local] },
      });
      expect(await errorOf(refused)).toMatchObject({
        status: 400,
        param: 'content[0].image_url.url',
        message: expect.stringMatching(/several/),
      });

      const marker = `left-out-${crypto.randomUUID()}`;
      const run = await client.beta.threads.runs.createAndPoll(
        thread.id,
        { assistant_id: assistantId, additional_messages: [{ role: 'user', content: marker }] },
        { pollIntervalMs: 20 },
      );
      expect(run.status).toBe('completed');
      const sent = defined(upstream.requests.find((request) => request.rawBody.includes(marker)));
      expect(sent.rawBody).not.toContain('127.0.0.1:8000');
      const first = defined(sent.body).messages.find((message: { role: string }) => message.role === 'user');
      expect(first.content).toEqual([
        { type: 'text', text: 'one' },
        { type: 'text', text: '[image not included: its URL is not allowed]' },
      ]);
    } finally {
      await gateway.close();
    }
  });
});
