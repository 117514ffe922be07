import { Validator } from '@seriousme/openapi-schema-validator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { createApp } from '../src/app';
import { DOCUMENT_PATH, openApiDocument, serialiseDocument } from '../src/openapi/generate';
import { apiRoutes, createTestGateway, json, type TestGateway } from './support/gateway';

/**
 * GET /openapi.json describes every route of the app, validly, and is what the routes generate;
 * GET /docs serves the reference page.
 */

let gateway: TestGateway;
beforeAll(async () => {
  gateway = await createTestGateway();
});
afterAll(() => gateway?.close());

/** `/v1/threads/:thread_id` as OpenAPI writes it: `/v1/threads/{thread_id}`. */
const openApiPath = (path: string) => path.replace(/:([A-Za-z_]+)/g, '{$1}');

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
      expect(operation.responses.default.content['application/json'].schema).toEqual({ $ref: '#/components/schemas/Error' });
    }
    // The input schemas are the validators' own: bounds and enums included.
    const createAssistant = document.paths['/v1/assistants'].post.requestBody.content['application/json'].schema;
    expect(createAssistant.required).toContain('model');
    expect(createAssistant.properties.name.anyOf).toEqual([expect.objectContaining({ type: 'string', maxLength: 256 }), { type: 'null' }]);
    const listAssistants = document.paths['/v1/assistants'].get.parameters;
    expect(listAssistants).toEqual(
      expect.arrayContaining([expect.objectContaining({ name: 'order', in: 'query', schema: expect.objectContaining({ enum: ['asc', 'desc'] }) })]),
    );
    expect(document.paths['/health'].get.security).toEqual([]);
    const getRun = document.paths['/v1/threads/{thread_id}/runs/{run_id}'].get;
    expect(getRun.parameters.filter((p: { in: string }) => p.in === 'path').map((p: { name: string }) => p.name).sort()).toEqual(['run_id', 'thread_id']);
    expect(document.components.schemas.Error.properties.error.properties.code.enum).toContain('thread_has_active_run');
  });
});

describe('src/openapi/assets/openapi.json', () => {
  it('is what the routes and their schemas generate now (else: npm run openapi)', async () => {
    const generated = serialiseDocument(await openApiDocument(createApp(gateway.deps)));
    const kept = readFileSync(DOCUMENT_PATH, 'utf8');
    expect(kept === generated, 'src/openapi/assets/openapi.json is stale: run `npm run openapi` and commit the file').toBe(true);
  });
});

describe('GET /docs', () => {
  it('serves the interactive reference over /openapi.json', async () => {
    const response = await gateway.request('/docs');
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/html/);
    expect(await response.text()).toContain('data-url="/openapi.json"');
  });
});
