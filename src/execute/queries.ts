// Execute's reads, for every face: a retained intent and its outcome, and an agent's mail connector. Who
// may read is the acting-for rule (agents/acting.ts): the agent itself or its owner; anyone else gets 404.
import { Type } from '@sinclair/typebox';
import { idOf } from '../platform/schemas.ts';
import type { Query } from '../platform/queries.ts';
import type { MailConnectorService, MailConnectorView } from './mail-connectors.ts';
import type { IntentView } from './intents.ts';
import type { ExecuteService } from './service.ts';
import type { IntentRow } from './store.ts';

export interface ExecuteQueries {
  getIntent: Query<{ id: string }, IntentView, IntentRow>;
  getMailConnector: Query<{ id: string }, MailConnectorView>;
}

export function executeQueries(execute: ExecuteService, mailConnectors: MailConnectorService): ExecuteQueries {
  return {
    getIntent: {
      name: 'getIntent',
      input: Type.Object({ id: idOf('retained intent (int_…)') }, { additionalProperties: false }),
      output: Type.Ref('IntentStatus'),
      access: (db, { principal, input }) => execute.intents.intentFor(db, principal, input.id),
      read: (db, _call, intent) => execute.intents.read(db, intent),
    },
    getMailConnector: {
      name: 'getMailConnector',
      input: Type.Object({ id: idOf('agent (agt_…)') }, { additionalProperties: false }),
      output: Type.Ref('MailConnector'),
      read: (db, { principal, input }) => mailConnectors.get(db, principal, input.id),
    },
  };
}
