// HTTP edge of agent management: the owner's agents, agent profiles and avatars. Reads are queries
// (queries.ts), writes operations (operations.ts).
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { ApiError } from '../platform/errors.ts';
import { principalOf } from '../platform/http/auth.ts';
import { serve } from '../platform/http/operation.ts';
import { problems } from '../platform/http/openapi.ts';
import { queryRoute } from '../platform/http/query.ts';
import { ifMatchInput, versionHeaders } from '../platform/http/versions.ts';
import { runQuery } from '../platform/queries.ts';
import { AgentIdParams, EmptyBody, idOf, UnixSeconds } from '../platform/schemas.ts';
import { AgentCreate, AgentPatch, Finalize, MandateInput, ProfileInput, UploadStart, type AgentOperations } from './operations.ts';
import type { AgentQueries } from './queries.ts';
import { AVATAR_BYTES_MAX, AVATAR_TYPES } from './service.ts';

const OWNER = { kinds: ['human', 'owner'] } as const;

const UploadTicket = Type.Object({
  uploadId: Type.String(),
  storageId: Type.String(),
  uploadUrl: Type.String({ description: 'PUT the image bytes here with the declared Content-Type and your credential' }),
  method: Type.Literal('PUT'),
  contentType: Type.String(),
  maxBytes: Type.Integer(),
  expiresAt: UnixSeconds('the upload must be finalized before'),
});

const UploadParams = Type.Object({ id: idOf('agent (agt_…)'), uploadId: idOf('avatar upload (upl_…)') });

export interface AgentRouteDeps {
  operations: AgentOperations;
  queries: AgentQueries;
}

/** A raw image body in each avatar type, for the OpenAPI document; the bytes are checked by the service. */
function imageContent(description: string) {
  return Object.fromEntries(AVATAR_TYPES.map((type) => [type, { schema: { description, contentMediaType: type } }]));
}

