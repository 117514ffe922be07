import { writeFileSync } from 'node:fs';
import WebSocket from 'ws';
import { DEV_SQLD_ARGS } from '../../scripts/sqld';
import { fakeDirective } from '../../test/support/fake-upstream';
import { startLocalWorker } from '../../test/support/workerd';
import { post, readStream, sequential, startFakeProvider } from '../support';

const INSPECTOR = 9329;
const content = `go\n${fakeDirective({ reply: 'a b c d e f g h' })}`;
const { url: fakeUrl } = await startFakeProvider();
const worker = await startLocalWorker({ sqldArgs: DEV_SQLD_ARGS, bare: true, inspectorPort: INSPECTOR });
try {
  const headers = { authorization: `Bearer ${worker.workspaceKey}`, 'content-type': 'application/json' };
  await post(`${worker.url}/v1/virtual-keys`, headers, { slug: 'bench', provider: 'openai', base_url: `${fakeUrl}/v1`, api_key: 'sk-bench', default: true });
  const assistant = (await post(`${worker.url}/v1/assistants`, headers, { model: 'bench-model' })) as { id: string };
  const body = JSON.stringify({ assistant_id: assistant.id, stream: true, thread: { messages: [{ role: 'user', content }] } });
  const run = async () => {
    const response = await fetch(`${worker.url}/v1/threads/runs`, { method: 'POST', headers, body });
    await readStream(response, () => {});
  };
  await sequential(50, run);
  const targets = (await (await fetch(`http://127.0.0.1:${INSPECTOR}/json/list`)).json()) as { id: string; title: string; webSocketDebuggerUrl: string }[];
  console.log(targets.map((t) => `${t.title} ${t.webSocketDebuggerUrl}`).join('\n'));
  const target = targets.find((t) => t.title.includes("core:user:"));
  const ws = new WebSocket(target!.webSocketDebuggerUrl);
  await new Promise((resolve) => ws.once('open', resolve));
  let id = 0;
  const pending = new Map<number, (value: unknown) => void>();
  ws.on('message', (data) => {
    const message = JSON.parse(String(data));
    if (message.id && pending.has(message.id)) pending.get(message.id)!(message.result);
  });
  const send = (method: string, params: object = {}) =>
    new Promise<any>((resolve) => {
      id++;
      pending.set(id, resolve);
      ws.send(JSON.stringify({ id, method, params }));
    });
  await send('Profiler.enable');
  await send('Profiler.setSamplingInterval', { interval: 100 });
  await send('Profiler.start');
  await sequential(Number(process.env.RUNS ?? 200), run);
  const { profile } = await send('Profiler.stop');
  writeFileSync(process.env.OUT ?? '/tmp/worker-runs.cpuprofile', JSON.stringify(profile));
  ws.close();
} finally {
  await worker.stop();
}
process.exit(0);
