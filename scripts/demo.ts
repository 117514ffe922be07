import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { nodeConfig } from '../src/runtime/node/config';
import { startGateway } from '../src/runtime/node/start';
import { fakeDirective, startFakeUpstream } from '../test/support/fake-upstream';

/**
 * `npm run demo`: the whole path in one command. Starts a fake Chat Completions provider and the
 * gateway (on a fresh database in a temporary directory), creates a virtual key and an assistant,
 * streams a run to the terminal with the official OpenAI SDK, then does a function-call round trip.
 */

const bold = (text: string) => (process.stdout.isTTY ? `\x1b[1m${text}\x1b[0m` : text);
const dim = (text: string) => (process.stdout.isTTY ? `\x1b[2m${text}\x1b[0m` : text);
const step = (text: string) => process.stdout.write(`\n${bold('▸')} ${text}\n`);

const dataDir = mkdtempSync(join(tmpdir(), 'gateway-demo-'));
const fake = await startFakeUpstream();
const gateway = await startGateway(nodeConfig({ DATA_DIR: dataDir, PORT: '0', LOG_LEVEL: 'warn' }));
try {
  const keys = gateway.initialised;
  if (!keys) throw new Error('The gateway did not initialise its fresh database');
  step(`Fake Chat Completions provider on ${fake.baseURL}`);
  step(`Gateway on ${gateway.url} ${dim(`(fresh database in ${dataDir})`)}`);
  process.stdout.write(`  workspace API key ${dim(keys.workspace_api_key.slice(0, 10) + '…')} created by init\n`);

  step("POST /v1/virtual-keys: the provider, with its key encrypted at rest, as the workspace's default");
  const response = await fetch(`${gateway.url}/v1/virtual-keys`, {
    method: 'POST',
    headers: { 'x-gateway-api-key': keys.workspace_api_key, 'content-type': 'application/json' },
    body: JSON.stringify({
      slug: 'demo',
      provider: 'openai',
      base_url: fake.baseURL,
      api_key: 'sk-demo',
      default: true,
    }),
  });
  const virtualKey = (await response.json()) as { slug: string; provider: string; base_url: string };
  process.stdout.write(`  ${JSON.stringify(virtualKey)}\n`);

  // What OPENAI_BASE_URL and OPENAI_API_KEY would say: nothing else is needed.
  const openai = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: keys.workspace_api_key });

  step('beta.assistants.create');
  const assistant = await openai.beta.assistants.create({
    model: 'demo-model',
    name: 'Weather helper',
    instructions: 'You are a concise assistant.',
    tools: [
      {
        type: 'function',
        function: {
          name: 'get_weather',
          parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        },
      },
    ],
  });
  process.stdout.write(`  ${assistant.id} (${assistant.name}, model ${assistant.model})\n`);

  step('beta.threads.createAndRunStream: the answer arrives delta by delta');
  const reply =
    'Hello from the gateway. This answer travelled from the provider through the gateway, one delta at a time, as server-sent events.';
  const stream = openai.beta.threads.createAndRunStream({
    assistant_id: assistant.id,
    tools: [],
    thread: { messages: [{ role: 'user', content: `Say hello.\n${fakeDirective({ reply, chunk_delay_ms: 40 })}` }] },
  });
  process.stdout.write('  ');
  stream.on('textDelta', (delta) => process.stdout.write(delta.value ?? ''));
  const run = await stream.finalRun();
  process.stdout.write(`\n  ${dim(`run ${run.id} ${run.status}, usage ${JSON.stringify(run.usage)}`)}\n`);

  step('A function call: requires_action, then submitToolOutputsStream');
  const first = openai.beta.threads.createAndRunStream({
    assistant_id: assistant.id,
    thread: {
      messages: [
        {
          role: 'user',
          content: `Weather in Paris?\n${fakeDirective([{ tool_calls: [{ arguments: { city: 'Paris' } }] }, { reply: 'It is sunny in Paris, 22 °C.', chunk_delay_ms: 40 }])}`,
        },
      ],
    },
  });
  const waiting = await first.finalRun();
  const call = waiting.required_action?.submit_tool_outputs.tool_calls[0];
  if (!call) throw new Error(`The run is ${waiting.status}, with no tool call to answer`);
  process.stdout.write(`  ${waiting.status}: ${call.function.name}(${call.function.arguments})\n`);
  process.stdout.write(`  submitting {"temperature_c":22,"sky":"sunny"}\n  `);
  const second = openai.beta.threads.runs.submitToolOutputsStream(waiting.id, {
    thread_id: waiting.thread_id,
    tool_outputs: [{ tool_call_id: call.id, output: '{"temperature_c":22,"sky":"sunny"}' }],
  });
  second.on('textDelta', (delta) => process.stdout.write(delta.value ?? ''));
  const done = await second.finalRun();
  process.stdout.write(`\n  ${dim(`run ${done.id} ${done.status}, usage ${JSON.stringify(done.usage)}`)}\n`);

  step(`Try it yourself against a gateway of your own: ${bold('npm start')} and the README's curl and SDK examples.\n`);
} finally {
  await gateway.close(1_000);
  await fake.close();
  rmSync(dataDir, { recursive: true, force: true });
}
