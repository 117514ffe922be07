import { defined } from '../../support/defined';
import { Validator } from '@seriousme/openapi-schema-validator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHash } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { createApp } from '../../../src/app';
import { ASSETS_DIRECTORY } from '../../../src/runtime/node/static-assets';
import { DOCS_SCRIPT } from '../../../src/http/openapi/docs-page';
import { DOCUMENT_PATH, openApiDocument, serialiseDocument } from '../../../src/http/openapi/generate';
import { apiRoutes, createTestGateway, json, type TestGateway } from '../../support/gateway';

/**
 * GET /openapi.json describes every route of the app, validly, and is what the routes generate;
 * GET /docs serves the reference page and its script.
 */

let gateway: TestGateway;
beforeAll(async () => {
  gateway = await createTestGateway();
});
afterAll(() => gateway?.close());

/** `/v1/threads/:thread_id` as OpenAPI writes it: `/v1/threads/{thread_id}`. */
const openApiPath = (path: string) => path.replace(/:([A-Za-z_]+)(\{[^}]*\})?/g, '{$1}');

describe('GET /openapi.json', () => {
  it('is a valid OpenAPI 3.1 document, unauthenticated', async () => {
    const response = await gateway.request('/openapi.json');
    expect(response.status).toBe(200);
    const document = await json(response);
    expect(document.openapi).toBe('3.1.0');
    const result = await new Validator().validate(document);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
  });

  it('has every route of the app, each with its input schema and the error envelope', async () => {
    const document = await json(await gateway.request('/openapi.json'));
    const routes = apiRoutes(gateway.app);
    expect(routes.length).toBeGreaterThan(20);
    for (const { method, path } of routes) {
      const operation = document.paths[openApiPath(path)]?.[method.toLowerCase()];
      expect(operation, `${method} ${path}`).toBeDefined();
      expect(operation.responses.default.content['application/json'].schema).toEqual({
        $ref: '#/components/schemas/Error',
      });
    }
    // The input schemas are the validators' own: bounds and enums included.
    const createAssistant = document.paths['/v1/assistants'].post.requestBody.content['application/json'].schema;
    expect(createAssistant.required).toContain('model');
    expect(createAssistant.properties.name.anyOf).toEqual([
      expect.objectContaining({ type: 'string', maxLength: 256 }),
      { type: 'null' },
    ]);
    const listAssistants = document.paths['/v1/assistants'].get.parameters;
    expect(listAssistants).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          name: 'order',
          in: 'query',
          schema: expect.objectContaining({ enum: ['asc', 'desc'] }),
        }),
      ]),
    );
    expect(document.paths['/health'].get.security).toEqual([]);
    const getRun = document.paths['/v1/threads/{thread_id}/runs/{run_id}'].get;
    expect(
      getRun.parameters
        .filter((p: { in: string }) => p.in === 'path')
        .map((p: { name: string }) => p.name)
        .sort(),
    ).toEqual(['run_id', 'thread_id']);
    expect(document.components.schemas.Error.properties.error.properties.code.enum).toContain('thread_has_active_run');
  });
});

