// @ts-check
/**
 * The extraction thread (node/extract-thread.ts starts it): HTML and DOCX are parsed in one
 * synchronous call each, which on the main thread would hold every other request for as long as
 * a large document takes. Here they hold only this thread. One message at a time, in order:
 *
 *   { id, kind: 'html', text, options }  html-to-text's convert(text, options) (retrieval/extract.ts's HTML_OPTIONS)
 *   { id, kind: 'docx', bytes }          mammoth's raw text
 *
 * answered { id, text } or { id, error } (the library's message). Plain JavaScript, as
 * embedded-writer.js explains: Node starts a worker thread from a file itself.
 */
import { parentPort } from 'node:worker_threads';
import { convert } from 'html-to-text';
import mammoth from 'mammoth';

if (!parentPort) throw new Error('extract-worker.js runs as a worker thread');
const port = parentPort;

port.on('message', async (message) => {
  try {
    const text =
      message.kind === 'html'
        ? convert(message.text, message.options)
        : (await mammoth.extractRawText({ buffer: Buffer.from(message.bytes.buffer, message.bytes.byteOffset, message.bytes.byteLength) })).value;
    port.postMessage({ id: message.id, text });
  } catch (error) {
    port.postMessage({ id: message.id, error: error instanceof Error ? error.message : String(error) });
  }
});
