/** The header naming the virtual key a request's provider calls use, by its slug. */
export const VIRTUAL_KEY_HEADER = 'x-gateway-virtual-key';

/**
 * The slug a request names in `x-gateway-virtual-key`, if any (blank is none): read once, into the
 * request's Actor (resources/identities/middleware/workspace.ts). The key itself is resolved once
 * the model it is for is known (resolveVirtualKey): in the run use-cases, and by GET of an
 * assistant, for the assistant's model.
 */
export function requestedVirtualKey(c: { req: { header(name: string): string | undefined } }): string | undefined {
  return c.req.header(VIRTUAL_KEY_HEADER)?.trim() || undefined;
}
