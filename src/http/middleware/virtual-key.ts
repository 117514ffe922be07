import { VIRTUAL_KEY_HEADER } from '../../resources/virtual-keys/commands';

export { VIRTUAL_KEY_HEADER };

/**
 * The slug a request names in `x-gateway-virtual-key`, if any (blank is none). The key itself is
 * resolved once the model it is for is known (resolveVirtualKey): in the run use-cases, and by
 * GET of an assistant, for the assistant's model.
 */
export function requestedVirtualKey(c: { req: { header(name: string): string | undefined } }): string | undefined {
  return c.req.header(VIRTUAL_KEY_HEADER)?.trim() || undefined;
}
