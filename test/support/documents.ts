import { defined } from './defined';
import {
  constants,
  crc32,
  createDeflate,
  createDeflateRaw,
  deflateRawSync,
  deflateSync,
  type Deflate,
  type DeflateRaw,
} from 'node:zlib';

/**
 * Documents made by the tests, the hostile ones included: PDFs of any number of pages, or with a
 * content stream that inflates to any size (a PDF bomb); ZIP archives and DOCX files, with a part
 * that inflates to any size (a DOCX bomb). Written out byte by byte as the formats say, so that
 * the real libraries (pdf.js, mammoth) read them; the bombs are deflated as a stream, never held
 * inflated.
 */

const latin1 = (text: string) => Buffer.from(text, 'latin1');

/**
 * `bytes` blanks, deflated as a stream (never held inflated): zlib-wrapped, or raw; `last: false`
 * leaves the deflate stream open (flushed, not ended), for more blocks to follow it.
 */
export async function deflatedBlanks(bytes: number, options: { raw?: boolean; last?: boolean } = {}): Promise<Buffer> {
  const deflater: Deflate | DeflateRaw = options.raw ? createDeflateRaw({ level: 9 }) : createDeflate({ level: 9 });
  const out: Buffer[] = [];
  deflater.on('data', (chunk: Buffer) => out.push(chunk));
  const block = Buffer.alloc(1024 * 1024, 0x20);
  for (let written = 0; written < bytes; written += block.length) {
    if (!deflater.write(block.subarray(0, Math.min(block.length, bytes - written))))
      await new Promise((resolve) => deflater.once('drain', resolve));
  }
  if (options.last === false) {
    await new Promise<void>((resolve) => deflater.flush(constants.Z_SYNC_FLUSH, () => resolve()));
    deflater.destroy();
  } else {
    await new Promise<void>((resolve, reject) => deflater.on('end', resolve).on('error', reject).end());
  }
  return Buffer.concat(out);
}

export interface PdfOptions {
  /** The text of each page (one line each). */
  pages?: string[];
  /** Instead: this many pages, each saying its number. */
  pageCount?: number;
  /** A first page whose content stream is this, already deflated (FlateDecode). */
  deflatedContent?: Buffer;
}

/** A PDF whose pages show the given text in Helvetica, with a correct cross-reference table. */
export function pdf(options: PdfOptions): Buffer {
  const texts = options.pages ?? Array.from({ length: options.pageCount ?? 1 }, (_, i) => `Page ${i + 1}`);
  const objects: Buffer[] = [];
  /** Adds an object, answering its number (from 1). */
  const add = (body: Buffer | string) => objects.push(typeof body === 'string' ? latin1(body) : body);
  const catalog = add('<< /Type /Catalog /Pages 2 0 R >>');
  const pagesAt = add(''); // filled once the kids are known
  const font = add('<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>');
  const kids: number[] = [];
  const page = (content: number) =>
    add(
      `<< /Type /Page /Parent ${pagesAt} 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 ${font} 0 R >> >> /Contents ${content} 0 R >>`,
    );
  if (options.deflatedContent) {
    const stream = Buffer.concat([
      latin1(`<< /Length ${options.deflatedContent.length} /Filter /FlateDecode >>\nstream\n`),
      options.deflatedContent,
      latin1('\nendstream'),
    ]);
    kids.push(page(add(stream)));
  }
  for (const text of texts) {
    const content = `BT /F1 12 Tf 72 720 Td (${text.replace(/[\\()]/g, (c) => `\\${c}`)}) Tj ET`;
    kids.push(page(add(`<< /Length ${content.length} >>\nstream\n${content}\nendstream`)));
  }
  objects[pagesAt - 1] = latin1(
    `<< /Type /Pages /Kids [${kids.map((kid) => `${kid} 0 R`).join(' ')}] /Count ${kids.length} >>`,
  );
  const parts: Buffer[] = [latin1('%PDF-1.7\n%\xe2\xe3\xcf\xd3\n')];
  let offset = defined(parts[0]).length;
  const offsets: number[] = [];
  objects.forEach((body, index) => {
    offsets.push(offset);
    const object = Buffer.concat([latin1(`${index + 1} 0 obj\n`), body, latin1('\nendobj\n')]);
    parts.push(object);
    offset += object.length;
  });
  const xref = [
    `xref\n0 ${objects.length + 1}\n0000000000 65535 f \n`,
    ...offsets.map((at) => `${String(at).padStart(10, '0')} 00000 n \n`),
  ].join('');
  parts.push(
    latin1(`${xref}trailer\n<< /Size ${objects.length + 1} /Root ${catalog} 0 R >>\nstartxref\n${offset}\n%%EOF\n`),
  );
  return Buffer.concat(parts);
}

