/** The part of html-to-text 10 that retrieval/extract.ts uses (the package ships no types). */
declare module 'html-to-text' {
  export interface SelectorDefinition {
    selector: string;
    format?: string;
    options?: Record<string, unknown>;
  }
  export interface HtmlToTextOptions {
    wordwrap?: number | false | null;
    selectors?: SelectorDefinition[];
  }
  export function convert(html: string, options?: HtmlToTextOptions): string;
}
