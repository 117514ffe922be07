import { Hono } from 'hono';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { errorResponse, serverError } from '../../src/errors';
import { lazyGroup, loadedGroups, type Operation } from '../../src/http/lazy-group';
import { ownBody } from '../../src/http/middleware/own-body';
import { openApiDocument } from '../../src/http/openapi/generate';
import { createTestGateway, errorOf, type Tenant, type TestGateway } from '../support/gateway';

/**
 * The route groups few requests use are stubs until their first request (http/lazy-group.ts,
 * resources/route-groups.ts): what the app answers before a group loads is what it answers after, and
 * a group loads once. Each app has its stubs, so this file's gateway starts with none loaded whatever
 * the files before it in the same module graph loaded; that the server's start imports none of the
 * groups' modules is test/runtime/node/npm-start.test.ts's.
 */

let gateway: TestGateway;
let tenant: Tenant;
beforeAll(async () => {
  gateway = await createTestGateway();
  tenant = await gateway.tenant();
});
afterAll(() => gateway.close());

describe("the app's lazy groups", () => {
  it('load on their first request, not before, and answer 404s and 405s before they load', async () => {
    const key = tenant.workspaceKey;
    expect((await gateway.request('/v1/assistants', { key })).status).toBe(200);
    expect((await gateway.request('/v1/models', { key })).status).toBe(200);
    // A method the path is not served with, and a path the group does not serve: answered by the stub.
    const put = await gateway.request('/v1/conversations', { method: 'PUT', key, body: '{}' });
    expect(put.status).toBe(405);
    expect(put.headers.get('allow')).toBe('POST');
    const unknown = await errorOf(await gateway.request('/v1/responses/resp_1/nothing', { key }));
    expect(unknown).toMatchObject({ status: 404, code: 'unsupported_endpoint' });
    // Its bad input is the group's own validator's answer: the group ran.
    const unauthenticated = await gateway.request('/v1/responses', { method: 'POST', body: '{}' });
    expect(unauthenticated.status).toBe(401);
    expect(loadedGroups(gateway.app)).toEqual([]);

    const invalid = await errorOf(await gateway.request('/v1/responses', { method: 'POST', key, body: '{}' }));
    expect(invalid).toMatchObject({ status: 400, param: 'model' });
    expect(loadedGroups(gateway.app)).toEqual(['responses']);

    // An upload, the first request of its group: the stub carries the route's own-body mark, so
    // jsonBody leaves the multipart body to the group.
    const form = new FormData();
    form.set('purpose', 'assistants');
    form.set('file', new Blob(['hello']), 'hello.txt');
    const upload = await gateway.app.request('/v1/files', {
      method: 'POST',
      headers: { authorization: `Bearer ${key}` },
      body: form,
    });
    expect(upload.status).toBe(200);
    expect(loadedGroups(gateway.app)).toEqual(['files', 'responses']);
  });

  it('serve each the operations their stub declares (each loads)', async () => {
    // The document loads every group and describes its routes where its stub stands.
    const document = await openApiDocument(gateway.app);
    expect(Object.keys(document.paths ?? {})).toContain('/v1/conversations/{conversation_id}/items/{item_id}');
    expect(loadedGroups(gateway.app)).toEqual([
      'conversations',
      'containers',
      'files',
      'completions',
      'embeddings',
      'moderations',
      'responses',
      'vector_stores',
    ]);
  });
});

describe('a lazy group', () => {
  const OPERATIONS: Operation[] = [
    ['GET', '/:id'],
    ['POST', '/', 'own-body'],
  ];
  const group = () =>
    new Hono()
      .use(async (c, next) => {
        c.header('x-group', 'ran');
        await next();
      })
      .get('/:id', (c) => c.json({ id: c.req.param('id') }))
      .post('/', ownBody(), (c) => c.text('posted'));

  const errors: unknown[] = [];
  function appWith(load: () => Promise<Hono>, operations = OPERATIONS) {
    const app = new Hono().route('/things', lazyGroup('things', operations, load));
    app.onError((error) => {
      errors.push(error);
      return errorResponse(serverError(error));
    });
    return app;
  }

  it('loads once for concurrent first requests, and runs its middleware with the parameters of its route', async () => {
    let loads = 0;
    const app = appWith(async () => {
      loads++;
      return group();
    });
    const answers = await Promise.all(['a', 'b', 'c'].map(async (id) => app.request(`/things/${id}`)));
    expect(await Promise.all(answers.map((answer) => answer.json()))).toEqual([{ id: 'a' }, { id: 'b' }, { id: 'c' }]);
    expect(answers.map((answer) => answer.headers.get('x-group'))).toEqual(['ran', 'ran', 'ran']);
    expect((await app.request('/things', { method: 'POST' })).status).toBe(200);
    expect(loads).toBe(1);
    // The stub's own routes carry the mark jsonBody looks for, before the group loads.
    expect(app.routes.filter((route) => route.handler === ownBody()).map((route) => route.path)).toEqual(['/things']);
  });

  it('answers a failed load with a 500 in the envelope, and loads again on the next request', async () => {
    let loads = 0;
    const app = appWith(async () => {
      loads++;
      if (loads === 1) throw new Error('chunk missing');
      return group();
    });
    const failed = await app.request('/things/a');
    expect(await errorOf(failed)).toMatchObject({ status: 500, code: 'server_error' });
    expect((await app.request('/things/a')).status).toBe(200);
    expect(loads).toBe(2);
  });

  it('refuses to load a group whose routes are not its declared operations', async () => {
    errors.length = 0;
    const another = appWith(async () => group().delete('/:id', (c) => c.text('gone')));
    expect((await another.request('/things/a')).status).toBe(500);
    const unmarked = appWith(
      async () => group(),
      [
        ['GET', '/:id'],
        ['POST', '/'],
      ],
    );
    expect((await unmarked.request('/things/a')).status).toBe(500);
    const narrow = appWith(async () => new Hono().use('/:id', (_c, next) => next()).route('/', group()));
    expect((await narrow.request('/things/a')).status).toBe(500);
    expect(errors.map((error) => (error instanceof Error ? error.message : error))).toEqual([
      'The things group serves GET /:id, POST / own-body, DELETE /:id; its stub declares GET /:id, POST / own-body. Update its OPERATIONS.',
      'The things group serves GET /:id, POST / own-body; its stub declares GET /:id, POST /. Update its OPERATIONS.',
      'The things group has middleware on /:id or after its routes.',
    ]);
  });
});
