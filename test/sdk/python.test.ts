import { defined } from '../support/defined';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { FAKE_MODELS, startFakeUpstream, type FakeUpstreamServer } from '../support/fake-upstream';
import { ROOT, startGatewayProcess, type GatewayProcess } from '../support/processes';

/**
 * OpenAI's Python SDK as a second client, against the gateway as a process on a fresh database
 * (the way `npm start` serves it) and the fake provider. Runs when `python3` can import `openai`
 * (.ci/run installs it when it can reach a package index); skipped, saying how to install it,
 * when not.
 */

const INSTALL = 'python3 -m pip install openai==2.54.0';
// The interpreter `python3` names, run directly afterwards: a version manager's shim (pyenv's is
// bash scripts) cost each run a second or two of CPU.
const python = spawnSync('python3', ['-c', 'import sys, openai; print(openai.__version__); print(sys.executable)'], {
  encoding: 'utf8',
});
const [pythonSdk, interpreter = 'python3'] = python.status === 0 ? python.stdout.trim().split('\n') : [];
if (!pythonSdk) {
  console.warn(`test/sdk/python.test.ts: skipped, python3 cannot import openai. To run it: ${INSTALL}`);
}

/** The issue that brings the quickstart's operations (threads, messages, runs on a thread, Bearer auth). */

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a Python script of this repository with exactly this environment added to a clean one, killed past `timeoutMs`. */
function runPython(script: string, env: Record<string, string>, timeoutMs = 60_000): Promise<Ran> {
  // Nothing of the caller's OpenAI configuration leaks in: the script sees only what it is given.
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^OPENAI_/.test(name)));
  return new Promise((resolve, reject) => {
    const child = spawn(interpreter, [script], {
      cwd: ROOT,
      env: { ...inherited, NO_PROXY: '127.0.0.1,localhost', PYTHONUNBUFFERED: '1', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: timeoutMs,
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe.skipIf(!pythonSdk)(
  pythonSdk
    ? `OpenAI's Python SDK (openai ${pythonSdk})`
    : `OpenAI's Python SDK: skipped, python3 cannot import openai (${INSTALL})`,
  () => {
    let fake: FakeUpstreamServer;
    let gateway: GatewayProcess;
    let dataDir: string;
    let apiKey: string;

    const gatewayApi = async (path: string, body: unknown) => {
      const response = await fetch(`${gateway.url}/v1${path}`, {
        method: 'POST',
        headers: { 'x-gateway-api-key': apiKey, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      const text = await response.text();
      if (response.status !== 200) throw new Error(`POST ${path} answered ${response.status}: ${text}`);
      return JSON.parse(text) as unknown;
    };

    beforeAll(async () => {
      fake = await startFakeUpstream();
      dataDir = mkdtempSync(join(tmpdir(), 'gateway-python-'));
      gateway = await startGatewayProcess({ DATA_DIR: dataDir, GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true' });
      // The keys are printed after the listening line.
      apiKey = await vi.waitFor(
        () => {
          const key = /workspace API key\s+(gk_\S+)/.exec(gateway.stdout())?.[1];
          if (!key) throw new Error(`no workspace API key printed yet:\n${gateway.stdout()}`);
          return key;
        },
        { timeout: 5_000 },
      );
      await gatewayApi('/virtual-keys', {
        slug: 'fake',
        provider: 'openai',
        base_url: fake.baseURL,
        api_key: 'sk-fake',
      });
      // What a call naming no virtual key goes to: applications configured by base URL and key alone.
      await gatewayApi('/virtual-keys', {
        slug: 'default',
        provider: 'openai',
        base_url: fake.baseURL,
        api_key: 'sk-fake',
        default: true,
      });
    });
    afterAll(async () => {
      await gateway?.stop('SIGTERM');
      await fake?.close();
      if (dataDir) rmSync(dataDir, { recursive: true, force: true });
    });

    it("assistants, and a thread created and run in one call, with the gateway's headers", async () => {
      fake.reset();
      const ran = await runPython('test/sdk/python/assistants_today.py', {
        OPENAI_BASE_URL: `${gateway.url}/v1`,
        OPENAI_API_KEY: apiKey,
        GATEWAY_VIRTUAL_KEY: 'fake',
      });
      expect(ran.code, ran.stderr).toBe(0);
      const seen = JSON.parse(defined(ran.stdout.trim().split('\n').at(-1)));
      expect(seen).toEqual({
        assistant: { id: expect.stringMatching(/^asst_/), name: 'Math Tutor', model: 'fake-model', listed: true },
        run: { status: 'completed', usage: expect.any(Number) },
        messages: [
          ['user', 'What is 3 + 4?'],
          ['assistant', 'You said: What is 3 + 4?'],
        ],
        deleted: true,
      });
      // The run reached the provider through the virtual key, with the assistant's instructions.
      const sent = defined(fake.requests.find((request) => request.path === '/v1/chat/completions'));
      expect(sent.headers.authorization).toBe('Bearer sk-fake');
      expect(defined(sent.body).messages).toEqual([
        { role: 'system', content: 'Answer briefly.' },
        { role: 'user', content: 'What is 3 + 4?' },
      ]);
    });

    it("the flows of the SDK's three Assistants examples, code_interpreter in the gateway's sandbox: a math tutor polled, a streamed run through an event handler, the streaming helpers", async () => {
      // Three sandbox sessions started cold, under the load of the rest of the suite.
      const ran = await runPython(
        'test/sdk/python/assistants_code.py',
        { OPENAI_BASE_URL: `${gateway.url}/v1`, OPENAI_API_KEY: apiKey },
        110_000,
      );
      expect(ran.code, ran.stderr).toBe(0);
      const seen = JSON.parse(defined(ran.stdout.trim().split('\n').at(-1)));
      const question = expect.stringMatching(
        /^I need to solve the equation `3x \+ 11 = 14`\. Can you help me\?\n#fake /,
      );
      const chart = [
        'import matplotlib.pyplot as plt',
        'xs = [0, 1, 2]',
        'plt.plot(xs, [3 * x + 11 for x in xs])',
        "print('plotted', len(xs))",
      ].join('\n');
      expect(seen).toEqual({
        // The code ran in the sandbox: what it printed is the step's logs.
        tutor: {
          status: 'completed',
          messages: [
            ['assistant', 'The solution is x = 1, Jane Doe.'],
            ['user', question],
          ],
          code: [['code_interpreter', "x = (14 - 11) / 3\nprint(f'x = {x}')", ['x = 1.0\n']]],
        },
        // What the example's handler prints: the call, its code, its output, then the answer.
        stream: {
          status: 'completed',
          printed: `\nassistant > code_interpreter\n${chart}\n\noutput >\nplotted 3\n\nassistant > Here is the line 3x + 11.`,
          images: [expect.stringMatching(/^file-/)],
          // The figure opens the answer, an image_file part before its text.
          figures: [seen.stream.images[0]],
          content: ['image_file', 'text'],
          image_file: seen.stream.images[0],
          figure_bytes: '89504e470d0a1a0a',
        },
        helpers: {
          text: 'So 3x = 3 and x = 1.',
          final: [['assistant', ['So 3x = 3 and x = 1.']]],
          status: 'completed',
          steps: ['tool_calls', 'message_creation'],
        },
      });
      expect(ran.stdout).toContain('Run completed with status: completed');
      expect(ran.stdout).toContain("{'role': 'assistant', 'message': 'The solution is x = 1, Jane Doe.'}");
    }, 120_000);

    it('examples/python/quickstart.py, configured by OPENAI_BASE_URL and OPENAI_API_KEY alone', async () => {
      fake.reset();
      const ran = await runPython('examples/python/quickstart.py', {
        OPENAI_BASE_URL: `${gateway.url}/v1`,
        OPENAI_API_KEY: apiKey,
      });
      expect(ran.code, ran.stderr).toBe(0);
      const question = 'I need to solve the equation `3x + 11 = 14`. Can you help me?';
      expect(ran.stdout).toMatch(/^run run_\w+: completed$/m);
      expect(ran.stdout).toContain(`user: ${question}\nassistant: You said: ${question}\n`);
      const sent = defined(fake.requests.find((request) => request.path === '/v1/chat/completions'));
      expect(defined(sent.body).model).toBe('gpt-4o');
      expect(defined(sent.body).messages).toEqual([
        { role: 'system', content: 'Please address the user as Jane Doe. The user has a premium account.' },
        { role: 'user', content: question },
      ]);
    });

    it('chat completions streamed and not, a tool call, embeddings and models, configured by OPENAI_BASE_URL and OPENAI_API_KEY alone', async () => {
      fake.reset();
      const ran = await runPython('test/sdk/python/chat_completions.py', {
        OPENAI_BASE_URL: `${gateway.url}/v1`,
        OPENAI_API_KEY: apiKey,
      });
      expect(ran.code, ran.stderr).toBe(0);
      const seen = JSON.parse(defined(ran.stdout.trim().split('\n').at(-1)));
      expect(seen).toEqual({
        completion: {
          object: 'chat.completion',
          content: 'You said: Name a colour.',
          total_tokens: expect.any(Number),
        },
        streamed: { content: 'You said: Count to three.', total_tokens: expect.any(Number) },
        tool_call: { finish_reason: 'tool_calls', name: 'get_weather', arguments: '{"city":"Oslo"}' },
        embeddings: { count: 2, dimensions: 8, prompt_tokens: expect.any(Number) },
        // The default key serves what its provider lists.
        models: expect.arrayContaining([...FAKE_MODELS]),
      });
      const sent = fake.requests.filter((request) => request.path === '/v1/chat/completions');
      expect(sent.map((request) => request.headers.authorization)).toEqual([
        'Bearer sk-fake',
        'Bearer sk-fake',
        'Bearer sk-fake',
      ]);
      expect(defined(sent[0]?.body).seed).toBe(7);
      expect(defined(sent[2]?.body).tools).toEqual([expect.objectContaining({ type: 'function' })]);
    });

    it('responses whole, streamed, parsed into a pydantic model, a function call round trip, input items and tokens, store=False, a conversation, a background response resumed, and reasoning, configured by OPENAI_BASE_URL and OPENAI_API_KEY alone', async () => {
      fake.reset();
      const ran = await runPython('test/sdk/python/responses.py', {
        OPENAI_BASE_URL: `${gateway.url}/v1`,
        OPENAI_API_KEY: apiKey,
      });
      expect(ran.code, ran.stderr).toBe(0);
      const seen = JSON.parse(defined(ran.stdout.trim().split('\n').at(-1)));
      expect(seen).toEqual({
        created: {
          id: expect.stringMatching(/^resp_/),
          status: 'completed',
          output_text: 'Hello there, friend.',
          output_tokens: 3,
        },
        // One delta a word, as the fake streams them, joined into the text the final response has.
        streamed: {
          deltas: 4,
          text: 'one two three four',
          status: 'completed',
          output_text: 'one two three four',
          output_tokens: 4,
        },
        parsed: { type: 'Weather', value: { city: 'Oslo', temperature: 21 } },
        function_call: {
          status: 'completed',
          name: 'get_weather',
          arguments: '{"city":"Paris"}',
          call_id: expect.stringMatching(/^call_/),
          previous_response_id: expect.stringMatching(/^resp_/),
          answer: 'The tool returned: {"temp":18}',
        },
        input_items: ['function_call_output'],
        input_tokens: { object: 'response.input_tokens', count: expect.any(Number) },
        unkept: { status: 'completed', retrieved: 404 },
        // The second turn was sent the first: the conversation holds both, in order.
        conversation: {
          id: expect.stringMatching(/^conv_/),
          answer: 'You are Ada.',
          conversation: seen.conversation.id,
          items: [
            ['message', 'user'],
            ['message', 'assistant'],
            ['message', 'user'],
            ['message', 'assistant'],
          ],
        },
        // Told again after event 2 (the message's output_item.added): the rest, numbered as before.
        background: {
          // Answered before or once its run began, as it goes.
          created: expect.stringMatching(/^(queued|in_progress)$/),
          background: true,
          polled: 'completed',
          text: 'one two three',
          resumed: [
            [3, 'response.content_part.added'],
            [4, 'response.output_text.delta'],
            [5, 'response.output_text.done'],
            [6, 'response.content_part.done'],
            [7, 'response.output_item.done'],
            [8, 'response.completed'],
          ],
        },
        reasoning: {
          deltas: ['Let', ' me', ' think.'],
          items: ['reasoning', 'message'],
          text: 'Let me think.',
          answer: 'Yes.',
        },
      });
      expect(seen.input_tokens.count).toBeGreaterThan(0);
      const sent = fake.requests.filter((request) => request.path === '/v1/chat/completions');
      expect(sent.map((request) => request.headers.authorization)).toEqual(Array(10).fill('Bearer sk-fake'));
      expect(JSON.stringify(defined(sent[7]?.body).messages)).toContain('Hello Ada.');
      // text_format became the provider's json_schema response format, the pydantic model's schema.
      expect(defined(sent[2]?.body).response_format).toMatchObject({
        type: 'json_schema',
        json_schema: {
          name: 'Weather',
          strict: true,
          schema: { type: 'object', required: ['city', 'temperature'], additionalProperties: false },
        },
      });
      // The second turn of the round trip was sent the call and its output, under the call's id.
      expect(defined(sent[4]?.body).messages.slice(-2)).toEqual([
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            {
              id: seen.function_call.call_id,
              type: 'function',
              function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
            },
          ],
        },
        { role: 'tool', tool_call_id: seen.function_call.call_id, content: '{"temp":18}' },
      ]);
    });
  },
);
