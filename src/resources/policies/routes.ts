import { Hono } from 'hono';
import { changesSettings } from '../../http/middleware/changes-settings';
import { ApiError } from '../../errors';
import { validate } from '../../http/middleware/validate';
import { createPolicyBody, listPoliciesQuery, policyCountersQuery, updatePolicyBody } from './schemas';
import type { AuthenticatedKey } from '../../db/schema';
import { apiKeyPrefixes, archivePolicy, createPolicy, getPolicy, listPolicies, updatePolicy } from './queries';
import { workspaceCaps } from '../identities/quotas';
import { toPolicyCountersJson, toPolicyJson } from './wire';
import { resolveWorkspaceScope } from '../identities/workspaces';
import type { ApiEnv } from '../identities/env';
import { responds } from '../../http/middleware/responds';
import { createdPolicy, policyCountersObject, policyList, policyObject } from './objects';
import { policyCounters } from '../../ratelimit';

/** /v1/policies/rate-limits */
export const policyRoutes = new Hono<ApiEnv>()
  .use(changesSettings())
  .get(
    '/',
    responds({ summary: 'List rate-limit policies', ok: policyList, errors: [403] }),
    validate('query', listPoliciesQuery),
    async (c) => {
      const query = c.req.valid('query');
      const { db } = c.get('deps');
      const scope = await resolveWorkspaceScope(db, c.get('apiKey'), query.workspace_id, { required: false });
      const { rows, total } = await listPolicies(
        db,
        {
          organisationId: c.get('apiKey').organisationId,
          workspaceId: scope?.workspaceId ?? null,
          status: query.status,
          type: query.type,
          unit: query.unit,
        },
        { size: query.page_size, index: query.current_page },
      );
      return c.json({ object: 'list', data: rows.map(toPolicyJson), total });
    },
  )
  .post(
    '/',
    responds({ summary: 'Create a rate-limit policy', ok: createdPolicy, errors: [403, 409] }),
    validate('json', createPolicyBody),
    async (c) => {
      const body = c.req.valid('json');
      const { db, now, config } = c.get('deps');
      checkOrganisation(c.get('apiKey'), body.organisation_id);
      const scope = await resolveWorkspaceScope(db, c.get('apiKey'), body.workspace_id, { required: true });
      if (!scope) throw new Error('resolveWorkspaceScope answered no workspace where one is required');
      const policy = await createPolicy(db, scope, body, now(), {
        createdBy: c.get('apiKey').kind,
        caps: workspaceCaps(config),
      });
      return c.json({ id: policy.id, object: 'policy_usage_limits' });
    },
  )
  .get('/:id', responds({ summary: 'Retrieve a rate-limit policy', ok: policyObject, errors: [403] }), async (c) => {
    const policy = await getPolicy(c.get('deps').db, c.get('apiKey'), c.req.param('id'));
    return c.json(toPolicyJson(policy));
  })
  .get(
    '/:id/counters',
    responds({ summary: "A rate-limit policy's counters and refusals", ok: policyCountersObject, errors: [403] }),
    validate('query', policyCountersQuery),
    async (c) => {
      const deps = c.get('deps');
      const policy = await getPolicy(deps.db, c.get('apiKey'), c.req.param('id'));
      const counters = await policyCounters(deps, policy, c.req.valid('query').limit);
      const ids = counters.refusals.map((refusal) => refusal.apiKeyId);
      const prefixes = await apiKeyPrefixes(deps.db, policy.organisationId, ids);
      return c.json(toPolicyCountersJson(policy, counters, prefixes));
    },
  )
  .put(
    '/:id',
    responds({ summary: 'Update a rate-limit policy', ok: policyObject, errors: [403, 409] }),
    validate('json', updatePolicyBody),
    async (c) => {
      const { db, now, config } = c.get('deps');
      const policy = await updatePolicy(
        db,
        c.get('apiKey'),
        c.req.param('id'),
        c.req.valid('json'),
        now(),
        workspaceCaps(config),
      );
      return c.json(toPolicyJson(policy));
    },
  )
  .delete('/:id', responds({ summary: 'Archive a rate-limit policy', ok: policyObject, errors: [403] }), async (c) => {
    const { db, now } = c.get('deps');
    const policy = await archivePolicy(db, c.get('apiKey'), c.req.param('id'), now());
    return c.json(toPolicyJson(policy));
  });

/**
 * A call made with a key that does not identify a workspace (an organisation key) must send
 * workspace_id and organisation_id. A workspace key may repeat its own organisation; an
 * organisation key must name its own.
 */
function checkOrganisation(apiKey: AuthenticatedKey, organisationId: string | undefined) {
  if (organisationId === undefined) {
    if (apiKey.workspace) return;
    throw new ApiError(
      'missing_required_parameter',
      "Missing required parameter: 'organisation_id'. An organisation API key must name its organisation.",
      { param: 'organisation_id' },
    );
  }
  if (organisationId.toLowerCase() !== apiKey.organisationId) {
    throw new ApiError('organisation_forbidden', `The API key has no access to organisation '${organisationId}'.`, {
      param: 'organisation_id',
    });
  }
}
