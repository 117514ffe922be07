import { defined } from '../../support/defined';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fakeThread, startFakeUpstream, type FakeScenario, type FakeUpstreamServer } from '../../support/fake-upstream';
import { apiRoutes, createTestGateway, json, type Tenant, type TestGateway } from '../../support/gateway';
import * as ours from '../../support/gateway-openapi';
import { componentErrors, referenceOperations, responseComponent, streamEventErrors } from '../../support/openapi';
import { WEATHER_TOOL } from '../../support/runs';
import { parseEventStream, type StreamEvent } from '../../support/sse';

/**
 * Every object the gateway answers has the shape OpenAI describes for it: each operation's body
 * validates against the component the reference names for its 200 answer (test/support/openapi.ts,
 * strict about undocumented properties), each event of a streamed answer against its
 * AssistantStreamEvent, and each error against ErrorResponse. Each is checked against the gateway's
 * own document too (src/http/openapi/assets/openapi.json, test/support/gateway-openapi.ts): the schema it
 * declares for that operation and status, and for each streamed object its component; and the
 * gateway's own resources (policies, virtual keys, usage), which OpenAI does not describe, against
 * that document alone.
 *
 * One row per call. An operation the gateway does not serve yet has its row already, marked
 * `pending` with the issue that brings it: it runs as expected-to-fail until then, and the
 * coverage test below fails once the route exists and its row is still pending (remove the mark).
 */

const FILE_TEXT = 'Umbrellas are lent at the front desk.\n';

interface Call {
  method: string;
  /** Under /v1. */
  path: string;
  /** JSON-encoded, unless a FormData (sent as multipart/form-data, as the SDKs upload files). */
  body?: unknown;
  /** The API key to send; default the tenant's workspace key, null for none. */
  key?: string | null;
  /** Added to (and over) the ones every call sends. */
  headers?: Record<string, string>;
}

/** What a row can ask for: things that exist before its call, each made fresh through the API. */
interface World {
  /** An assistant with a function tool. */
  assistant(): Promise<string>;
  /** A thread whose streamed run ended (completed, unless `scenario` says otherwise): its ids. */
  completedRun(
    scenario?: FakeScenario,
  ): Promise<{ threadId: string; runId: string; messageId: string; stepId: string }>;
  /** A thread whose run waits for the output of one tool call. */
  runRequiringAction(): Promise<{ threadId: string; runId: string; toolCallId: string }>;
  /** An uploaded file of purpose assistants, whose bytes are FILE_TEXT. */
  file(): Promise<string>;
  /** An uploaded PNG of purpose vision. */
  image(): Promise<string>;
  /** A vector store with one file, ingested, and the batch that added it. */
  vectorStore(): Promise<{ storeId: string; fileId: string; batchId: string }>;
}

interface Operation {
  /** The reference's operationId: its 200 answer names the component the body must be. */
  operationId: string;
  /** What distinguishes this row from the operation's other rows. */
  variant?: string;
  /** The call answers a `text/event-stream`, whose events are checked one by one. */
  streamed?: boolean;
  /** Events the stream must contain, so that the row covers the schemas it says it covers. */
  events?: string[];
  /** Not served yet: the issue that serves it. The row is expected to fail until then. */
  pending?: string;
  /**
   * The answer is a file's bytes, not JSON: they must be these. (The reference types the 200 of
   * downloadFile as a JSON string; OpenAI, and the SDKs, send and read the file as it is.)
   */
  bytes?: string;
  call(world: World): Promise<Call>;
  /** Runs around the call (a database trigger, say); answers what undoes it. */
  around?(gateway: TestGateway): Promise<() => Promise<void>>;
}

/** Builds the body of a createAndRun whose fake model answers `scenario`. */
const threadAndRun = async (
  world: World,
  scenario: FakeScenario | FakeScenario[],
  extra: Record<string, unknown> = {},
) => ({
  assistant_id: await world.assistant(),
  thread: fakeThread('What is the weather in Paris?', scenario),
  ...extra,
});

