import { pdfInflatedBytes, zipInflatedBytes, ZipError } from './inflation';
import { checkedText, describe, ExtractionError, readText, type FileFormat } from './file-text';

export { ExtractionError, formatOf, type FileFormat } from './file-text';

/**
 * A file's text, for chunking: UTF-8 text formats and HTML as file-text.ts reads them, PDF's text
 * layer (page by page), DOCX's paragraphs. The format comes from the file's extension, else its
 * uploaded Content-Type. What cannot be read is an ExtractionError, which ingestion records as the
 * file's last_error.
 */

/**
 * What one file may cost to read, each past bound an ExtractionError that names it. Time and
 * memory are bounded by where extraction runs (runtime/node/chunker-pool.ts: a process of its own; on
 * Workers, the platform's limits).
 */
export interface ExtractionLimits {
  /** The most text kept. */
  maxChars: number;
  /** What a file's compressed parts (a PDF's streams, a DOCX's parts) may inflate to, together. */
  maxInflatedBytes: number;
  /** A PDF's pages. */
  maxPages: number;
}

/** A DOCX's parts at most (a real one has a few dozen; each part costs the ZIP library memory). */
const MAX_ZIP_ENTRIES = 10_000;

/** The text of `bytes` in `format`. `signal` is looked at between a PDF's pages. */
export async function extract(
  bytes: Uint8Array,
  format: FileFormat,
  limits: ExtractionLimits,
  signal?: AbortSignal,
): Promise<string> {
  const text =
    format === 'pdf'
      ? await pdfText(bytes, limits, signal)
      : format === 'docx'
        ? await docxText(bytes, limits)
        : await readText(bytes, format, () => import('html-to-text'));
  return checkedText(text, format, limits.maxChars);
}

function inflatesTooFar(kind: string, limits: ExtractionLimits): ExtractionError {
  return new ExtractionError(
    'invalid_file',
    `The ${kind}'s compressed parts inflate to more than ${limits.maxInflatedBytes} bytes (GATEWAY_INGEST_MAX_INFLATED_BYTES), the most a file may inflate to.`,
  );
}

/** Page by page, stopping once the text is past `maxChars`. */
async function pdfText(bytes: Uint8Array, limits: ExtractionLimits, signal: AbortSignal | undefined): Promise<string> {
  if ((await pdfInflatedBytes(bytes, limits.maxInflatedBytes)) > limits.maxInflatedBytes)
    throw inflatesTooFar('PDF', limits);
  let pdf;
  try {
    // pdf.js takes ownership of the buffer it is handed, and refuses a Node Buffer: give it a plain
    // copy. No eval of font programs: text needs none, and a crafted font then runs nothing
    // (CVE-2024-4367).
    const { getDocumentProxy } = await import('unpdf');
    pdf = await getDocumentProxy(new Uint8Array(bytes), { verbosity: 0, isEvalSupported: false });
  } catch (error) {
    throw new ExtractionError('invalid_file', `The PDF cannot be read: ${describe(error)}.`);
  }
  try {
    if (pdf.numPages > limits.maxPages) {
      throw new ExtractionError(
        'invalid_file',
        `The PDF has ${pdf.numPages} pages, more than ${limits.maxPages} (GATEWAY_INGEST_MAX_PAGES), the most a file may index.`,
      );
    }
    const pages: string[] = [];
    let chars = 0;
    for (let number = 1; number <= pdf.numPages && chars <= limits.maxChars; number++) {
      signal?.throwIfAborted();
      const page = await pdf.getPage(number);
      const content = await page.getTextContent();
      const text = content.items.map((item) => ('str' in item ? item.str + (item.hasEOL ? '\n' : '') : '')).join('');
      pages.push(text);
      chars += text.length + 1;
      page.cleanup();
    }
    // As unpdf's mergePages: runs of blanks to one space, at most one blank line.
    return pages
      .join('\n')
      .replace(/[^\S\n]+/g, ' ')
      .replace(/ ?\n ?/g, '\n')
      .replace(/\n{3,}/g, '\n\n');
  } catch (error) {
    if (error instanceof ExtractionError || signal?.aborted) throw error;
    throw new ExtractionError('invalid_file', `The PDF cannot be read: ${describe(error)}.`);
  } finally {
    await pdf.destroy();
  }
}

async function docxText(bytes: Uint8Array, limits: ExtractionLimits): Promise<string> {
  let inflated;
  try {
    inflated = await zipInflatedBytes(bytes, limits.maxInflatedBytes, MAX_ZIP_ENTRIES);
  } catch (error) {
    if (error instanceof ZipError)
      throw new ExtractionError('invalid_file', `The DOCX file cannot be read: ${error.message}.`);
    throw error;
  }
  if (inflated > limits.maxInflatedBytes) throw inflatesTooFar('DOCX file', limits);
  try {
    const { default: mammoth } = await import('mammoth');
    // mammoth's Node build reads `buffer` (any ArrayBuffer does), its browser build (what a Worker
    // bundles) `arrayBuffer`: both are given. Its types know only the browser's with an ArrayBuffer.
    const arrayBuffer = new Uint8Array(bytes).buffer;
    return (await mammoth.extractRawText(Object.assign({ arrayBuffer }, { buffer: arrayBuffer }))).value;
  } catch (error) {
    throw new ExtractionError('invalid_file', `The DOCX file cannot be read: ${describe(error)}.`);
  }
}
