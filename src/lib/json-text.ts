/**
 * A JSON answer's text: the value, then a newline. JSON parsers skip trailing whitespace, and a
 * terminal that shows `curl`'s output then puts the shell's prompt on a line of its own.
 */
export function jsonText(value: unknown): string {
  return `${JSON.stringify(value)}\n`;
}
