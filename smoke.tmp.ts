import { readFileSync } from 'node:fs';
import { componentErrors, streamEventErrors, streamEvents, responseComponent, componentNames } from './test/support/openapi';
console.log([...streamEvents]);
console.log(responseComponent('getRun'));
for (const name of componentNames) { try { componentErrors(name, {}); } catch (e) { console.log('compile fail', name, String(e).slice(0, 300)); } }
const text = readFileSync('test/fixtures/openai-run-stream-example.txt', 'utf8');
let event = '';
for (const line of text.split('\n')) {
  if (line.startsWith('event: ')) event = line.slice(7);
  if (line.startsWith('data: ')) { const raw = line.slice(6); const data = raw === '[DONE]' ? raw : JSON.parse(raw); const errs = streamEventErrors(event, data); if (errs.length) console.log(event, errs); }
}
console.log(componentErrors('RunObject', {id: 1}));
