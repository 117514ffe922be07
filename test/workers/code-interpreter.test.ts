import { defined } from '../support/defined';
import { env, exports } from 'cloudflare:workers';
import OpenAI from 'openai';
import { beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { fakeProviderKey, gatewayClient } from './gateway-client';

/**
 * code_interpreter in a run inside workerd, as on Cloudflare: the Worker entry, the run in its
 * RunExecutor object, its code run by `gateway sandbox` on this host through GATEWAY_SANDBOX_URL
 * (vitest.config.ts, test/support/workers-global-setup.ts), its figure stored in R2. Skipped,
 * saying so, where the host has no sandbox to serve.
 */

const served = inject('sandboxServer');
if (!served) console.warn('test/workers/code-interpreter.test.ts: skipped, this host has no local sandbox to serve.');

const API_KEY = inject('workersTenant').runsWorkspaceKey;
const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

let openai: OpenAI;

beforeAll(async () => {
  const slug = `code-${crypto.randomUUID().slice(0, 8)}`;
  await fakeProviderKey(API_KEY, slug);
  openai = gatewayClient({ 'x-gateway-api-key': API_KEY, 'x-gateway-virtual-key': slug });
});

describe.skipIf(!served)('code_interpreter in a run, on workerd with a remote sandbox', () => {
  it('is configured: the Worker uses the sandbox its bindings name, and /health says so once it asked', async () => {
    expect(env.GATEWAY_SANDBOX_URL).toBe(served?.url);
    await vi.waitFor(
      async () => {
        const health = await (await exports.default.fetch('http://gateway/health')).json();
        expect(health).toEqual({ status: 'ok', code_interpreter: true });
      },
      { timeout: 30_000, interval: 100 },
    );
  });

  it('runs the code in the sandbox: the step’s logs, a figure stored in R2 and downloadable, shown in the answer', async () => {
    const assistant = await openai.beta.assistants.create({
      model: 'fake-model',
      tools: [{ type: 'code_interpreter' }],
    });
    const code = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nprint('squares', sum([1, 4, 9]))";
    const scenario = [{ tool_calls: [{ name: 'python', arguments: { code } }] }, { reply: 'The squares, drawn.' }];
    const run = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistant.id,
        thread: { messages: [{ role: 'user', content: `Draw the squares.\n#fake ${JSON.stringify(scenario)}` }] },
      },
      { pollIntervalMs: 50 },
    );
    expect(run.status, JSON.stringify(run.last_error)).toBe('completed');

    const steps = await openai.beta.threads.runs.steps.list(run.id, { thread_id: run.thread_id, order: 'asc' });
    const [call] = steps.data.flatMap((step) =>
      step.step_details.type === 'tool_calls' ? step.step_details.tool_calls : [],
    );
    if (call?.type !== 'code_interpreter') throw new Error(`no code call: ${JSON.stringify(steps.data)}`);
    expect(call.code_interpreter.input).toBe(code);
    const [logs, image] = call.code_interpreter.outputs;
    expect(logs).toEqual({ type: 'logs', logs: 'squares 14\n' });
    if (image?.type !== 'image') throw new Error('no image output');
    const fileId = image.image.file_id;

    // The figure is a file of the workspace, its PNG in R2.
    expect(await openai.files.retrieve(fileId)).toMatchObject({ purpose: 'assistants_output', filename: 'image.png' });
    const bytes = new Uint8Array(await (await openai.files.content(fileId)).arrayBuffer());
    expect([...bytes.subarray(0, 8)]).toEqual(PNG_SIGNATURE);
    expect(bytes.length).toBeGreaterThan(1000);

    const [message] = (await openai.beta.threads.messages.list(run.thread_id, { run_id: run.id })).data;
    expect(defined(message).content).toEqual([
      { type: 'image_file', image_file: { file_id: fileId } },
      { type: 'text', text: { value: 'The squares, drawn.', annotations: [] } },
    ]);
    await openai.beta.assistants.delete(assistant.id);
  });
});
