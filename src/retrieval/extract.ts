import type { HtmlToTextOptions } from 'html-to-text';
import { pdfInflatedBytes, zipInflatedBytes, ZipError } from './inflation';

/**
 * A file's text, for chunking: UTF-8 text formats (plain text, Markdown, JSON, source code) as
 * they are, HTML without its markup, PDF's text layer (page by page), DOCX's paragraphs. The
 * format comes from the file's extension, else its uploaded Content-Type. What cannot be read is
 * an ExtractionError, which ingestion records as the file's last_error.
 */

export type FileFormat = 'text' | 'html' | 'pdf' | 'docx';

export class ExtractionError extends Error {
  constructor(
    readonly code: 'unsupported_file' | 'invalid_file',
    message: string,
  ) {
    super(message);
    this.name = 'ExtractionError';
  }
}

/** Extensions of UTF-8 text files: OpenAI's file_search list, and a few more of the same kind. */
const TEXT_EXTENSIONS = new Set([
  'txt',
  'md',
  'markdown',
  'json',
  'jsonl',
  'csv',
  'tsv',
  'xml',
  'yaml',
  'yml',
  'toml',
  'ini',
  'log',
  'rst',
  'tex',
  'c',
  'h',
  'cc',
  'cpp',
  'hpp',
  'cs',
  'css',
  'go',
  'java',
  'js',
  'mjs',
  'cjs',
  'jsx',
  'ts',
  'tsx',
  'php',
  'py',
  'rb',
  'rs',
  'sh',
  'bash',
  'sql',
  'swift',
  'kt',
  'scala',
  'lua',
  'pl',
  'r',
  'vue',
  'svelte',
]);

const MEDIA_TYPES: Record<string, FileFormat> = {
  'text/html': 'html',
  'application/xhtml+xml': 'html',
  'application/pdf': 'pdf',
  'application/vnd.openxmlformats-officedocument.wordprocessingml.document': 'docx',
  'application/json': 'text',
  'application/xml': 'text',
  'application/javascript': 'text',
  'application/x-sh': 'text',
  'application/x-yaml': 'text',
};

/** The format of a file named `filename`, uploaded as `contentType`; null when none is supported. */
export function formatOf(filename: string, contentType: string | null): FileFormat | null {
  const extension = /\.([A-Za-z0-9]+)$/.exec(filename)?.[1]?.toLowerCase();
  if (extension === 'html' || extension === 'htm' || extension === 'xhtml') return 'html';
  if (extension === 'pdf') return 'pdf';
  if (extension === 'docx') return 'docx';
  if (extension !== undefined && TEXT_EXTENSIONS.has(extension)) return 'text';
  const mediaType = contentType?.split(';')[0]?.trim().toLowerCase();
  if (!mediaType) return null;
  return MEDIA_TYPES[mediaType] ?? (mediaType.startsWith('text/') ? 'text' : null);
}

/** html-to-text's options: block structure kept (headings, lists, table rows), links and images left out. */
const HTML_OPTIONS: HtmlToTextOptions = {
  wordwrap: false,
  selectors: [
    { selector: 'a', options: { ignoreHref: true } },
    { selector: 'img', format: 'skip' },
    { selector: 'h1', options: { uppercase: false } },
    { selector: 'h2', options: { uppercase: false } },
    { selector: 'h3', options: { uppercase: false } },
    { selector: 'table', format: 'dataTable', options: { uppercaseHeaderCells: false } },
  ],
};

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
  const text = await read(bytes, format, limits, signal);
  if (text.length > limits.maxChars) {
    throw new ExtractionError(
      'invalid_file',
      `The file's text is longer than ${limits.maxChars} characters, the most a file may index.`,
    );
  }
  if (text.trim() === '') {
    const why = format === 'pdf' ? ' (a PDF of scanned pages has no text layer to read)' : '';
    throw new ExtractionError('invalid_file', `The file has no text to index${why}.`);
  }
  return text;
}

async function read(
  bytes: Uint8Array,
  format: FileFormat,
  limits: ExtractionLimits,
  signal: AbortSignal | undefined,
): Promise<string> {
  switch (format) {
    case 'text':
      return utf8(bytes);
    case 'html': {
      const html = utf8(bytes);
      try {
        return (await import('html-to-text')).convert(html, HTML_OPTIONS);
      } catch (error) {
        throw new ExtractionError('invalid_file', `The HTML file cannot be read: ${describe(error)}.`);
      }
    }
    case 'pdf':
      return pdfText(bytes, limits, signal);
    case 'docx':
      return docxText(bytes, limits);
  }
}

function utf8(bytes: Uint8Array): string {
  try {
    // ignoreBOM false (the default) is spelled out: the Workers types require both options.
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: false }).decode(bytes);
  } catch {
    throw new ExtractionError('invalid_file', 'The file is not valid UTF-8 text.');
  }
}

function inflatesTooFar(kind: string, limits: ExtractionLimits): ExtractionError {
  return new ExtractionError(
    'invalid_file',
    `The ${kind}'s compressed parts inflate to more than ${limits.maxInflatedBytes} bytes (GATEWAY_INGEST_MAX_INFLATED_BYTES), the most a file may inflate to.`,
  );
}

/** Page by page, stopping once the text is past `maxChars`. */
async function pdfText(bytes: Uint8Array, limits: ExtractionLimits, signal: AbortSignal | undefined): Promise<string> {
  if (pdfInflatedBytes(bytes, limits.maxInflatedBytes) > limits.maxInflatedBytes) throw inflatesTooFar('PDF', limits);
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
    inflated = zipInflatedBytes(bytes, limits.maxInflatedBytes, MAX_ZIP_ENTRIES);
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

/** A library's error, bounded: it may quote the file. A stack overflow is the document's nesting. */
function describe(error: unknown): string {
  if (error instanceof RangeError && /call stack/i.test(error.message)) return 'its elements are nested too deeply';
  const message = error instanceof Error ? error.message : String(error);
  return message.length > 200 ? `${message.slice(0, 200)}…` : message;
}