const operations: Operation[] = [
  // ── Assistants ──
  {
    operationId: 'createAssistant',
    call: async () => ({
      method: 'POST',
      path: '/assistants',
      body: {
        model: 'fake-model',
        name: 'Weather bot',
        description: 'Answers about the weather',
        instructions: 'You answer briefly.',
        tools: [WEATHER_TOOL],
        metadata: { team: 'forecast' },
        temperature: 0.5,
        top_p: 0.9,
        response_format: { type: 'json_object' },
      },
    }),
  },
  {
    operationId: 'createAssistant',
    variant: 'a json_schema response format',
    call: async () => ({
      method: 'POST',
      path: '/assistants',
      body: {
        model: 'fake-model',
        response_format: {
          type: 'json_schema',
          json_schema: {
            name: 'forecast',
            strict: true,
            schema: { type: 'object', properties: { sky: { type: 'string' } } },
          },
        },
      },
    }),
  },
  {
    operationId: 'listAssistants',
    call: async (world) => (await world.assistant(), { method: 'GET', path: '/assistants?limit=2&order=asc' }),
  },
  {
    operationId: 'getAssistant',
    call: async (world) => ({ method: 'GET', path: `/assistants/${await world.assistant()}` }),
  },
  {
    operationId: 'modifyAssistant',
    call: async (world) => ({
      method: 'POST',
      path: `/assistants/${await world.assistant()}`,
      body: { name: 'Renamed', metadata: { v: '2' } },
    }),
  },
  {
    operationId: 'deleteAssistant',
    call: async (world) => ({ method: 'DELETE', path: `/assistants/${await world.assistant()}` }),
  },

  // ── Threads ──
  {
    operationId: 'createThread',
    call: async () => ({
      method: 'POST',
      path: '/threads',
      body: { messages: [{ role: 'user', content: 'Hello', metadata: { n: '1' } }], metadata: { topic: 'weather' } },
    }),
  },
  {
    operationId: 'getThread',
    call: async (world) => ({ method: 'GET', path: `/threads/${(await world.completedRun()).threadId}` }),
  },
  {
    operationId: 'modifyThread',
    call: async (world) => ({
      method: 'POST',
      path: `/threads/${(await world.completedRun()).threadId}`,
      body: { metadata: { topic: 'rain' } },
    }),
  },
  {
    operationId: 'deleteThread',
    call: async (world) => ({ method: 'DELETE', path: `/threads/${(await world.completedRun()).threadId}` }),
  },

  // ── Messages ──
  {
    operationId: 'listMessages',
    call: async (world) => ({ method: 'GET', path: `/threads/${(await world.completedRun()).threadId}/messages` }),
  },
  {
    operationId: 'listMessages',
    variant: 'an answer cut short, the run failed',
    call: async (world) => {
      const { threadId } = await world.completedRun({ reply: 'It will rain all day', error_after_chunks: 3 });
      return { method: 'GET', path: `/threads/${threadId}/messages?order=asc` };
    },
  },
  {
    operationId: 'createMessage',
    call: async (world) => ({
      method: 'POST',
      path: `/threads/${(await world.completedRun()).threadId}/messages`,
      body: { role: 'user', content: [{ type: 'text', text: 'And tomorrow?' }], metadata: { n: '2' } },
    }),
  },
  {
    operationId: 'createMessage',
    variant: 'an image_file part',
    call: async (world) => ({
      method: 'POST',
      path: `/threads/${(await world.completedRun()).threadId}/messages`,
      body: {
        role: 'user',
        content: [
          { type: 'text', text: 'And this?' },
          { type: 'image_file', image_file: { file_id: await world.image(), detail: 'high' } },
        ],
      },
    }),
  },
  {
    operationId: 'getMessage',
    call: async (world) => {
      const { threadId, messageId } = await world.completedRun();
      return { method: 'GET', path: `/threads/${threadId}/messages/${messageId}` };
    },
  },
  {
    operationId: 'modifyMessage',
    call: async (world) => {
      const { threadId, messageId } = await world.completedRun();
      return {
        method: 'POST',
        path: `/threads/${threadId}/messages/${messageId}`,
        body: { metadata: { seen: 'yes' } },
      };
    },
  },
  {
    operationId: 'deleteMessage',
    call: async (world) => {
      const { threadId, messageId } = await world.completedRun();
      return { method: 'DELETE', path: `/threads/${threadId}/messages/${messageId}` };
    },
  },

  // ── Runs ──
  {
    operationId: 'createThreadAndRun',
    call: async (world) => ({
      method: 'POST',
      path: '/threads/runs',
      body: await threadAndRun(world, { reply: 'Sunny.' }),
    }),
  },
  {
    operationId: 'createThreadAndRun',
    variant: 'streamed, a text answer',
    streamed: true,
    events: ['thread.created', 'thread.run.step.created', 'thread.message.delta', 'thread.run.completed', 'done'],
    call: async (world) => ({
      method: 'POST',
      path: '/threads/runs',
      body: await threadAndRun(
        world,
        { reply: 'Sunny and warm.' },
        { stream: true, metadata: { user: 'u1' }, max_completion_tokens: 512 },
      ),
    }),
  },
  {
    operationId: 'createThreadAndRun',
    variant: 'streamed into two tool calls',
    streamed: true,
    events: ['thread.run.step.delta', 'thread.run.requires_action'],
    call: async (world) => ({
      method: 'POST',
      path: '/threads/runs',
      body: await threadAndRun(
        world,
        { tool_calls: 2 },
        { stream: true, tool_choice: 'required', parallel_tool_calls: true },
      ),
    }),
  },
  {
    operationId: 'createThreadAndRun',
    variant: 'streamed, cut by max_completion_tokens',
    streamed: true,
    events: ['thread.message.incomplete', 'thread.run.incomplete'],
    call: async (world) => ({
      method: 'POST',
      path: '/threads/runs',
      body: await threadAndRun(
        world,
        { reply: 'word '.repeat(40), finish_reason: 'length' },
        { stream: true, max_completion_tokens: 256 },
      ),
    }),
  },
  {
    operationId: 'createThreadAndRun',
    variant: 'streamed, the upstream fails',
    streamed: true,
    events: ['thread.run.failed'],
    call: async (world) => ({
      method: 'POST',
      path: '/threads/runs',
      body: await threadAndRun(world, { status: 500 }, { stream: true }),
    }),
  },
  {
    operationId: 'createThreadAndRun',
    variant: 'streamed, the gateway fails after the stream began',
    streamed: true,
    events: ['error', 'done'],
    // The run's outcome cannot be written, nor its failure: the stream's `error` event.
    around: async (gateway) => {
      const triggers = {
        refuse_answer: `CREATE TRIGGER refuse_answer BEFORE UPDATE ON messages WHEN NEW.content LIKE '%CONFORMANCE-ERROR%'
          BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`,
        refuse_outcome: `CREATE TRIGGER refuse_outcome BEFORE UPDATE OF status ON runs WHEN NEW.status <> 'in_progress'
          AND EXISTS (SELECT 1 FROM messages m WHERE m.thread_id = NEW.thread_id AND m.content LIKE '%CONFORMANCE-ERROR%')
          BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`,
      };
      for (const sql of Object.values(triggers)) await gateway.database.client.execute(sql);
      return async () => {
        for (const name of Object.keys(triggers)) await gateway.database.client.execute(`DROP TRIGGER ${name}`);
      };
    },
    call: async (world) => ({
      method: 'POST',
      path: '/threads/runs',
      body: await threadAndRun(world, { reply: 'CONFORMANCE-ERROR' }, { stream: true }),
    }),
  },
  {
    operationId: 'createRun',
    call: async (world) => {
      const { threadId } = await world.completedRun();
      return {
        method: 'POST',
        path: `/threads/${threadId}/runs`,
        body: { assistant_id: await world.assistant(), additional_instructions: 'Be brief.' },
      };
    },
  },
  {
    operationId: 'createRun',
    variant: 'streamed',
    streamed: true,
    events: ['thread.run.created', 'thread.message.delta', 'thread.run.completed', 'done'],
    call: async (world) => {
      const { threadId } = await world.completedRun();
      return {
        method: 'POST',
        path: `/threads/${threadId}/runs`,
        body: { assistant_id: await world.assistant(), stream: true },
      };
    },
  },
  {
    operationId: 'listRuns',
    call: async (world) => ({ method: 'GET', path: `/threads/${(await world.completedRun()).threadId}/runs` }),
  },
  {
    operationId: 'getRun',
    call: async (world) => {
      const { threadId, runId } = await world.completedRun();
      return { method: 'GET', path: `/threads/${threadId}/runs/${runId}` };
    },
  },
  {
    operationId: 'getRun',
    variant: 'requires_action',
    call: async (world) => {
      const { threadId, runId } = await world.runRequiringAction();
      return { method: 'GET', path: `/threads/${threadId}/runs/${runId}` };
    },
  },
  {
    operationId: 'modifyRun',
    call: async (world) => {
      const { threadId, runId } = await world.completedRun();
      return { method: 'POST', path: `/threads/${threadId}/runs/${runId}`, body: { metadata: { reviewed: 'yes' } } };
    },
  },
  {
    operationId: 'submitToolOuputsToRun',
    call: async (world) => {
      const { threadId, runId, toolCallId } = await world.runRequiringAction();
      return {
        method: 'POST',
        path: `/threads/${threadId}/runs/${runId}/submit_tool_outputs`,
        body: { tool_outputs: [{ tool_call_id: toolCallId, output: '18°C' }] },
      };
    },
  },
  {
    operationId: 'submitToolOuputsToRun',
    variant: 'streamed',
    streamed: true,
    events: ['thread.run.queued', 'thread.run.step.completed', 'thread.message.delta', 'thread.run.completed', 'done'],
    call: async (world) => {
      const { threadId, runId, toolCallId } = await world.runRequiringAction();
      return {
        method: 'POST',
        path: `/threads/${threadId}/runs/${runId}/submit_tool_outputs`,
        body: { stream: true, tool_outputs: [{ tool_call_id: toolCallId, output: '18°C' }] },
      };
    },
  },
  {
    operationId: 'cancelRun',
    call: async (world) => {
      const { threadId, runId } = await world.runRequiringAction();
      return { method: 'POST', path: `/threads/${threadId}/runs/${runId}/cancel` };
    },
  },

  // ── Files ──
  {
    operationId: 'createFile',
    call: async () => {
      const form = new FormData();
      form.set('file', new Blob([FILE_TEXT], { type: 'text/plain' }), 'notes.txt');
      form.set('purpose', 'assistants');
      return { method: 'POST', path: '/files', body: form };
    },
  },
  {
    operationId: 'createFile',
    variant: 'with expires_after',
    call: async () => {
      const form = new FormData();
      form.set('file', new Blob(['{"prompt":"x"}\n']), 'batch.jsonl');
      form.set('purpose', 'batch');
      form.set('expires_after[anchor]', 'created_at');
      form.set('expires_after[seconds]', '86400');
      return { method: 'POST', path: '/files', body: form };
    },
  },
  {
    operationId: 'listFiles',
    call: async (world) => (await world.file(), { method: 'GET', path: '/files?purpose=assistants&limit=2' }),
  },
  { operationId: 'retrieveFile', call: async (world) => ({ method: 'GET', path: `/files/${await world.file()}` }) },
  { operationId: 'deleteFile', call: async (world) => ({ method: 'DELETE', path: `/files/${await world.file()}` }) },
  {
    operationId: 'downloadFile',
    bytes: FILE_TEXT,
    call: async (world) => ({ method: 'GET', path: `/files/${await world.file()}/content` }),
  },

  // ── Run steps ──
  {
    operationId: 'listRunSteps',
    call: async (world) => {
      const { threadId, runId } = await world.completedRun();
      return { method: 'GET', path: `/threads/${threadId}/runs/${runId}/steps` };
    },
  },
  {
    operationId: 'getRunStep',
    call: async (world) => {
      const { threadId, runId, stepId } = await world.completedRun();
      return { method: 'GET', path: `/threads/${threadId}/runs/${runId}/steps/${stepId}` };
    },
  },

  // ── Vector stores ──
  {
    operationId: 'createVectorStore',
    call: async (world) => ({
      method: 'POST',
      path: '/vector_stores',
      body: {
        name: 'Docs',
        file_ids: [await world.file()],
        chunking_strategy: { type: 'static', static: { max_chunk_size_tokens: 400, chunk_overlap_tokens: 100 } },
        expires_after: { anchor: 'last_active_at', days: 7 },
        metadata: { team: 'docs' },
      },
    }),
  },
  {
    operationId: 'listVectorStores',
    call: async (world) => (await world.vectorStore(), { method: 'GET', path: '/vector_stores?limit=2' }),
  },
  {
    operationId: 'getVectorStore',
    call: async (world) => ({ method: 'GET', path: `/vector_stores/${(await world.vectorStore()).storeId}` }),
  },
  {
    operationId: 'modifyVectorStore',
    call: async (world) => ({
      method: 'POST',
      path: `/vector_stores/${(await world.vectorStore()).storeId}`,
      body: { name: 'Renamed', expires_after: null },
    }),
  },
  {
    operationId: 'deleteVectorStore',
    call: async (world) => ({ method: 'DELETE', path: `/vector_stores/${(await world.vectorStore()).storeId}` }),
  },
  {
    operationId: 'createVectorStoreFile',
    call: async (world) => ({
      method: 'POST',
      path: `/vector_stores/${(await world.vectorStore()).storeId}/files`,
      body: { file_id: await world.file(), attributes: { year: 2024, draft: true, author: 'ann' } },
    }),
  },
  {
    operationId: 'listVectorStoreFiles',
    call: async (world) => ({
      method: 'GET',
      path: `/vector_stores/${(await world.vectorStore()).storeId}/files?filter=completed`,
    }),
  },
  {
    operationId: 'getVectorStoreFile',
    call: async (world) => {
      const { storeId, fileId } = await world.vectorStore();
      return { method: 'GET', path: `/vector_stores/${storeId}/files/${fileId}` };
    },
  },
  {
    operationId: 'updateVectorStoreFileAttributes',
    call: async (world) => {
      const { storeId, fileId } = await world.vectorStore();
      return {
        method: 'POST',
        path: `/vector_stores/${storeId}/files/${fileId}`,
        body: { attributes: { reviewed: true } },
      };
    },
  },
  {
    operationId: 'deleteVectorStoreFile',
    call: async (world) => {
      const { storeId, fileId } = await world.vectorStore();
      return { method: 'DELETE', path: `/vector_stores/${storeId}/files/${fileId}` };
    },
  },
  {
    operationId: 'retrieveVectorStoreFileContent',
    call: async (world) => {
      const { storeId, fileId } = await world.vectorStore();
      return { method: 'GET', path: `/vector_stores/${storeId}/files/${fileId}/content` };
    },
  },
  {
    operationId: 'createVectorStoreFileBatch',
    call: async (world) => ({
      method: 'POST',
      path: `/vector_stores/${(await world.vectorStore()).storeId}/file_batches`,
      body: { files: [{ file_id: await world.file(), attributes: { n: 1 } }, { file_id: await world.file() }] },
    }),
  },
  {
    operationId: 'getVectorStoreFileBatch',
    call: async (world) => {
      const { storeId, batchId } = await world.vectorStore();
      return { method: 'GET', path: `/vector_stores/${storeId}/file_batches/${batchId}` };
    },
  },
  {
    operationId: 'cancelVectorStoreFileBatch',
    call: async (world) => {
      const { storeId, batchId } = await world.vectorStore();
      return { method: 'POST', path: `/vector_stores/${storeId}/file_batches/${batchId}/cancel` };
    },
  },
  {
    operationId: 'listFilesInVectorStoreBatch',
    call: async (world) => {
      const { storeId, batchId } = await world.vectorStore();
      return { method: 'GET', path: `/vector_stores/${storeId}/file_batches/${batchId}/files` };
    },
  },
  {
    operationId: 'searchVectorStore',
    call: async (world) => ({
      method: 'POST',
      path: `/vector_stores/${(await world.vectorStore()).storeId}/search`,
      body: { query: 'hello' },
    }),
  },
];