export function agentRoutes(deps: AgentRouteDeps) {
  const { operations: ops, queries } = deps;
  return async function routes(app: FastifyInstance): Promise<void> {
    const tags = ['identity'];

    app.post('/v1/owner/agents', {
      config: { auth: OWNER, operation: ops.registerAgent, location: true },
      schema: {
        tags,
        summary: 'Register an agent',
        description:
          'Registers an agent identity (issuer + subject of the agent identity provider) under your ownership. Each owner registers an identity ' +
          "once (409 conflict for your second); another owner's registration of the same subject takes nothing from yours: an identity token " +
          "reaches the registration of the owner its owner-email claim names. Requires Idempotency-Key.",
        body: AgentCreate,
        response: { 201: Type.Ref('Agent'), ...problems(400, 409, 503) },
      },
      handler: (request, reply) => serve(request, reply, ops.registerAgent, request.body as Static<typeof AgentCreate>, { status: 201, headers: (agent) => ({ location: `/v1/owner/agents/${agent.id}` }) }),
    });

    app.route(queryRoute('GET', '/v1/owner/agents', queries.listAgents, { auth: OWNER, tags, summary: 'List your agents (oldest first)' }));
    app.route(queryRoute('GET', '/v1/owner/agents/:id', queries.getAgent, { auth: OWNER, tags, summary: 'Read one of your agents', errors: [404] }));

    app.patch('/v1/owner/agents/:id', {
      config: { auth: OWNER, operation: ops.updateAgent, versioned: { tagFrom: '/v1/owner/agents/{id}/mandate' } },
      schema: {
        tags,
        summary: "Update an agent's name, allowances and caps",
        description:
          "Allowances and caps are mandate rules: changing them writes a new mandate version; naming them as they stand (`caps: {}` included) writes none, as a PUT of the mandate in force. A delegate's allowances and caps stay within its parent's (400 invalid_input, " +
          '`reason` allowance_outside_parent or cap_wider_than_parent, with `pointer` and `parent`, and `wider` listing every rule that is wider, each as {reason, detail, pointer, parent}). 409 conflict for a retired agent\'s allowances or caps (its name still changes). ' +
          'Idempotency-Key is honoured when sent. Send `If-Match` with the ETag GET …/mandate answered to make the change only on the mandate version you read ' +
          '(412 precondition_failed with `currentVersion` otherwise), as its PUT does.',
        params: AgentIdParams,
        body: AgentPatch,
        response: { 200: Type.Ref('Agent'), ...problems(400, 404, 409), 400: Type.Ref('MandateProblem') },
      },
      handler: (request, reply) =>
        serve(request, reply, ops.updateAgent, { ...(request.body as Static<typeof AgentPatch>), id: (request.params as { id: string }).id, ...ifMatchInput(request) }),
    });

    // Freezing is the kill switch's route (src/revocations/routes.ts): it can release and revoke holds.
    app.post('/v1/owner/agents/:id/unfreeze', {
      config: { auth: OWNER, operation: ops.unfreezeAgent },
      schema: {
        tags,
        summary: 'Unfreeze an agent',
        description: 'The agent may spend again, and so may its delegates unless frozen themselves. Holds a freeze released stay released. 409 conflict for a retired agent: retirement is for good. No body, or `{}` (a member is 400). Idempotency-Key is honoured when sent.',
        params: AgentIdParams,
        body: EmptyBody,
        response: { 200: Type.Ref('Agent'), ...problems(400, 404, 409) },
      },
      handler: (request, reply) => serve(request, reply, ops.unfreezeAgent, { id: (request.params as { id: string }).id }),
    });

    app.put('/v1/owner/agents/:id/mandate', {
      config: { auth: OWNER, operation: ops.setMandate, versioned: true },
      schema: {
        tags: ['mandates'],
        summary: "Replace an agent's mandate (a new version)",
        description:
          "The owner's rules for the agent, enforced by the gateway at every hold: allowed services and categories, caps, up to " +
          '20 budgets (per day, week or month in the mandate\'s time zone, or in total; over all spending or one merchant, category or ' +
          'built-in service; every budget that applies must hold), merchants allowed or denied (by id or verified domain), a threshold ' +
          'above which a purchase waits for the owner\'s approval, a validity window, and the alert thresholds of `budget.threshold`. ' +
          'A member left out takes its default: PUT the rules GET shows (without its agentId, version, createdAt, hash and usage), changed. Every change is a new version whose `hash` (base64url ' +
          'SHA-256 of its RFC 8785 canonical JSON) vouchers, receipts and evidence name; old versions stay readable. A merchant the agent buys from ' +
          "reads the version a hold was made under, whole, in that hold's evidence (GET /v1/redemptions/{id}/evidence): name budgets accordingly. " +
          'A PUT of the mandate in force (the same ' +
          'rules once normalised and their defaults filled in) writes nothing: 200 with the version in force as it stands (same `version`, `hash` and ETag). Refusals at a hold: ' +
          '402 CAP_EXCEEDED (403 on POST /v1/services/execute; `reason` budget_exceeded with the `budget`, per_hold_cap, per_period_cap; `agentId` when the rule is an ancestor\'s), 403 SCOPE_FORBIDDEN (`reason` ' +
          'merchant_not_allowed, mandate_not_valid, service_not_allowed, category_not_allowed), 402 approval_required (above the ' +
          "threshold). A delegate's mandate stays within its parent's: 400 invalid_input with the `reason` its registration names (POST " +
          "/v1/agents/{id}/delegates), `pointer` and `parent`. 409 conflict for a retired agent. Requires Idempotency-Key. " +
          'Send `If-Match` with the ETag GET answered to make the change only on the version you read: ' +
          'if another change came first, 412 precondition_failed names the version in force (`currentVersion`) and nothing changes.',
        params: AgentIdParams,
        body: MandateInput,
        response: { 200: Type.Ref('Mandate'), ...problems(400, 404, 409, 412), 400: Type.Ref('MandateProblem') },
      },
      handler: (request, reply) =>
        serve(request, reply, ops.setMandate, { ...(request.body as MandateInput), id: (request.params as { id: string }).id, ...ifMatchInput(request) }, { headers: versionHeaders }),
    });
    app.route(
      queryRoute('GET', '/v1/owner/agents/:id/mandate', queries.getMandate, {
        auth: OWNER,
        tags: ['mandates'],
        summary: "Read an agent's mandate in force, with each budget's usage",
        description: "For each budget: what its current period allows (`limitUc`), what is spent (held plus captured, less refunded), what remains, and when it resets.",
        errors: [404],
        versioned: true,
      }),
    );
    app.route(
      queryRoute('GET', '/v1/owner/agents/:id/mandate/versions', queries.listMandateVersions, {
        auth: OWNER,
        tags: ['mandates'],
        summary: "List an agent's mandate versions (newest first)",
        errors: [404],
      }),
    );
    app.route(
      queryRoute('GET', '/v1/owner/agents/:id/mandate/versions/:version', queries.getMandateVersion, {
        auth: OWNER,
        tags: ['mandates'],
        summary: 'Read one mandate version: its canonical JSON and hash',
        description: 'The exact bytes (`canonical`) the hash is taken over: base64url(SHA-256(canonical)) = `hash`.',
        errors: [404],
      }),
    );

    app.put('/v1/owner/agents/:id/profile', {
      config: { auth: OWNER, operation: ops.setAgentProfile },
      schema: {
        tags,
        summary: "Set an agent's profile (name, preset, colour)",
        params: AgentIdParams,
        body: ProfileInput,
        response: { 200: Type.Ref('AgentProfile'), ...problems(400, 404, 409) },
      },
      handler: (request, reply) =>
        serve(request, reply, ops.setAgentProfile, { ...(request.body as Static<typeof ProfileInput>), id: (request.params as { id: string }).id }),
    });

    app.post('/v1/owner/agents/:id/avatar/uploads', {
      config: { auth: OWNER, operation: ops.startAvatarUpload },
      schema: {
        tags,
        summary: 'Start an avatar upload',
        description: `Declares the image type (${AVATAR_TYPES.join(', ')}) and size (at most ${AVATAR_BYTES_MAX} bytes). Then PUT the bytes to uploadUrl and finalize with uploadId and storageId within 15 minutes.`,
        params: AgentIdParams,
        body: UploadStart,
        response: { 201: UploadTicket, ...problems(400, 404, 409) },
      },
      handler: (request, reply) =>
        serve(request, reply, ops.startAvatarUpload, { ...(request.body as Static<typeof UploadStart>), id: (request.params as { id: string }).id }, { status: 201 }),
    });

    await app.register(async (uploads) => {
      // Image bodies are accepted on this one route only.
      uploads.addContentTypeParser([...AVATAR_TYPES], { parseAs: 'buffer', bodyLimit: AVATAR_BYTES_MAX }, (_request, body, done) => done(null, body));
      uploads.put('/v1/owner/agents/:id/avatar/uploads/:uploadId', {
        config: { auth: OWNER, operation: ops.uploadAvatarBytes },
        schema: {
          tags,
          summary: 'Upload the avatar bytes',
          description: `Raw image body with the Content-Type declared when the upload started; at most ${AVATAR_BYTES_MAX} bytes. The bytes must begin with that type's signature (its magic number; the image itself is not decoded, so a broken one shows as no picture), and are served back only as that type with X-Content-Type-Options: nosniff.`,
          params: UploadParams,
          body: { content: imageContent('the image bytes') },
          response: { 204: Type.Null(), ...problems(400, 404, 409, 413, 415) },
        },
        handler: async (request, reply) => {
          const { id, uploadId } = request.params as { id: string; uploadId: string };
          if (!Buffer.isBuffer(request.body)) throw new ApiError('unsupported_media_type', { detail: `send the image as ${AVATAR_TYPES.join(', ')}` });
          const contentType = (request.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
          return serve(request, reply, ops.uploadAvatarBytes, { id, uploadId, contentType, bytes: request.body }, { status: 204 });
        },
      });
    });

    app.post('/v1/owner/agents/:id/avatar/finalize', {
      config: { auth: OWNER, operation: ops.finalizeAvatarUpload },
      schema: {
        tags,
        summary: 'Finalize an avatar upload',
        description: "Makes the uploaded image the agent's avatar (profile preset becomes \"image\"). Idempotency-Key is honoured when sent.",
        params: AgentIdParams,
        body: Finalize,
        response: { 200: Type.Ref('AgentProfile'), ...problems(400, 404, 503) },
      },
      handler: (request, reply) =>
        serve(request, reply, ops.finalizeAvatarUpload, { ...(request.body as Static<typeof Finalize>), id: (request.params as { id: string }).id }),
    });

    app.get('/v1/owner/agents/:id/avatar', {
      config: { auth: OWNER, query: queries.getAgentAvatar },
      schema: {
        operationId: queries.getAgentAvatar.name,
        tags,
        summary: "Read the agent's avatar image",
        params: AgentIdParams,
        response: { 200: { description: 'the avatar image, in the type it was uploaded as', content: imageContent('the image bytes') }, ...problems(404) },
      },
      handler: async (request, reply) => {
        const avatar = await runQuery(app.gateway, queries.getAgentAvatar, { principal: principalOf(request), input: request.params });
        reply.type(avatar.contentType).header('cache-control', 'private, max-age=300').header('x-content-type-options', 'nosniff');
        return reply.send(Buffer.from(avatar.bytes));
      },
    });

  };
}