describe('the answers /openapi.json declares', () => {
  it('are, for every operation, a success schema and the error envelope for its error statuses', async () => {
    const document = await json(await gateway.request('/openapi.json'));
    const error = { $ref: '#/components/schemas/Error' };
    for (const { method, path } of [...apiRoutes(gateway.app), { method: 'GET', path: '/health' }]) {
      const where = `${method} ${path}`;
      const operation = document.paths[openApiPath(path)][method.toLowerCase()];
      expect(operation.summary, where).toMatch(/^[A-Z]/);
      const success = operation.responses[200].content;
      const schema = success['application/json']?.schema ?? success['application/octet-stream']?.schema;
      expect(schema, where).toBeDefined();
      expect(Object.keys(schema).length, where).toBeGreaterThan(0);
      const statuses = Object.keys(operation.responses).filter((status) => /^[45]\d\d$/.test(status));
      if (path.startsWith('/v1/')) expect(statuses, where).toEqual(expect.arrayContaining(['400', '401']));
      if (path.includes('/:')) expect(statuses, where).toContain('404');
      for (const status of [...statuses, 'default']) {
        expect(operation.responses[status].content['application/json'].schema, `${where} ${status}`).toEqual(error);
      }
    }
    // A run's object is OpenAI's RunObject, by name; lists and deletions say what they hold.
    const createRun = document.paths['/v1/threads/{thread_id}/runs'].post.responses;
    expect(createRun[200].content['application/json'].schema).toEqual({ $ref: '#/components/schemas/RunObject' });
    expect(createRun[429]).toBeDefined();
    const listed = document.paths['/v1/assistants'].get.responses[200].content['application/json'].schema;
    expect(listed.properties.data.items).toEqual({ $ref: '#/components/schemas/AssistantObject' });
    const deleted = document.paths['/v1/threads/{thread_id}'].delete.responses[200].content['application/json'].schema;
    expect(deleted.properties.object).toEqual({ type: 'string', const: 'thread.deleted' });
    expect(document.components.schemas.RunObject.properties.status.enum).toContain('requires_action');
  });

  it('include the event stream where a run or a (chat) completion can be streamed, and there only', async () => {
    const document = await json(await gateway.request('/openapi.json'));
    const streamed = Object.entries(
      document.paths as Record<string, Record<string, { responses: Record<string, { content?: object }> }>>,
    )
      .flatMap(([path, item]) =>
        Object.entries(item).map(([method, operation]) => ({
          operation: `${method} ${path}`,
          content: defined(operation.responses[200]).content,
        })),
      )
      .filter(({ content }) => content !== undefined && 'text/event-stream' in content)
      .map(({ operation }) => operation)
      .sort();
    expect(streamed).toEqual([
      'get /v1/responses/{response_id}',
      'post /v1/chat/completions',
      'post /v1/completions',
      'post /v1/responses',
      'post /v1/threads/runs',
      'post /v1/threads/{thread_id}/runs',
      'post /v1/threads/{thread_id}/runs/{run_id}/submit_tool_outputs',
    ]);
  });
});

describe('src/http/openapi/assets/openapi.json', () => {
  it('is what the routes and their schemas generate now (else: npm run openapi)', async () => {
    const generated = serialiseDocument(await openApiDocument(createApp(gateway.deps)));
    const kept = readFileSync(DOCUMENT_PATH, 'utf8');
    expect(
      kept === generated,
      'src/http/openapi/assets/openapi.json is stale: run `npm run openapi` and commit the file',
    ).toBe(true);
  });
});

describe('GET /docs', () => {
  it('serves the reference page, its script from the gateway itself with the integrity the page declares', async () => {
    const response = await gateway.request('/docs');
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/html/);
    const page = await response.text();
    const scripts = [...page.matchAll(/<script src="([^"]+)" integrity="([^"]+)"/g)].map(([, src, integrity]) => ({
      src,
      integrity,
    }));
    expect(scripts).toEqual([{ src: `/docs/${DOCS_SCRIPT.file}`, integrity: DOCS_SCRIPT.integrity }]);
    expect(page).toContain('<a href="/openapi.json">');

    const script = await gateway.request(`/docs/${DOCS_SCRIPT.file}`);
    expect(script.status).toBe(200);
    expect(script.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(script.headers.get('cache-control')).toContain('immutable');
    const bytes = new Uint8Array(await script.arrayBuffer());
    expect(`sha384-${createHash('sha384').update(bytes).digest('base64')}`).toBe(DOCS_SCRIPT.integrity);
    expect(bytes.length).toBe(statSync(join(ASSETS_DIRECTORY, DOCS_SCRIPT.file)).size);
  });

  it('serves no other file of the assets directory', async () => {
    for (const path of ['/docs/openapi.json', '/docs/scalar-api-reference-0.0.0.js', '/docs/..%2Fopenapi.json']) {
      expect((await gateway.request(path)).status, path).toBe(404);
    }
  });
});
