import { createMiddleware } from 'hono/factory';
import { ApiError } from '../../errors';

const HEADERS = ['vendor-beta', 'openai-beta'] as const;
const VERSION = 'assistants=v2';

/**
 * The assistants interface version. The gateway's own clients send `Vendor-Beta: assistants=v2`;
 * the OpenAI SDK sends `OpenAI-Beta: assistants=v2`. Either is accepted, and so is neither (the
 * header is optional); any other value asks for a version this gateway does not serve: 400
 * `invalid_beta`.
 */
export const assistantsBeta = () =>
  createMiddleware(async (c, next) => {
    for (const header of HEADERS) {
      const value = c.req.header(header);
      if (value !== undefined && value.trim().toLowerCase() !== VERSION) {
        throw new ApiError(
          'invalid_beta',
          `Unsupported '${header}' header value: only '${VERSION}' is served. Send '${header === 'openai-beta' ? 'OpenAI-Beta' : 'Vendor-Beta'}: ${VERSION}' or leave it out.`,
          { param: header },
        );
      }
    }
    await next();
  });
