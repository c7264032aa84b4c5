// Tables at scale for plan tests: an owner with many agents inserted in one statement, and the whole-table reads of
// a plan, sequential or through an index with no key (a statement that must find its rows by key must have none).

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
  'Index Name'?: string;
  'Index Cond'?: string;
  Plans?: PlanNode[];
}

/** Reads of a whole table in a plan: a sequential scan, or an index scan with no key (a merge join's or a sort's input). */
function wholeReadsIn(node: PlanNode): string[] {
  const type = node['Node Type'];
  const keyless = (type === 'Index Scan' || type === 'Index Only Scan') && node['Index Cond'] === undefined;
  const own = type === 'Seq Scan' ? [`Seq Scan on ${node['Relation Name']}`] : keyless ? [`${type} on ${node['Relation Name']} using ${node['Index Name']}, no key`] : [];
  return [...own, ...(node.Plans ?? []).flatMap(wholeReadsIn)];
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

/**
 * The whole-table reads in the plan `db` runs `sql` on as a prepared statement (`preparedPlanOf`): sequential scans,
 * and index scans with no key, which read every entry of the index (a merge join's input, or an ordered scan).
 */
export async function wholeReadsOf(db: Queryable, sql: string, params: readonly unknown[]): Promise<string[]> {
  return wholeReadsIn(await preparedPlanOf(db, sql, params));
}
