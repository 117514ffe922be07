import { readFileSync } from 'node:fs';
import { extract } from '/work/wt/i13-ingest/src/retrieval/extract';
import { threadParsers } from '/work/wt/i13-ingest/src/node/extract-thread';
const parsers = threadParsers({ timeoutMs: 60000, maxHeapMb: 512 });
const html = readFileSync('/work/scratch/libs/extract/fixtures/long.html');
const docx = readFileSync('/work/scratch/libs/extract/fixtures/long.docx');
const pdf = readFileSync('/work/scratch/libs/extract/fixtures/long.pdf');
for (const [name, bytes, fmt] of [['html', html, 'html'], ['docx', docx, 'docx'], ['pdf', pdf, 'pdf']] as const) {
  let maxGap = 0; let last = performance.now();
  const timer = setInterval(() => { const now = performance.now(); maxGap = Math.max(maxGap, now - last); last = now; }, 1);
  const t = performance.now();
  const text = await extract(new Uint8Array(bytes), fmt, { maxChars: 1e9, pause: () => new Promise((r) => setImmediate(r)), parsers });
  const total = performance.now() - t;
  await new Promise((r) => setTimeout(r, 5));
  clearInterval(timer);
  console.log(name, bytes.length, 'bytes', text.length, 'chars', total.toFixed(0), 'ms total, longest stall', maxGap.toFixed(0), 'ms');
}
