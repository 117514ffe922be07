import type { HtmlToTextOptions } from 'html-to-text';
import type { Slices } from '../lib/slices';

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
  'txt', 'md', 'markdown', 'json', 'jsonl', 'csv', 'tsv', 'xml', 'yaml', 'yml', 'toml', 'ini', 'log', 'rst', 'tex',
  'c', 'h', 'cc', 'cpp', 'hpp', 'cs', 'css', 'go', 'java', 'js', 'mjs', 'cjs', 'jsx', 'ts', 'tsx', 'php', 'py',
  'rb', 'rs', 'sh', 'bash', 'sql', 'swift', 'kt', 'scala', 'lua', 'pl', 'r', 'vue', 'svelte',
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
export const HTML_OPTIONS: HtmlToTextOptions = {
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
 * The parsers that take a whole document in one synchronous call (HTML, DOCX). A runtime that
 * serves other requests on the same event loop runs them elsewhere (Node: a worker thread,
 * node/extract-thread.ts); `inlineParsers` runs them here. A parser rejects what it cannot read.
 */
export interface Parsers {
  html(html: string): Promise<string>;
  docx(bytes: Uint8Array): Promise<string>;
}

// The parsing libraries are imported when a document first needs them: a process that never
// ingests (or, on Node, parses on its thread) does not hold them (about 15 MB of memory for mammoth).
export const inlineParsers: Parsers = {
  html: async (html) => (await import('html-to-text')).convert(html, HTML_OPTIONS),
  docx: async (bytes) => {
    const { default: mammoth } = await import('mammoth');
    // mammoth's Node build reads `buffer` (any ArrayBuffer does), its browser build (what a Worker
    // bundles) `arrayBuffer`: both are given. Its types know only the browser's with an ArrayBuffer.
    const arrayBuffer = new Uint8Array(bytes).buffer;
    return (await mammoth.extractRawText(Object.assign({ arrayBuffer }, { buffer: arrayBuffer }))).value;
  },
};

export interface ExtractOptions {
  /** The most text kept (ExtractionError past it). */
  maxChars: number;
  /** The event loop's slices (Deps.slices), looked at between the pages of a PDF, so that a long document shares the event loop. */
  slices: Slices;
  parsers: Parsers;
}

/** The text of `bytes` in `format`. */
export async function extract(bytes: Uint8Array, format: FileFormat, options: ExtractOptions): Promise<string> {
  const text = await read(bytes, format, options);
  if (text.length > options.maxChars) {
    throw new ExtractionError('invalid_file', `The file's text is longer than ${options.maxChars} characters, the most a file may index.`);
  }
  if (text.trim() === '') {
    const why = format === 'pdf' ? ' (a PDF of scanned pages has no text layer to read)' : '';
    throw new ExtractionError('invalid_file', `The file has no text to index${why}.`);
  }
  return text;
}

async function read(bytes: Uint8Array, format: FileFormat, options: ExtractOptions): Promise<string> {
  switch (format) {
    case 'text':
      return utf8(bytes);
    case 'html': {
      const html = utf8(bytes);
      try {
        return await options.parsers.html(html);
      } catch (error) {
        throw new ExtractionError('invalid_file', `The HTML file cannot be read: ${describe(error)}.`);
      }
    }
    case 'pdf':
      return pdfText(bytes, options);
    case 'docx':
      try {
        return await options.parsers.docx(bytes);
      } catch (error) {
        throw new ExtractionError('invalid_file', `The DOCX file cannot be read: ${describe(error)}.`);
      }
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

/** Page by page, pausing between pages, and stopping once the text is past `maxChars`. */
async function pdfText(bytes: Uint8Array, options: ExtractOptions): Promise<string> {
  let pdf;
  try {
    // pdf.js takes ownership of the buffer it is handed: give it a copy.
    const { getDocumentProxy } = await import('unpdf');
    pdf = await getDocumentProxy(bytes.slice(), { verbosity: 0 });
  } catch (error) {
    throw new ExtractionError('invalid_file', `The PDF cannot be read: ${describe(error)}.`);
  }
  try {
    const pages: string[] = [];
    let chars = 0;
    for (let number = 1; number <= pdf.numPages && chars <= options.maxChars; number++) {
      const page = await pdf.getPage(number);
      const content = await page.getTextContent();
      const text = content.items.map((item) => ('str' in item ? item.str + (item.hasEOL ? '\n' : '') : '')).join('');
      pages.push(text);
      chars += text.length + 1;
      page.cleanup();
      while (options.slices.spent()) await options.slices.next();
    }
    // As unpdf's mergePages: runs of blanks to one space, at most one blank line.
    return pages.join('\n').replace(/[^\S\n]+/g, ' ').replace(/ ?\n ?/g, '\n').replace(/\n{3,}/g, '\n\n');
  } catch (error) {
    throw new ExtractionError('invalid_file', `The PDF cannot be read: ${describe(error)}.`);
  } finally {
    await pdf.destroy();
  }
}

/** A library's error, bounded: it may quote the file. */
function describe(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return message.length > 200 ? `${message.slice(0, 200)}…` : message;
}