/** Errors, one per kind of refusal the operations above meet: each body must be an ErrorResponse. */
const errors: { name: string; status: number; call(world: World): Promise<Call> }[] = [
  { name: 'no API key', status: 401, call: async () => ({ method: 'GET', path: '/assistants', key: null }) },
  {
    name: 'an invalid body',
    status: 400,
    call: async () => ({ method: 'POST', path: '/assistants', body: { model: 42 } }),
  },
  {
    name: 'malformed JSON',
    status: 400,
    call: async () => ({ method: 'POST', path: '/assistants', body: '{"model":' }),
  },
  {
    name: 'an unknown assistant',
    status: 404,
    call: async () => ({ method: 'GET', path: '/assistants/asst_missing' }),
  },
  { name: 'an unknown file', status: 404, call: async () => ({ method: 'GET', path: '/files/file-missing' }) },
  {
    name: 'an upload with a wrong purpose',
    status: 400,
    call: async () => {
      const form = new FormData();
      form.set('file', new Blob(['x']), 'x.txt');
      form.set('purpose', 'memes');
      return { method: 'POST', path: '/files', body: form };
    },
  },
  {
    name: 'an upload that is not multipart',
    status: 415,
    call: async () => ({ method: 'POST', path: '/files', body: { purpose: 'assistants' } }),
  },
  {
    name: 'an unknown run',
    status: 404,
    call: async (world) => ({
      method: 'GET',
      path: `/threads/${(await world.completedRun()).threadId}/runs/run_missing`,
    }),
  },
  {
    name: 'tool outputs for a run that asks for none',
    status: 400,
    call: async (world) => {
      const { threadId, runId } = await world.completedRun();
      return {
        method: 'POST',
        path: `/threads/${threadId}/runs/${runId}/submit_tool_outputs`,
        body: { tool_outputs: [{ tool_call_id: 'call_x', output: '1' }] },
      };
    },
  },
  {
    name: 'an unsupported beta version',
    status: 400,
    call: async () => ({ method: 'GET', path: '/assistants', headers: { 'openai-beta': 'assistants=v1' } }),
  },
  { name: 'a method the route does not have', status: 405, call: async () => ({ method: 'PUT', path: '/assistants' }) },
  { name: 'an unknown route', status: 404, call: async () => ({ method: 'GET', path: '/no-such-thing' }) },
];

