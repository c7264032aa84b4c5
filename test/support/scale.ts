// Tables at scale for plan tests: an owner with many agents inserted in one statement, and the sequential scans of
// a plan (a statement that must find its rows by index must have none).

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

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  Plans?: PlanNode[];
}

function scansOf(node: PlanNode): string[] {
  const own = node['Node Type'] === 'Seq Scan' ? [`Seq Scan on ${node['Relation Name']}`] : [];
  return [...own, ...(node.Plans ?? []).flatMap(scansOf)];
}

/** The sequential scans in the plan of `EXPLAIN (FORMAT JSON) <sql>` run on `db` with these parameters. */
export async function sequentialScansOf(db: Queryable, sql: string, params: readonly unknown[]): Promise<string[]> {
  const { rows } = await db.query<{ 'QUERY PLAN': unknown }>(`EXPLAIN (FORMAT JSON) ${sql}`, [...params]);
  const raw = rows[0]!['QUERY PLAN'];
  const plan = (typeof raw === 'string' ? JSON.parse(raw) : raw) as Array<{ Plan: PlanNode }>;
  return scansOf(plan[0]!.Plan);
}
