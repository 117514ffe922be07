import { Hono } from 'hono';
import { responds } from '../../http/middleware/responds';
import { validate } from '../../http/middleware/validate';
import type { ApiEnv } from '../identities/env';
import { workspace } from '../identities/middleware/workspace';
import { listModels, retrieveModel } from './commands';
import { modelList, modelObject } from './objects';
import { modelParams } from './schemas';

/** /v1/models: the models the workspace's virtual keys serve (commands.ts). */
export const modelRoutes = new Hono<ApiEnv>()
  .use(workspace())
  .get('/', responds({ summary: 'List models', ok: modelList }), async (c) => {
    const data = await listModels(c.get('deps'), c.get('actor'), c.get('settings'));
    return c.json({ object: 'list' as const, data });
  })
  .get(
    '/:model{.+}',
    responds({ summary: 'Retrieve a model', ok: modelObject }),
    validate('param', modelParams),
    async (c) => {
      const { model } = c.req.valid('param');
      return c.json(await retrieveModel(c.get('deps'), c.get('actor'), c.get('settings'), model));
    },
  );