let gateway: TestGateway;
let fake: FakeUpstreamServer;
let tenant: Tenant;
let virtualKey: string;

beforeAll(async () => {
  fake = await startFakeUpstream();
  gateway = await createTestGateway();
  tenant = await gateway.tenant();
  virtualKey = await gateway.virtualKey(tenant, { base_url: fake.baseURL });
});
afterAll(async () => {
  await gateway.close();
  await fake.close();
});

function send(call: Call, as: Tenant = tenant): Promise<Response> {
  if (call.body instanceof FormData) {
    return gateway.app.request(`http://gateway.test/v1${call.path}`, {
      method: call.method,
      headers: { 'x-gateway-api-key': call.key ?? as.workspaceKey, ...call.headers },
      body: call.body,
    });
  }
  return gateway.request(`/v1${call.path}`, {
    method: call.method,
    ...(call.key === null ? {} : { key: call.key ?? as.workspaceKey }),
    headers: { 'openai-beta': 'assistants=v2', 'x-gateway-virtual-key': virtualKey, ...call.headers },
    ...(call.body === undefined ? {} : { body: call.body }),
  });
}

async function streamedRun(body: Record<string, unknown>): Promise<StreamEvent[]> {
  const response = await send({ method: 'POST', path: '/threads/runs', body: { ...body, stream: true } });
  if (response.status !== 200) throw new Error(`createAndRun answered ${response.status}: ${await response.text()}`);
  return parseEventStream(await response.text());
}

