import { Hono } from 'hono';
import OpenAI, { NotFoundError, toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiError, errorResponse } from '../../src/errors';
import { jsonBody } from '../../src/http/middleware/json-body';
import { ownBody } from '../../src/http/middleware/own-body';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../support/gateway';

/**
 * What the gateway does not serve under /v1 is a 404 `unsupported_endpoint` naming the method and
 * the path, answered before authentication and without reading the body, whatever its content type.
 */

let gateway: TestGateway;
let tenant: Tenant;
beforeAll(async () => {
  gateway = await createTestGateway();
  tenant = await gateway.tenant();
});
afterAll(() => gateway.close());

/**
 * Operations the gateway does not serve: other APIs of OpenAI a client may try (every Assistants,
 * Files and Vector stores operation of the reference OpenAPI is served: docs/supported-operations.md).
 */
const UNSERVED: [string, string][] = [
  ['POST', '/v1/uploads'],
  ['POST', '/v1/realtime/sessions'],
  ['POST', '/v1/images/generations'],
  ['POST', '/v1/audio/speech'],
  ['POST', '/v1/audio/transcriptions'],
  ['GET', '/v1/assistants/asst_abc123/files'],
  ['PUT', '/v1/nothing/here'],
  ['GET', '/v1'],
  ['GET', '/v1/'],
];

function expectUnsupported(error: Awaited<ReturnType<typeof errorOf>>, method: string, path: string) {
  expect({ method, path, ...error }).toMatchObject({
    method,
    path,
    status: 404,
    code: 'unsupported_endpoint',
    type: 'invalid_request_error',
    param: null,
  });
  expect(error.message).toContain(`${method} ${path}`);
  expect(error.message).toContain('docs/supported-operations.md');
}

describe('unsupported endpoints', () => {
  it('answer 404 unsupported_endpoint with a JSON body, with no body, and without a key', async () => {
    for (const [method, path] of UNSERVED) {
      const bodies = method === 'GET' || method === 'DELETE' ? [undefined] : [undefined, '{"purpose":"assistants"}'];
      for (const body of bodies) {
        for (const key of [tenant.workspaceKey, undefined]) {
          const response = await gateway.request(path, { method, key, body });
          expect(response.headers.get('x-should-retry')).toBe('false');
          expect(response.headers.get('x-gateway-request-id')).toMatch(/^req_/);
          expectUnsupported(await errorOf(response), method, path);
        }
      }
    }
  });

  it('answer a multipart upload to an unserved path with the 404, without reading it (never a 415)', async () => {
    const form = new FormData();
    form.set('purpose', 'assistants');
    form.set('file', new Blob(['x'.repeat(10_000)], { type: 'text/plain' }), 'notes.txt');
    for (const headers of [{ 'x-gateway-api-key': tenant.workspaceKey }, {} as Record<string, string>]) {
      const request = new Request('http://gateway.test/v1/audio/transcriptions', {
        method: 'POST',
        headers,
        body: form,
      });
      expect(request.headers.get('content-type')).toMatch(/^multipart\/form-data; boundary=/);
      const response = await gateway.app.request(request);
      expectUnsupported(await errorOf(response), 'POST', '/v1/audio/transcriptions');
      expect(request.bodyUsed).toBe(false);
    }
  });

  it('answer a body over the size limit and of any type with the same 404, unread', async () => {
    const limit = gateway.deps.config.GATEWAY_MAX_BODY_BYTES;
    for (const contentType of ['application/octet-stream', 'text/plain', 'application/json']) {
      const request = new Request('http://gateway.test/v1/images/generations', {
        method: 'POST',
        headers: { 'content-type': contentType, 'content-length': String(limit + 1) },
        body: 'x'.repeat(limit + 1),
      });
      expectUnsupported(await errorOf(await gateway.app.request(request)), 'POST', '/v1/images/generations');
      expect(request.bodyUsed).toBe(false);
    }
  });

  it('are NotFoundError in the OpenAI SDK, its file upload included', async () => {
    const openai = gateway.openai({ 'x-gateway-api-key': tenant.workspaceKey });
    const upload = await openai.audio.transcriptions
      .create({ file: await toFile(Buffer.from('hello'), 'hello.wav'), model: 'whisper-1' })
      .catch((error: unknown) => error);
    expect(upload).toBeInstanceOf(NotFoundError);
    expect(upload).toMatchObject({ status: 404, code: 'unsupported_endpoint' });
    const images = await openai.images.generate({ prompt: 'a cat' }).catch((error: unknown) => error);
    expect(images).toBeInstanceOf(OpenAI.NotFoundError);
    expect((images as NotFoundError).message).toContain('POST /v1/images/generations');
  });

  it('shorten a very long path in the message', async () => {
    const path = `/v1/${'a'.repeat(5000)}`;
    const error = await errorOf(await gateway.request(path));
    expect(error).toMatchObject({ status: 404, code: 'unsupported_endpoint' });
    expect(error.message.length).toBeLessThan(400);
  });

  it('leave served paths as they were: another method is 405 with Allow, before the body is read', async () => {
    const form = new FormData();
    form.set('file', new Blob(['x']), 'x.txt');
    const request = new Request('http://gateway.test/v1/policies/rate-limits', { method: 'PATCH', body: form });
    const response = await gateway.app.request(request);
    expect(response.headers.get('allow')).toBe('GET, HEAD, POST');
    expect(await errorOf(response)).toMatchObject({ status: 405, code: 'method_not_allowed' });
    expect(request.bodyUsed).toBe(false);
    // And served operations still authenticate and read their bodies.
    const listed = await gateway.request('/v1/assistants', { key: tenant.workspaceKey });
    expect(await json(listed)).toMatchObject({ object: 'list' });
    expect((await errorOf(await gateway.request('/v1/assistants'))).code).toBe('missing_api_key');
  });
});

describe('ownBody()', () => {
  // The app's JSON-body middleware, in a Hono app of its own: a route marked with ownBody() reads
  // its multipart body itself (as POST /v1/files does), while its neighbours keep the JSON rule.
  const app = new Hono();
  app.use('*', jsonBody({ maxBytes: 1024 * 1024, requestBody: (request) => request.body }));
  app.post('/upload', ownBody(), async (c) => {
    const form = await c.req.formData();
    return c.json({ purpose: form.get('purpose') });
  });
  app.post('/json', async (c) => c.json(await c.req.json()));
  app.onError((error) => errorResponse(error instanceof ApiError ? error : new ApiError('server_error')));

  it('lets a marked route read a multipart body', async () => {
    const form = new FormData();
    form.set('purpose', 'assistants');
    const response = await app.request('/upload', { method: 'POST', body: form });
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ purpose: 'assistants' });
  });

  it('keeps the JSON rule for the other routes', async () => {
    const form = new FormData();
    form.set('purpose', 'assistants');
    const refused = await errorOf(await app.request('/json', { method: 'POST', body: form }));
    expect(refused).toMatchObject({ status: 415, code: 'unsupported_media_type' });
    const broken = await errorOf(
      await app.request('/json', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{' }),
    );
    expect(broken).toMatchObject({ status: 400, code: 'invalid_json' });
  });
});
