/** The part of pako 1 that retrieval/inflation.ts uses (the package ships no types; CommonJS, so a default export under Node's ESM). */
declare module 'pako' {
  class Inflate {
    constructor(options?: { raw?: boolean; chunkSize?: number });
    /** Called with each piece of output, of at most chunkSize bytes; a throw stops push. */
    onData: (chunk: Uint8Array) => void;
    onEnd: (status: number) => void;
    /** Inflates `data`; `true` for its last piece. False when the stream is corrupt. */
    push(data: Uint8Array, last: boolean): boolean;
  }
  const pako: { Inflate: typeof Inflate };
  export default pako;
}