const dataOf = (events: StreamEvent[], name: string): any => {
  const found = events.find((event) => event.event === name);
  if (!found) throw new Error(`no ${name} event in: ${events.map((event) => event.event).join(', ')}`);
  return found.data;
};

const world: World = {
  async assistant() {
    const response = await send({
      method: 'POST',
      path: '/assistants',
      body: { model: 'fake-model', instructions: 'You answer briefly.', tools: [WEATHER_TOOL] },
    });
    return (await json(response)).id;
  },
  async completedRun(scenario: FakeScenario = { reply: 'Sunny.' }) {
    const events = await streamedRun({
      assistant_id: await world.assistant(),
      thread: fakeThread('What is the weather?', scenario),
    });
    const run = defined(
      events.findLast((event) => event.event.startsWith('thread.run.') && !event.event.includes('.step.')),
    ).data as { id: string; thread_id: string };
    const message = defined(
      events.findLast((event) => event.event.startsWith('thread.message.') && event.event !== 'thread.message.delta'),
    ).data as { id: string };
    const step = defined(
      events.findLast((event) => event.event.startsWith('thread.run.step.') && event.event !== 'thread.run.step.delta'),
    ).data as { id: string };
    return { threadId: run.thread_id, runId: run.id, messageId: message.id, stepId: step.id };
  },
  async file() {
    const form = new FormData();
    form.set('file', new Blob([FILE_TEXT]), 'desk.txt');
    form.set('purpose', 'assistants');
    return (await json(await send({ method: 'POST', path: '/files', body: form }))).id;
  },
  async image() {
    const form = new FormData();
    form.set(
      'file',
      new Blob([new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13])], { type: 'image/png' }),
      'dot.png',
    );
    form.set('purpose', 'vision');
    return (await json(await send({ method: 'POST', path: '/files', body: form }))).id;
  },
  async vectorStore() {
    const store = await json(await send({ method: 'POST', path: '/vector_stores', body: { name: 'Docs' } }));
    const batch = await json(
      await send({
        method: 'POST',
        path: `/vector_stores/${store.id}/file_batches`,
        body: { file_ids: [await world.file()] },
      }),
    );
    await gateway.tasks.drain(20_000);
    return {
      storeId: store.id,
      fileId: (await json(await send({ method: 'GET', path: `/vector_stores/${store.id}/files` }))).data[0].id,
      batchId: batch.id,
    };
  },
  async runRequiringAction() {
    const events = await streamedRun({
      assistant_id: await world.assistant(),
      thread: fakeThread('Weather in Paris?', { tool_calls: 1 }),
    });
    const run = dataOf(events, 'thread.run.requires_action');
    return {
      threadId: run.thread_id,
      runId: run.id,
      toolCallId: run.required_action.submit_tool_outputs.tool_calls[0].id,
    };
  },
};