export interface ZipEntry {
  name: string;
  /** The part's bytes, deflated when stored so; or `deflated`, a part already deflated (raw) and its size. */
  content?: string | Buffer;
  deflated?: { data: Buffer; size: number; crc: number };
}

/** A ZIP archive of the entries, each deflated (method 8), with its central directory. */
export function zip(entries: ZipEntry[]): Buffer {
  const locals: Buffer[] = [];
  const central: Buffer[] = [];
  let offset = 0;
  for (const entry of entries) {
    const name = Buffer.from(entry.name, 'utf8');
    const raw =
      entry.content === undefined
        ? undefined
        : Buffer.isBuffer(entry.content)
          ? entry.content
          : Buffer.from(entry.content, 'utf8');
    const data = entry.deflated?.data ?? deflateRawSync(raw ?? Buffer.alloc(0));
    const size = entry.deflated?.size ?? raw?.length ?? 0;
    const crc = entry.deflated?.crc ?? crc32(raw ?? Buffer.alloc(0));
    // The local header and the central directory's entry: the same fields, at their own offsets.
    const local = record(30, [
      [0, 4, 0x04034b50],
      [4, 2, 20],
      [8, 2, 8],
      [14, 4, crc],
      [18, 4, data.length],
      [22, 4, size],
      [26, 2, name.length],
    ]);
    locals.push(local, name, data);
    const header = record(46, [
      [0, 4, 0x02014b50],
      [4, 2, 20],
      [6, 2, 20],
      [10, 2, 8],
      [16, 4, crc],
      [20, 4, data.length],
      [24, 4, size],
      [28, 2, name.length],
      [42, 4, offset],
    ]);
    central.push(header, name);
    offset += local.length + name.length + data.length;
  }
  const directory = Buffer.concat(central);
  const end = record(22, [
    [0, 4, 0x06054b50],
    [8, 2, entries.length],
    [10, 2, entries.length],
    [12, 4, directory.length],
    [16, 4, offset],
  ]);
  return Buffer.concat([...locals, directory, end]);
}

/** `length` bytes of zeros, but for the little-endian fields given as [offset, bytes, value]. */
function record(length: number, fields: [number, 2 | 4, number][]): Buffer {
  const bytes = Buffer.alloc(length);
  for (const [offset, size, value] of fields) {
    if (size === 2) bytes.writeUInt16LE(value, offset);
    else bytes.writeUInt32LE(value, offset);
  }
  return bytes;
}

const W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"';

/** The parts of a DOCX beside its document: what Word and mammoth need to find it. */
function docxParts(document: ZipEntry): ZipEntry[] {
  return [
    {
      name: '[Content_Types].xml',
      content:
        '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">' +
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>' +
        '<Default Extension="xml" ContentType="application/xml"/>' +
        '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>',
    },
    {
      name: '_rels/.rels',
      content:
        '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">' +
        '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>',
    },
    document,
  ];
}

/** A DOCX of the given paragraphs. */
export function docx(paragraphs: string[]): Buffer {
  const body = paragraphs
    .map((text) => `<w:p><w:r><w:t>${text.replace(/[<&]/g, (c) => (c === '<' ? '&lt;' : '&amp;'))}</w:t></w:r></w:p>`)
    .join('');
  return zip(
    docxParts({
      name: 'word/document.xml',
      content: `<?xml version="1.0" encoding="UTF-8"?><w:document ${W}><w:body>${body}</w:body></w:document>`,
    }),
  );
}

/** A DOCX whose document.xml inflates to `bytes` (a paragraph, then blanks), deflated as a stream. */
export async function docxBomb(bytes: number): Promise<Buffer> {
  const head = Buffer.from(
    `<?xml version="1.0" encoding="UTF-8"?><w:document ${W}><w:body><w:p><w:r><w:t>bomb</w:t></w:r></w:p>`,
  );
  const tail = Buffer.from('</w:body></w:document>');
  // Deflate blocks joined: each part flushed but not ended, the last one ended.
  const data = Buffer.concat([
    deflateRawSync(head, { finishFlush: constants.Z_SYNC_FLUSH }),
    await deflatedBlanks(bytes - head.length - tail.length, { raw: true, last: false }),
    deflateRawSync(tail),
  ]);
  return zip(docxParts({ name: 'word/document.xml', deflated: { data, size: bytes, crc: 0 } }));
}

/** A zlib-wrapped deflate of `text` (a content stream). */
export const deflated = (text: string): Buffer => deflateSync(Buffer.from(text, 'latin1'));
