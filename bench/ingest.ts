import { createTestGateway } from '../test/support/gateway';
import { fixture, storeFile } from '../test/support/files';
import { upstreamFetch } from '../src/runtime/node/upstream-fetch';
import type { UpstreamFetch } from '../src/providers/types';
import { required, round, startFakeProvider } from './support';

/**
 * `npm run bench:ingest`: how fast the gateway ingests files into a vector store (read, extract,
 * chunk, embed, write), with the embeddings provider's time taken out: the fake provider runs in a
 * process of its own on loopback, and the time each embeddings call spends there (request sent to
 * answer read) is summed and subtracted from the wall-clock time. One file at a time
 * (GATEWAY_INGEST_CONCURRENCY=1), so that provider time and the gateway's own never overlap.
 *
 * Corpora: BENCH_FILES text files of about 200 KB each (distinct words, so the tokenizer's
 * caches do not flatter it), and as many copies of a small HTML page and of a two-page PDF.
 */

const FILES = Number(process.env.BENCH_FILES ?? 20);
const { url: fakeUrl } = await startFakeProvider();

let providerMs = 0;
const real = upstreamFetch({ rules: () => ({ allowPrivate: true, allowedHosts: [] }) });
/** The provider's whole answer read before the gateway sees it, so that its time can be taken out. */
const timedFetch: UpstreamFetch = async (url, init) => {
  const started = performance.now();
  const answer = await real(url, init);
  const chunks: Uint8Array[] = [];
  for await (const chunk of answer.body ?? []) chunks.push(chunk);
  providerMs += performance.now() - started;
  return { ...answer, body: ReadableStream.from(chunks) };
};

const gateway = await createTestGateway({
  env: { LOG_LEVEL: 'warn', GATEWAY_INGEST_CONCURRENCY: '1' },
  deps: { fetch: timedFetch },
});

function prose(seed: number, bytes: number): string {
  const words: string[] = [];
  let size = 0;
  for (let i = 0; size < bytes; i++) {
    const word = `w${seed}x${(i * 2654435761) % 1_000_003}`;
    words.push(i % 17 === 16 ? `${word}.\n` : word);
    size += word.length + 1;
  }
  return words.join(' ');
}

async function corpus(name: string, files: { filename: string; content: string | Uint8Array; contentType?: string }[]) {
  const tenant = await gateway.tenant();
  await gateway.virtualKey(tenant, { base_url: `${fakeUrl}/v1`, default: true });
  const client = gateway.openai({ 'x-gateway-api-key': tenant.workspaceKey });
  const ids = [];
  for (const file of files) ids.push(await storeFile(gateway, tenant, file));
  const store = await client.vectorStores.create({ name });
  providerMs = 0;
  const started = performance.now();
  const batch = await client.vectorStores.fileBatches.createAndPoll(store.id, { file_ids: ids }, { pollIntervalMs: 5 });
  const wallMs = performance.now() - started;
  if (batch.file_counts.completed !== files.length) throw new Error(`${name}: ${JSON.stringify(batch.file_counts)}`);
  const [row] = (
    await gateway.database.client.execute({
      sql: 'SELECT count(*) AS n FROM vector_store_chunks WHERE vector_store_id = ?',
      args: [store.id],
    })
  ).rows;
  const chunks = Number(required(row, 'the count of chunks').n);
  const ownMs = wallMs - providerMs;
  return {
    files: files.length,
    chunks,
    wall_s: round(wallMs / 1000),
    provider_s: round(providerMs / 1000),
    chunks_per_second: round(chunks / (ownMs / 1000), 0),
    files_per_second: round(files.length / (ownMs / 1000), 1),
    chunks_per_second_with_provider: round(chunks / (wallMs / 1000), 0),
  };
}

try {
  // Warm-up: JIT, the tokenizer's tables, pdf.js.
  await corpus('warm-up', [
    { filename: 'w.txt', content: prose(0, 50_000) },
    { filename: 'w.pdf', content: fixture('tiny.pdf') },
  ]);
  const result = {
    text_200kb: await corpus(
      'text',
      Array.from({ length: FILES }, (_, i) => ({ filename: `doc${i}.md`, content: prose(i + 1, 200_000) })),
    ),
    html: await corpus(
      'html',
      Array.from({ length: FILES }, (_, i) => ({ filename: `page${i}.html`, content: fixture('sample.html') })),
    ),
    pdf: await corpus(
      'pdf',
      Array.from({ length: FILES }, (_, i) => ({ filename: `doc${i}.pdf`, content: fixture('tiny.pdf') })),
    ),
    docx: await corpus(
      'docx',
      Array.from({ length: FILES }, (_, i) => ({ filename: `doc${i}.docx`, content: fixture('sample.docx') })),
    ),
  };
  console.log(JSON.stringify(result, null, 2));
} finally {
  await gateway.close();
  process.exit(0);
}