describe('every answer validates against the reference', () => {
  for (const operation of operations) {
    const shape = operation.streamed
      ? 'AssistantStreamEvent'
      : operation.bytes !== undefined
        ? 'the file'
        : responseComponent(operation.operationId);
    const title = `${operation.operationId}${operation.variant ? `, ${operation.variant}` : ''} → ${shape}`;
    const test = operation.pending ? it.fails : it;
    test(operation.pending ? `${title} (expected to fail until ${operation.pending})` : title, async () => {
      const call = await operation.call(world);
      const undo = await operation.around?.(gateway);
      try {
        const response = await send(call);
        const type = response.headers.get('content-type') ?? '';
        if (response.status !== 200)
          throw new Error(`${call.method} ${call.path} answered ${response.status}: ${await response.text()}`);
        if (operation.bytes !== undefined) {
          expect(await response.text()).toBe(operation.bytes);
          return;
        }
        expect(type.startsWith('text/event-stream'), `content-type ${type}`).toBe(Boolean(operation.streamed));
        if (!operation.streamed) {
          const body = await response.json();
          expect(componentErrors(shape, body)).toEqual([]);
          expect(ours.answerErrors(call.method, `/v1${call.path}`, 200, body)).toEqual([]);
          return;
        }
        const events = parseEventStream(await response.text());
        const failures = events.flatMap(({ event, data }, i) =>
          streamEventErrors(event, data).map((line) => `event ${i} (${event}): ${line}`),
        );
        expect(failures).toEqual([]);
        const ourFailures = events.flatMap(({ event, data }, i) => {
          const component = ours.streamEventComponent(event);
          return component
            ? ours.componentErrors(component, data).map((line) => `event ${i} (${event} → ${component}): ${line}`)
            : [];
        });
        expect(ourFailures).toEqual([]);
        const names = events.map(({ event }) => event);
        expect(names.at(-1)).toBe('done');
        for (const name of operation.events ?? []) expect(names, `no ${name} event`).toContain(name);
      } finally {
        await undo?.();
      }
    });
  }
});

