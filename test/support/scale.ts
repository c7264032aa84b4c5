// Tables at scale for plan tests: an owner with many agents inserted in one statement, and the sequential scans of
// a plan (a statement that must find its rows by index must have none).

// @ts-expect-error: node-postgres's own value serializer and quoting, untyped.
import { escapeLiteral, prepareValue } from 'pg/lib/utils.js';
import type { Queryable } from '../../src/platform/db/database.ts';

/** One owner (`own_<prefix>`) and `count` active agents `agt_<prefix>_1…`, identities `agent-<n>` of https://issuer.test. */
export async function seedAgents(db: Queryable, prefix: string, count: number): Promise<void> {
  await db.query(
    `INSERT INTO owners (id, human_issuer, human_subject, email, email_verified, created_at_s, updated_at_s)
     VALUES ($1, 'https://issuer.test', 'owner', 'owner@example.com', true, 0, 0)`,
    [`own_${prefix}`],
  );
  await db.query(
    `INSERT INTO agents (id, owner_id, name, identity_issuer, identity_subject, status, allowed_services, allowed_categories, inbox_allowlist,
       cap_period_s, profile_name, profile_preset, profile_color, created_at_s, updated_at_s)
     SELECT $2 || i, $3, 'agent ' || i, 'https://issuer.test', 'agent-' || i, 'active', '["*"]', '["*"]', '[]', 86400,
       'agent ' || i, 'letter', '#4f46e5', 0, 0
       FROM generate_series(1, $1::int) AS i`,
    [count, `agt_${prefix}_`, `own_${prefix}`],
  );
}

export interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  Plans?: PlanNode[];
}

function scansOf(node: PlanNode): string[] {
  const own = node['Node Type'] === 'Seq Scan' ? [`Seq Scan on ${node['Relation Name']}`] : [];
  return [...own, ...(node.Plans ?? []).flatMap(scansOf)];
}

let prepared = 0;

/**
 * The plan `db` would run `sql` on with these parameters, as prepared statements run: the statement is prepared
 * (its parameters' types inferred, as a driver's unnamed statement has them) and explained as executed, with the
 * parameters as literals, so the plan is the one the plan cache gives under the caller's `plan_cache_mode` (the
 * generic plan under force_generic_plan). EXPLAIN of the statement itself with bound parameters would plan it for
 * their values: a custom plan, which can differ.
 */
export async function preparedPlanOf(db: Queryable, sql: string, params: readonly unknown[]): Promise<PlanNode> {
  const name = `plan_probe_${++prepared}`;
  await db.query(`PREPARE ${name} AS ${sql}`);
  try {
    const literals = params.map((param) => {
      const text = prepareValue(param);
      return text === null ? 'NULL' : escapeLiteral(String(text));
    });
    const { rows } = await db.query<{ 'QUERY PLAN': unknown }>(`EXPLAIN (FORMAT JSON) EXECUTE ${name}${literals.length > 0 ? `(${literals.join(', ')})` : ''}`);
    const raw = rows[0]!['QUERY PLAN'];
    return ((typeof raw === 'string' ? JSON.parse(raw) : raw) as Array<{ Plan: PlanNode }>)[0]!.Plan;
  } finally {
    await db.query(`DEALLOCATE ${name}`);
  }
}

/** The sequential scans in the plan `db` runs `sql` on as a prepared statement, with these parameters (`preparedPlanOf`). */
export async function sequentialScansOf(db: Queryable, sql: string, params: readonly unknown[]): Promise<string[]> {
  return scansOf(await preparedPlanOf(db, sql, params));
}