describe('every error validates against ErrorResponse', () => {
  for (const error of errors) {
    it(`${error.name}: ${error.status}`, async () => {
      const call = await error.call(world);
      const response = await send(call);
      expect(response.status).toBe(error.status);
      const body = await response.json();
      expect(componentErrors('ErrorResponse', body)).toEqual([]);
      expectDeclaredError(call, error.status, body);
    });
  }

  it('a rate limit: 429, the body the reference names for it', async () => {
    const limited = await gateway.tenant();
    const policy = await send(
      {
        method: 'POST',
        path: '/policies/rate-limits',
        body: {
          conditions: [{ key: 'model', value: '*' }],
          group_by: [{ key: 'api_key' }],
          type: 'requests',
          unit: 'rpd',
          value: 1,
        },
      },
      limited,
    );
    expect(policy.status).toBe(200);
    const assistant = await json(
      await send({ method: 'POST', path: '/assistants', body: { model: 'fake-model' } }, limited),
    );
    const limitedKey = await gateway.virtualKey(limited, { base_url: fake.baseURL });
    const run = {
      method: 'POST',
      path: '/threads/runs',
      headers: { 'x-gateway-virtual-key': limitedKey },
      body: { assistant_id: assistant.id, thread: fakeThread('Hi') },
    };
    expect((await send(run, limited)).status).toBe(200);
    const refused = await send(run, limited);
    expect(refused.status).toBe(429);
    const body = await refused.json();
    expect(componentErrors(responseComponent('createThreadAndRun', '429'), body)).toEqual([]);
    expectDeclaredError(run, 429, body);
  });
});

/**
 * An error is the envelope the gateway's document declares for its operation and status, and the
 * operation names that status (405 aside: it is the path's, not an operation's); for a path the
 * document does not have, the envelope is its Error component.
 */
function expectDeclaredError(call: Call, status: number, body: unknown) {
  const path = `/v1${call.path}`;
  const answer = ours.declaredAnswer(call.method, path, status);
  if (!answer) {
    expect(ours.componentErrors('Error', body)).toEqual([]);
    return;
  }
  if (status !== 405) expect(answer.declared, `${call.method} ${path} declares no ${status}`).toBe(true);
  expect(ours.answerErrors(call.method, path, status, body)).toEqual([]);
}

/** The gateway's own resources, which OpenAI's reference does not have: each answer against the gateway's document alone. */
describe("the gateway's own operations answer what its document declares", () => {
  const policy = {
    conditions: [{ key: 'model', value: 'gpt-4o' }],
    group_by: [{ key: 'api_key' }],
    type: 'requests',
    unit: 'rpm',
    value: 60,
  };
  const createPolicy = async () =>
    (await json(await send({ method: 'POST', path: '/policies/rate-limits', body: policy }))).id as string;
  const rows: { name: string; status: number; call(): Promise<Call> }[] = [
    {
      name: 'create a policy',
      status: 200,
      call: async () => ({ method: 'POST', path: '/policies/rate-limits', body: policy }),
    },
    {
      name: 'list policies',
      status: 200,
      call: async () => (await createPolicy(), { method: 'GET', path: '/policies/rate-limits?page_size=2' }),
    },
    {
      name: 'retrieve a policy',
      status: 200,
      call: async () => ({ method: 'GET', path: `/policies/rate-limits/${await createPolicy()}` }),
    },
    {
      name: 'update a policy',
      status: 200,
      call: async () => ({ method: 'PUT', path: `/policies/rate-limits/${await createPolicy()}`, body: { value: 30 } }),
    },
    {
      name: 'archive a policy',
      status: 200,
      call: async () => ({ method: 'DELETE', path: `/policies/rate-limits/${await createPolicy()}` }),
    },
    {
      name: 'an unknown policy',
      status: 404,
      call: async () => ({ method: 'GET', path: '/policies/rate-limits/pol_missing' }),
    },
    {
      name: 'a policy of another kind',
      status: 400,
      call: async () => ({ method: 'POST', path: '/policies/rate-limits', body: { ...policy, type: 'bytes' } }),
    },
    { name: 'list virtual keys', status: 200, call: async () => ({ method: 'GET', path: '/virtual-keys' }) },
    {
      name: 'an unknown virtual key',
      status: 404,
      call: async () => ({ method: 'DELETE', path: '/virtual-keys/no-such-key' }),
    },
    {
      name: 'usage by day and model',
      status: 200,
      call: async () => ({ method: 'GET', path: '/usage?bucket_width=1d&group_by=model' }),
    },
    { name: 'usage without a key', status: 401, call: async () => ({ method: 'GET', path: '/usage', key: null }) },
  ];
  for (const row of rows) {
    it(`${row.name}: ${row.status}`, async () => {
      const call = await row.call();
      const response = await send(call);
      const body = await response.json();
      expect(response.status, JSON.stringify(body)).toBe(row.status);
      if (row.status === 200) expect(ours.answerErrors(call.method, `/v1${call.path}`, 200, body)).toEqual([]);
      else expectDeclaredError(call, row.status, body);
    });
  }

  it('GET /health', async () => {
    const response = await gateway.request('/health');
    expect(ours.answerErrors('GET', '/health', 200, await response.json())).toEqual([]);
  });
});

describe('the table', () => {
  const reference = referenceOperations().filter(({ path }) =>
    ['/assistants', '/threads', '/files', '/vector_stores'].some((prefix) => path.startsWith(prefix)),
  );
  const rows = new Map(operations.map((operation) => [operation.operationId, operation]));

  it('has a row for every Assistants, Files and Vector stores operation of the reference', () => {
    expect(reference.map(({ operationId }) => operationId).filter((id) => !rows.has(id))).toEqual([]);
  });

  it('runs every operation the gateway serves: none of them is still pending', () => {
    const served = new Set(
      apiRoutes(gateway.app).map(
        ({ method, path }) => `${method} ${path.replace(/^\/v1/, '').replace(/:(\w+)/g, '{$1}')}`,
      ),
    );
    const servedOperations = reference
      .filter(({ method, path }) => served.has(`${method} ${path}`))
      .map(({ operationId }) => operationId);
    expect(servedOperations).toContain('createThreadAndRun');
    const stillPending = operations.filter(
      (operation) => operation.pending && servedOperations.includes(operation.operationId),
    );
    expect(stillPending.map(({ operationId, variant }) => `${operationId}${variant ? `, ${variant}` : ''}`)).toEqual(
      [],
    );
  });
});
