// The `acg` command line. Each command imports what it runs only when it runs (`await import`), so
// `acg --help` or `acg dev token` loads neither Fastify nor a database driver, and `acg serve` none of
// the command modules.
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Command, InvalidArgumentError, type Argument, type ErrorOptions, type HelpContext, type Option, type ParseOptions } from 'commander';
import { ConfigError, databaseAddress, ENV_VARS, loadConfig, variableMeaning } from './platform/config.ts';

/**
 * Tracing is configured by the OpenTelemetry SDK's own variables, which the SDK reads itself and so are not in ENV_VARS:
 * one line says where they are listed, so that `acg --help` still names every variable the gateway heeds.
 */
const OTEL_HELP = 'tracing (off unless one names a destination, e.g. OTEL_EXPORTER_OTLP_ENDPOINT): the OpenTelemetry SDK\'s own variables, listed in docs/configuration.md, "Tracing (OpenTelemetry)"';

/** The exit code of every usage error, as of every refusal of a command's arguments (1 is `credit check`'s). */
const USAGE_EXIT = 2;

/** One variable's line in `acg --help`. */
const variableHelp = (name: string, meaning: string) => `  ${name.padEnd(34)} ${meaning}`;

/** The package's version, which `acg --version` prints (package.json is next to src/ and to dist/). */
function packageVersion(): string {
  return (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
}

function configOrExit() {
  try {
    return loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
}

/** `acg credit grant`, as typed: the names of the command and its parents. */
function commandLine(command: Command): string {
  const names: string[] = [];
  for (let at: Command | null = command; at; at = at.parent) names.unshift(at.name());
  return names.join(' ');
}

/** The environment variable an option-like flag names (`--port` → PORT, `--data-dir` → ACG_DATA_DIR), if any. */
function settingFor(flag: string): string | undefined {
  const name = flag.replace(/^--/, '').toUpperCase().replaceAll('-', '_');
  return ENV_VARS.find((v) => v.name === name || v.name === `ACG_${name}`)?.name;
}

/** Commander's own answer to an unknown option (with its edit-distance suggestion); a method its typings leave out. */
const commanderUnknownOption = (Command.prototype as unknown as { unknownOption(this: Command, flag: string): never }).unknownOption;

/** An option's value that is empty, or is the next option: the shell variable that should have given it was empty. */
function refuseMissingValue(value: string): string {
  if (value === '') throw new InvalidArgumentError('It is empty (was a shell variable empty?).');
  if (value.startsWith('--')) throw new InvalidArgumentError('That is the next option, so the value is missing (was a shell variable empty?).');
  return value;
}

/**
 * Commander's Command, with what a person at a terminal needs said better:
 * - every setting is an environment variable, so an option that names one (`acg serve --port 9090`)
 *   is answered with the variable to set (`PORT=9090 npx acg serve`: in a clone, `acg` is not on the PATH);
 * - an unknown option that begins a known one (`--amount` for `--amount-uc`) is suggested: commander's
 *   suggestion stops at an edit distance of 3;
 * - an option's value that is empty or is the next option (`--agent $AGENT_ID --amount-uc 5` with
 *   AGENT_ID empty) is refused by name, not taken as the value.
 */
class AcgCommand extends Command {
  override createCommand(name?: string): AcgCommand {
    return new AcgCommand(name);
  }

  /**
   * `acg help credit grant` shows `credit grant`'s help: commander's help command reads one name and showed `credit`'s
   * (found from outside). A help of names is run as the command they name with --help, which every command answers.
   * A name that names no command there is run as one, so commander refuses it as it refuses `acg foo`, with its
   * suggestion and exit 2 (found from outside: `acg help foo` printed nothing, and `acg help credit foo` showed
   * `credit`'s help).
   */
  override parseAsync(argv?: readonly string[], options?: ParseOptions): Promise<this> {
    const first = options?.from === 'user' ? 0 : 2;
    if (argv === undefined || argv[first] !== 'help' || argv.length - first < 2) return super.parseAsync(argv, options);
    const before = argv.slice(0, first);
    const names = argv.slice(first + 1);
    let at: Command = this;
    for (const [index, name] of names.entries()) {
      const named = at.commands.find((command) => command.name() === name || command.aliases().includes(name));
      if (!named) return super.parseAsync([...before, ...names.slice(0, index + 1)], options);
      at = named;
    }
    return super.parseAsync([...before, ...names, '--help'], options);
  }

  /**
   * A usage error exits 2, as the commands' own checks of their arguments do, and not commander's 1, which
   * `acg credit check` gives its own meaning: an invariant is broken (found from outside: a mistyped option read as a
   * broken ledger to a monitoring script).
   */
  override error(message: string, errorOptions?: ErrorOptions): never {
    return super.error(message, { ...errorOptions, exitCode: errorOptions?.exitCode === 0 ? 0 : USAGE_EXIT });
  }

  /** Help shown for a usage error (a command group named without its command) exits 2 too. */
  override help(context?: HelpContext | ((text: string) => string)): never {
    // Commander takes a help's exit code from process.exitCode; restored when a test's exitOverride throws instead.
    const before = process.exitCode;
    if (typeof context === 'object' && context.error && !before) process.exitCode = USAGE_EXIT;
    try {
      return super.help(context as HelpContext);
    } finally {
      process.exitCode = before;
    }
  }

  /** An argument is refused empty, as an option's value is (`acg agent freeze "$AGENT_ID"` with AGENT_ID unset). */
  override createArgument(name: string, description?: string): Argument {
    return super.createArgument(name, description).argParser(refuseMissingValue);
  }

  /**
   * An option's value is refused empty, and an option without a default given twice is refused rather than the last
   * one taken: `acg credit grant --agent A … --agent B` credited B without a word (found from outside). One with a
   * default cannot be told given twice from given once, and keeps commander's rule (the last one).
   */
  override createOption(flags: string, description?: string): Option {
    const option = super.createOption(flags, description);
    if (option.required) {
      option.argParser((value: string, previous: unknown) => {
        if (previous !== undefined && option.defaultValue === undefined) throw new InvalidArgumentError(`It was given before (${String(previous)}): give it once.`);
        return refuseMissingValue(value);
      });
    }
    return option;
  }

  /** Called by commander for an option this command does not have. */
  unknownOption(flag: string): never {
    const [name = flag, inline] = flag.split(/=(.*)/s, 2);
    const variable = settingFor(name);
    if (variable) {
      const at = this.args.indexOf(flag);
      const next = this.args[at + 1];
      const valued = inline === undefined && next !== undefined && !next.startsWith('-');
      const value = inline ?? (valued ? next : '<value>');
      const given = (option: Option) => this.getOptionValueSource(option.attributeName()) === 'cli';
      const rest = this.args.length > (valued ? 2 : 1) || this.options.some(given) ? ' …' : '';
      this.error(`error: ${commandLine(this)} has no option ${name}: settings are environment variables. Use ${variable}=${value} npx ${commandLine(this)}${rest}`, {
        code: 'commander.unknownOption',
      });
    }
    const begun = this.options.flatMap((option) => (option.long?.startsWith(name) ? [option.long] : []));
    if (begun.length === 1) this.error(`error: unknown option '${flag}'\n(Did you mean ${begun[0]}?)`, { code: 'commander.unknownOption' });
    return commanderUnknownOption.call(this, flag);
  }
}

function everyCommand(command: Command): Command[] {
  return [command, ...command.commands.flatMap(everyCommand)];
}

/**
 * Commander checks required options before unknown ones, so `--amount 5` was answered "required option
 * '--amount-uc' not specified" instead of the suggestion. Required options are checked after parsing
 * instead, in a preAction hook (which runs after the unknown-option check), in commander's words.
 */
function checkRequiredOptionsLast(program: Command): void {
  const required = new Set<Option>();
  for (const command of everyCommand(program)) {
    for (const option of command.options) {
      if (!option.mandatory) continue;
      required.add(option);
      option.makeOptionMandatory(false);
    }
  }
  program.hook('preAction', (_program, action) => {
    for (const option of action.options) {
      if (required.has(option) && action.getOptionValue(option.attributeName()) === undefined) {
        action.error(`error: required option '${option.flags}' not specified`, { code: 'commander.missingMandatoryOptionValue' });
      }
    }
  });
}

export function buildCli(): Command {
  const program = new AcgCommand('acg')
    .description('Agent Credit Gateway: prepaid credit, holds and metered services for software agents')
    .version(packageVersion())
    .showHelpAfterError('(add --help for usage)')
    .addHelpText(
      'after',
      `\nConfiguration is read from environment variables (docs/configuration.md has the table), e.g. PORT=9090 npx acg serve:\n` +
        [...ENV_VARS.map((v) => variableHelp(v.name, variableMeaning(v))), variableHelp('OTEL_*', OTEL_HELP)].join('\n'),
    );

  program
    .command('serve')
    .description('run the gateway (applies pending migrations first)')
    .addHelpText(
      'after',
      '\nExample: PORT=9090 npx acg serve   (the same as PORT=9090 npm start)\n' +
        '         ACG_MODE=live ACG_BASE_URL=https://credit.example.com DATABASE_URL=postgres://acg@db.internal/acg … npx acg serve\n\n' +
        'Its settings are environment variables: acg --help lists them, docs/configuration.md describes them (live mode needs more ' +
        'than these: its start-up log names each missing one), and docs/operations.md says how to run it.',
    )
    .action(async () => {
      const { serve } = await import('./server.ts');
      await serve();
    });

  program
    .command('migrate')
    .description('apply pending database migrations and exit')
    .addHelpText(
      'after',
      '\nExample: DATABASE_URL=postgres://acg@db.internal/acg npx acg migrate   (or, with the dev gateway stopped: npx acg migrate)\n\n' +
        'The database is DATABASE_URL (PostgreSQL) or, without it, the embedded one in ACG_DATA_DIR (stop the gateway first). ' +
        'Every pending migration is applied in one transaction: all of them or none. Exit 0 when the schema is current; exit 2, ' +
        'with one line, when a migration fails (none is applied: the database stays as it was), when the database was migrated ' +
        'by a newer release (this one must not run on it), or when the database cannot be reached. `acg serve` migrates at start ' +
        'too. docs/operations.md, "Upgrading to a new release".',
    )
    .action(async () => {
      const config = configOrExit();
      const { openDatabase, embeddedDatabaseDir } = await import('./platform/db/open.ts');
      const { migrate, migrationName, MigrationError } = await import('./platform/db/migrate.ts');
      const { cannotOpenDatabase, isStorageUnavailable } = await import('./platform/db/faults.ts');
      // Progress on stderr, so that stdout stays the list of what was applied (found from outside: a first migrate of
      // the embedded database said nothing for about ten seconds).
      if (!config.databaseUrl) {
        const where = embeddedDatabaseDir(config.dataDir);
        process.stderr.write(existsSync(path.join(where, 'PG_VERSION')) ? `opening the embedded database in ${where}…\n` : `creating the embedded database in ${where} (a few seconds)…\n`);
      } else {
        // Where it connects, never who as (the URL's user and password stay out of it).
        const where = databaseAddress(config.databaseUrl);
        process.stderr.write(`connecting to PostgreSQL${where ? ` at ${where}` : ''}…\n`);
      }
      let db;
      try {
        db = await openDatabase(config);
        // PostgreSQL connects lazily: ask it something here, so that a refused connection (no such role or database,
        // nothing listening) is this one line and not a stack trace from the first migration.
        await db.query('SELECT 1');
      } catch (error) {
        process.stderr.write(`${cannotOpenDatabase(error)}\n`);
        process.exit(2);
      }
      try {
        const report = await migrate(db, {
          pending: (list) => process.stderr.write(`applying ${list.length} migration(s) in one transaction (${migrationName(list[0]!)}${list.length > 1 ? ` … ${migrationName(list.at(-1)!)}` : ''})…\n`),
          applied: (m) => process.stdout.write(`applied ${migrationName(m)}\n`),
        });
        process.stdout.write(
          `${report.applied.length} migration(s) applied, ${report.alreadyApplied} already present (${db.kind === 'postgres' ? 'PostgreSQL' : `PGlite in ${config.dataDir}`})\n`,
        );
      } catch (error) {
        // A migration the database refused, or the database lost (or a lock wait given up) midway: the run's one
        // transaction rolled back whole, so nothing of it was applied (found from outside: a stack trace, exit 1).
        if (error instanceof MigrationError) process.stderr.write(`cannot migrate: ${error.message}\n`);
        else if (isStorageUnavailable(error)) process.stderr.write(`cannot migrate: the database failed during the migrations (${(error as Error).message}); none was applied, run it again\n`);
        else throw error;
        process.exitCode = 2;
      } finally {
        await db.close();
      }
    });

  const credit = program.command('credit').description('operator commands on the credit ledger');
  credit
    .command('grant')
    .description('add a credit lot to an agent (journaled like every ledger change)')
    .addHelpText(
      'after',
      '\nExample: npx acg credit grant --agent agt_… --amount-uc 5000000   (5 credits)\n\n' +
        'With a gateway running at ACG_BASE_URL the grant goes through its operator route (POST /v1/operator/credit-grants) with the ' +
        'operator credential: ACG_OPERATOR_TOKEN, or else ACG_DATA_DIR/operator-token, which a dev gateway writes and which is sent only ' +
        'to a gateway that says it runs in dev mode (a live one takes ACG_OPERATOR_TOKEN only). With none running it opens the configured ' +
        'database itself (stop the gateway first on the embedded one), and never creates one.',
    )
    .requiredOption('--agent <agentId>', 'the agent to credit (agt_…), required')
    .requiredOption('--amount-uc <microcredits>', 'amount in microcredits (1 credit = 1,000,000 µc), required')
    .option('--expires-at <unixSeconds>', 'when the unspent remainder lapses (default: never)')
    .option('--priority <n>', 'burn-down priority; lower is spent first', '100')
    .option('--note <text>', 'why this grant was made (kept as the lot source reference)')
    .option(
      '--idempotency-key <key>',
      'the Idempotency-Key to grant under (default: a new one each run): a run that got no answer names the key it sent, and the same ' +
        'command with it grants at most once; through the gateway only',
    )
    .action(async (options: { agent: string; amountUc: string; expiresAt?: string; priority: string; note?: string; idempotencyKey?: string }) => {
      const { grantCredit } = await import('./operator/cli.ts');
      await grantCredit(configOrExit(), options);
    });

  credit
    .command('check')
    .description("check the ledger's invariants over the whole database (after a failover, a restore or an incident)")
    .option('--examples <n>', 'rows shown of each broken invariant', '5')
    .addHelpText(
      'after',
      '\nExample: DATABASE_URL=postgres://acg@db.internal/acg npx acg credit check --examples 20   (exit 0: every invariant holds)\n\n' +
        'Every invariant (each operation\'s journal sums to zero; lots, holds, balances, earnings and budget totals agree with what ' +
        'the holds and the journal say) is checked in one read-only snapshot, so a gateway on PostgreSQL may run meanwhile; with the ' +
        'embedded database, stop the gateway first. It writes nothing. Each invariant is said as it is checked; a broken one with ' +
        'the rows that break it. Exit 0 when all hold, 1 when one does not, 2 when the database cannot be read, is not at this release\'s ' +
        'schema (it never migrates: acg migrate, or the release the gateway runs), or the command is misused (every acg usage error exits 2). docs/operations.md, ' +
        '"After a failover".',
    )
    .action(async (options: { examples: string }) => {
      const { checkLedger } = await import('./ledger/cli.ts');
      await checkLedger(configOrExit(), options);
    });

  const agent = program.command('agent').description("an owner's commands on one of their agents, through the running gateway");
  const mandate = agent
    .command('mandate')
    .description("the agent's mandate: its owner's spending rules (budgets, merchants, approval threshold, validity), versioned");
  const ownerHelp =
    '\n\nThe command talks to the gateway at ACG_BASE_URL as the agent\'s owner: ACG_OWNER_TOKEN holds the owner\'s session token (a human ' +
    'session JWT of the human identity provider, or an OAuth access token with scope svc:owner). In dev mode, with the built-in ' +
    'dev issuer, --owner-email signs in as that owner instead (run it with the gateway\'s ACG_DATA_DIR); given both, --owner-email ' +
    'wins and ACG_OWNER_TOKEN is not sent. A live gateway takes ACG_OWNER_TOKEN only. The operator credential ' +
    'cannot: what it reads and changes is the owner\'s.';
  const ownerEmail = '--owner-email <email>';
  const ownerEmailHelp = "dev mode: sign in as this owner with the gateway's built-in dev issuer; it wins over ACG_OWNER_TOKEN when both are given";
  mandate
    .command('show')
    .description("print the agent's mandate in force, with each budget's usage, as JSON (GET /v1/owner/agents/{id}/mandate)")
    .argument('<agentId>', 'the agent (agt_…)')
    .option(ownerEmail, ownerEmailHelp)
    .addHelpText('after', `\nExample: ACG_OWNER_TOKEN=… npx acg agent mandate show agt_… > mandate.json${ownerHelp}`)
    .action(async (agentId: string, options: { ownerEmail?: string }) => {
      const { showMandate } = await import('./operator/mandate-cli.ts');
      const config = configOrExit();
      await showMandate(config, { agentId, ownerToken: config.ownerToken, ownerEmail: options.ownerEmail });
    });
  mandate
    .command('set')
    .description("replace the agent's mandate with the rules in a JSON file (a new version), and print it as JSON")
    .argument('<agentId>', 'the agent (agt_…)')
    .requiredOption('--file <path>', 'the mandate\'s rules as JSON; - reads standard input, required')
    .option('--force', "replace the mandate in force even if it changed since the file's `version` was read")
    .option(ownerEmail, ownerEmailHelp)
    .addHelpText(
      'after',
      '\nThe file holds the rules as `acg agent mandate show` prints them (what it prints besides the rules, agentId, version, ' +
        'createdAt, hash and usage, is ignored): edit what show printed and set it. A member left out takes its default (no budgets, ' +
        'no merchant rules, …), as PUT /v1/owner/agents/{id}/mandate does. When the file holds the `version` show printed, the ' +
        'change is made only on that version: if the mandate changed since, nothing is set and the command says so (--force sets it anyway).\n\n' +
        'A file with three budgets (all spending a day, one merchant a month, one category a week), purchases above 15 credits ' +
        'asked of the owner first, and delegates allowed one level down (amounts are decimal strings of microcredits; 1 credit = ' +
        '1,000,000 µc; a budget covers one of merchantId, category or serviceId, or all spending; period day, week, month or total):\n' +
        '  {"budgets": [{"id": "daily", "limitUc": "30000000", "period": "day"},\n' +
        '               {"id": "shop", "limitUc": "25000000", "period": "month", "merchantId": "mer_…"},\n' +
        '               {"id": "books", "limitUc": "10000000", "period": "week", "category": "books"}],\n' +
        '   "approvalAboveUc": "15000000", "delegation": {"allowed": true, "maxDepth": 1}}\n' +
        'Every member is described under PUT /v1/owner/agents/{id}/mandate in /openapi.json.\n\n' +
        `Example: npx acg agent mandate show agt_… > mandate.json; (edit it); npx acg agent mandate set agt_… --file mandate.json${ownerHelp}`,
    )
    .action(async (agentId: string, options: { file: string; force?: boolean; ownerEmail?: string }) => {
      const { setMandate } = await import('./operator/mandate-cli.ts');
      const config = configOrExit();
      await setMandate(config, { agentId, file: options.file, force: options.force === true, ownerToken: config.ownerToken, ownerEmail: options.ownerEmail });
    });

  const freezeHelp =
    '\n\nThe command talks to the gateway at ACG_BASE_URL as the agent\'s owner: ACG_OWNER_TOKEN holds the owner\'s session token, or in dev ' +
    'mode --owner-email signs in as that owner (given both, --owner-email wins; a live gateway takes ACG_OWNER_TOKEN only), as for acg agent mandate.';
  agent
    .command('freeze')
    .description('stop the agent and every delegate below it from spending, and print the agent and the freeze report as JSON')
    .argument('<agentId>', 'the agent (agt_…)')
    .option('--release-holds', 'also release their outstanding holds now and revoke those vouchers (each merchant holding one is told)')
    .option(ownerEmail, ownerEmailHelp)
    .addHelpText(
      'after',
      '\nThe report lists each merchant told of revoked vouchers and where its voucher.revoked event stands (delivered, pending, failing, ' +
        'disabled, paused, none); GET /v1/owner/agents/{id}/freeze reads it again later.\n\n' +
        `Example: ACG_OWNER_TOKEN=… npx acg agent freeze agt_… --release-holds${freezeHelp}`,
    )
    .action(async (agentId: string, options: { releaseHolds?: boolean; ownerEmail?: string }) => {
      const { freezeAgent } = await import('./operator/freeze-cli.ts');
      const config = configOrExit();
      await freezeAgent(config, { agentId, releaseHolds: options.releaseHolds === true, ownerToken: config.ownerToken, ownerEmail: options.ownerEmail });
    });
  agent
    .command('unfreeze')
    .description('let the agent (and its delegates not frozen themselves) spend again, and print the agent as JSON')
    .argument('<agentId>', 'the agent (agt_…)')
    .option(ownerEmail, ownerEmailHelp)
    .addHelpText('after', `\nExample: ACG_OWNER_TOKEN=… npx acg agent unfreeze agt_…${freezeHelp}`)
    .action(async (agentId: string, options: { ownerEmail?: string }) => {
      const { unfreezeAgent } = await import('./operator/freeze-cli.ts');
      const config = configOrExit();
      await unfreezeAgent(config, { agentId, ownerToken: config.ownerToken, ownerEmail: options.ownerEmail });
    });
  const delegates = agent.command('delegates').description("the agent's delegates: child agents under mandates within its own, spending its tree's credit");
  delegates
    .command('list')
    .description('print the agent and the delegates below it, each with its budget usage, as JSON (GET /v1/owner/agents/{id}/delegates)')
    .argument('<agentId>', 'the agent (agt_…)')
    .option(ownerEmail, ownerEmailHelp)
    .addHelpText('after', `\nExample: ACG_OWNER_TOKEN=… npx acg agent delegates list agt_…${ownerHelp}`)
    .action(async (agentId: string, options: { ownerEmail?: string }) => {
      const { listDelegates } = await import('./operator/mandate-cli.ts');
      const config = configOrExit();
      await listDelegates(config, { agentId, ownerToken: config.ownerToken, ownerEmail: options.ownerEmail });
    });
  delegates
    .command('create')
    .description('register a delegate of the agent (POST /v1/agents/{id}/delegates) and print it as JSON')
    .argument('<parentId>', 'the parent agent (agt_…), whose mandate must allow delegates')
    .requiredOption('--name <name>', "the delegate's name, required")
    .requiredOption('--subject <subject>', "the delegate's own subject at its parent's agent identity provider, required")
    .option('--file <path>', "the delegate's mandate as JSON (- reads standard input); a member left out takes the parent's, but delegation, which is none (no delegates below it)")
    .option(ownerEmail, ownerEmailHelp)
    .addHelpText(
      'after',
      "\nThe mandate must lie within the parent's: every parent budget matched by one of the same scope and period at most as large, merchants, " +
        'window, allowed services and categories inside, delegation.maxDepth below the parent\'s. A wider one is refused naming the rule.\n\n' +
        `Example: npx acg agent delegates create agt_… --name Buyer --subject buyer-7 --file buyer.json${ownerHelp}`,
    )
    .action(async (parentId: string, options: { name: string; subject: string; file?: string; ownerEmail?: string }) => {
      const { createDelegate } = await import('./operator/mandate-cli.ts');
      const config = configOrExit();
      await createDelegate(config, { agentId: parentId, name: options.name, subject: options.subject, file: options.file, ownerToken: config.ownerToken, ownerEmail: options.ownerEmail });
    });

  const keys = program.command('keys').description("the gateway's ES256 signing keys (published at /.well-known/jwks.json)");
  const keysDatabase =
    '\nWith the embedded database, stop the gateway first (PGlite admits one process); with DATABASE_URL run it any time. It never migrates: the database must be at the schema of this release (acg migrate). ' +
    "Times are the database's clock, which every instance's keys follow.";
  const uncheckedBoxKey =
    "live mode: go on though nothing shows ACG_SECRET_BOX_KEY is the instances' own (no instance with one has served on this database yet)";
  keys
    .command('list')
    .description('show each key in the database: upcoming, signing, retired (still verifying) or expired')
    .addHelpText(
      'after',
      `${keysDatabase}\nWith ACG_SECRET_BOX_KEY set, a sealed key that does not open with it says so: one a rotation with another box key left.\n\n` +
        'Example: DATABASE_URL=postgres://…/acg npx acg keys list',
    )
    .action(async () => {
      const { listKeys } = await import('./keys/cli.ts');
      await listKeys(configOrExit());
    });
  keys
    .command('rotate')
    .description('publish a new signing key now, sign with it after --lead-s, keep the old one verifying for --retention-s')
    .option('--lead-s <seconds>', 'publication lead before the new key signs (covers every instance\'s key reload and 300 s JWKS caches)', '600')
    .option('--retention-s <seconds>', 'how long replaced keys stay published after they stop signing (the longest token life: vouchers live as long as a hold)', '604800')
    .option('--expire-now', 'for a leaked key: the new key signs now, and the replaced keys stop signing and verifying now (everything they signed stops verifying)')
    .option('--unchecked-box-key', `${uncheckedBoxKey}: for the first key of a new deployment; every instance must then run with this box key`)
    .addHelpText(
      'after',
      keysDatabase +
        '\nThe latest rotation is the one whose key signs next: a key of an earlier rotation still upcoming (it signed nothing) is withdrawn, and the key signing now goes on until the new one takes over.' +
        "\nLive mode seals the new key with ACG_SECRET_BOX_KEY, and only with the instances' own: each serving instance keeps a check of its box key in the database, which this key must open (exit 2 otherwise)." +
        '\nA leaked key: `acg keys rotate --expire-now`; every instance stops trusting it within 5 s, its key reload (docs/operations.md, "A signing key leaked").\n\n' +
        'Example: ACG_MODE=live ACG_SECRET_BOX_KEY=… DATABASE_URL=postgres://…/acg npx acg keys rotate   (signs in 600 s, the old key verifies 7 days more; --expire-now after a leak)',
    )
    .action(async (options: { leadS: string; retentionS: string; expireNow?: boolean; uncheckedBoxKey?: boolean }, command: Command) => {
      if (options.expireNow && (command.getOptionValueSource('leadS') === 'cli' || command.getOptionValueSource('retentionS') === 'cli')) {
        process.stderr.write('--expire-now takes no --lead-s or --retention-s: the new key signs now and the replaced keys stop verifying now\n');
        process.exit(2);
      }
      const { rotateKeys } = await import('./keys/cli.ts');
      await rotateKeys(configOrExit(), options);
    });
  const withdraw = keys.command('withdraw') as AcgCommand;
  withdraw
    .description('remove a key that never signed: one still upcoming, or one no instance can open (sealed with another box key than theirs)')
    // A kid is base64url, so one in 64 begins with '-': it is the argument, not an unknown option (found in CI: commander
    // refused `acg keys withdraw -1QMg…` as "unknown option"). A mistyped long option (--…, not of a kid's shape) is still
    // refused as one.
    .argument('<kid>', "the key's id, as acg keys list shows it", (value: string) => {
      // One kid in 4,096 begins with '--': a word of a kid's shape (a SHA-256 thumbprint, 43 base64url characters) is one.
      if (/^[A-Za-z0-9_-]{43}$/.test(value)) return value;
      if (!value.startsWith('--')) return refuseMissingValue(value);
      // Commander's own refusal, with its suggestion, answers nothing while unknown options are allowed.
      withdraw.allowUnknownOption(false);
      return withdraw.unknownOption(value);
    })
    .option('--unchecked-box-key', `${uncheckedBoxKey}: withdraw a key that does not open with it anyway`)
    .allowUnknownOption()
    .addHelpText(
      'after',
      `${keysDatabase}\nA key that may have signed is refused (what it signed would stop verifying): acg keys rotate replaces it. A key that is due to sign is ` +
        "withdrawn only when ACG_SECRET_BOX_KEY, shown to be the instances' own, does not open it: the way out of a rotation run with a mistaken box key. " +
        'The keys it was to replace go on signing. In live mode a key kept unsealed (ignored) is withdrawn too.\n\n' +
        'Example: ACG_MODE=live ACG_SECRET_BOX_KEY=… DATABASE_URL=postgres://…/acg npx acg keys withdraw x_DLFk…; then npx acg keys rotate with the same environment',
    )
    .action(async (kid: string, options: { uncheckedBoxKey?: boolean }) => {
      const { withdrawKey } = await import('./keys/cli.ts');
      await withdrawKey(configOrExit(), kid, options);
    });

  program
    .command('demo')
    .description('walk a whole purchase against the running dev gateway, printing each HTTP request and the answer')
    .addHelpText(
      'after',
      '\nExample: npm start in one terminal; then, in another, in the same directory: npx acg demo\n\n' +
        'Start the gateway first (npm start) and run this with the same ACG_DATA_DIR, PORT / ACG_BASE_URL. It creates (or reuses) an ' +
        'owner, an agent, a merchant with a verified dev-zone domain and an offer, tops the agent up to 5 credits, then buys twice: one ' +
        'voucher is partly captured, the other released. Safe to run again: it reuses what exists and buys again. Exit 0 when the ' +
        'purchase is done; exit 2, with one line naming the request and the answer, when a step is refused or what answers is not the ' +
        'gateway (as every acg command\'s refusal).',
    )
    .action(async () => {
      const { runDemo } = await import('./sandbox/demo.ts');
      await runDemo(configOrExit());
    });

  const dev = program.command('dev').description('dev-mode helpers (built-in identity issuers, the dev DNS zone)');
  const dns = dev.command('dns').description('the dev DNS zone the dev gateway verifies merchant domains against');
  dns
    .command('publish')
    .description("publish a TXT record in the running gateway's dev zone: a merchant's proof (--merchant) or any <name> <value>")
    .argument('[name]', 'DNS name, e.g. _acceptor-verify.shop.example.com')
    .argument('[value]', 'TXT value, published exactly as given')
    .option('--merchant <merchantId>', "publish this merchant's _acceptor-verify record")
    .addHelpText(
      'after',
      '\nExample: npx acg dev dns publish --merchant mer_…   (then POST /v1/merchants/mer_…/verify-domain as its owner)\n' +
        '         npx acg dev dns publish _acceptor-verify.shop.example.com "acg-domain-verification=…"\n\n' +
        'Then POST /v1/merchants/{id}/verify-domain finds it. The gateway must be running (npm start) with the same ACG_DATA_DIR.',
    )
    .action(async (name: string | undefined, value: string | undefined, options: { merchant?: string }) => {
      const { publishDevRecord } = await import('./sandbox/cli.ts');
      await publishDevRecord(configOrExit(), { merchant: options.merchant, name, value });
    });
  const token = dev.command('token').description('mint a token from a built-in dev identity issuer');
  token
    .command('human')
    .description('a human owner session JWT (verified email)')
    .requiredOption('--email <email>', "the owner's verified email, required")
    .option('--subject <subject>', 'subject at the human issuer (default: derived from the email)')
    .option('--lifetime-s <seconds>', 'token lifetime in seconds', '3600')
    .addHelpText(
      'after',
      '\nExample: HUMAN=$(npx acg dev token human --email ada@example.com)\n' +
        '         curl http://127.0.0.1:8080/v1/me -H "authorization: Bearer $HUMAN"\n\n' +
        'It prints the token alone on stdout, so $(…) takes it. Send it as "authorization: Bearer <token>" to the owner\'s routes ' +
        '(/v1/me, /v1/owner/agents, /v1/merchants, …: /docs lists them), or set ACG_OWNER_TOKEN to it for acg agent …; it signs in ' +
        'the owner of --subject (by default human:<email>), who is registered at its first use. Only the dev gateway started with this ACG_BASE_URL and ACG_DATA_DIR accepts it ' +
        '(its built-in issuer\'s keys are there); it expires after --lifetime-s.',
    )
    .action(async (options: { email: string; subject?: string; lifetimeS: string }) => {
      const subject = options.subject ?? `human:${options.email.toLowerCase()}`;
      await printDevToken('human', { email: options.email, subject, subjectFrom: options.subject === undefined ? '--email' : undefined, lifetimeS: options.lifetimeS });
    });
  token
    .command('agent')
    .description("an agent identity JWT carrying its owner's email")
    .requiredOption('--subject <subject>', 'subject of the agent at the agent issuer (register it first with POST /v1/owner/agents), required')
    .requiredOption('--owner-email <email>', "the owner's verified email (must match the owner's human identity), required")
    .option('--lifetime-s <seconds>', 'token lifetime in seconds', '3600')
    .addHelpText(
      'after',
      '\nExample: AGENT=$(npx acg dev token agent --subject scout --owner-email ada@example.com)\n' +
        '         curl http://127.0.0.1:8080/v1/me -H "authorization: Bearer $AGENT"\n\n' +
        'It prints the token alone on stdout, so $(…) takes it. The agent sends it as "authorization: Bearer <token>" to the agent\'s ' +
        'routes (/v1/me, POST /v1/vouchers to buy, …: /docs lists them). The gateway takes it once the owner has registered an agent with ' +
        'this subject at the dev agent issuer (POST /v1/owner/agents, identity {"issuer": "<ACG_BASE_URL>/dev/issuers/agent", "subject": ' +
        '"scout"}). Only the dev gateway started with this ACG_BASE_URL and ACG_DATA_DIR accepts it; it expires after --lifetime-s.',
    )
    .action(async (options: { subject: string; ownerEmail: string; lifetimeS: string }) => {
      await printDevToken('agent', { subject: options.subject, ownerEmail: options.ownerEmail, lifetimeS: options.lifetimeS });
    });

  checkRequiredOptionsLast(program);
  return program;
}

async function printDevToken(
  kind: 'human' | 'agent',
  options: { subject: string; email?: string; ownerEmail?: string; lifetimeS: string; /** The option the subject was made from, when not given. */ subjectFrom?: string },
): Promise<void> {
  const config = configOrExit();
  if (config.mode !== 'dev') {
    process.stderr.write('acg dev token works in dev mode only; live mode trusts only the configured identity providers\n');
    process.exit(2);
  }
  if ((kind === 'human' && config.humanIssuer) || (kind === 'agent' && config.agentIssuer)) {
    process.stderr.write(`a ${kind} identity issuer is configured (ACG_${kind.toUpperCase()}_ISSUER); get tokens from it instead\n`);
    process.exit(2);
  }
  const lifetimeS = Number(options.lifetimeS);
  if (!Number.isInteger(lifetimeS) || lifetimeS < 60 || lifetimeS > 86_400) {
    process.stderr.write('--lifetime-s must be a whole number of seconds between 60 and 86400\n');
    process.exit(2);
  }
  // The gateway's bound for a subject, as its dev issuer's sign-in states it (an agent's registration bounds it alike):
  // a longer one was minted without complaint, a token no agent registration could match (found from outside).
  const { DevLoginBody } = await import('./oauth/schemas.ts');
  const subjectCharsMax = DevLoginBody.properties.subject.maxLength ?? Number.POSITIVE_INFINITY;
  const { emailProblem } = await import('./operator/mandate-cli.ts');
  const malformed = kind === 'human' ? emailProblem('--email', options.email ?? '') : emailProblem('--owner-email', options.ownerEmail ?? '');
  if (malformed) {
    process.stderr.write(`${malformed}\n`);
    process.exit(2);
  }
  if (options.subject.length > subjectCharsMax) {
    // A subject made from --email is said as that: --subject was not given (found from outside: an email of 195 characters).
    const made = options.subjectFrom ? `, made from ${options.subjectFrom} (human:<email>); give a shorter --subject` : '';
    process.stderr.write(`--subject must be at most ${subjectCharsMax} characters, as the gateway takes a subject; it is ${options.subject.length}${made}\n`);
    process.exit(2);
  }
  const { devIssuerNamedBy, gatewayMode, liveGatewayAt } = await import('./operator/client.ts');
  if ((await gatewayMode(config.baseUrl)) === 'live') {
    process.stderr.write(`${liveGatewayAt(config.baseUrl, 'it accepts no dev token, only tokens of its configured identity providers')}\n`);
    process.exit(2);
  }
  const { devIssuerKeysFile, devIssuerUrl, loadDevIssuerKeys, mintDevToken } = await import('./identity/dev-issuers.ts');
  // The same gateway under another name (localhost for 127.0.0.1) would refuse the token: its issuer is another.
  const named = await devIssuerNamedBy(config.baseUrl, kind);
  const mine = devIssuerUrl(config.baseUrl, kind);
  if (named !== undefined && named !== mine) {
    const theirs = named.endsWith(`/dev/issuers/${kind}`) ? named.slice(0, -`/dev/issuers/${kind}`.length) : undefined;
    const fix = theirs === undefined ? 'set ACG_BASE_URL to the base URL the gateway was started with' : `set ACG_BASE_URL=${theirs}, the base URL the gateway was started with`;
    process.stderr.write(`the gateway at ${config.baseUrl} names its ${kind} issuer ${named}, so it would refuse a token issued as ${mine}: ${fix}\n`);
    process.exit(2);
  }
  const file = devIssuerKeysFile(config.dataDir);
  if (!existsSync(file)) {
    const { missingDevIssuerKeys } = await import('./operator/client.ts');
    process.stderr.write(`${await missingDevIssuerKeys(config, file)}\n`);
    process.exit(2);
  }
  const keys = await loadDevIssuerKeys(config.dataDir);
  const token = await mintDevToken(keys, {
    baseUrl: config.baseUrl,
    audience: 'agent-credit-gateway',
    kind,
    subject: options.subject,
    email: options.email?.toLowerCase(),
    ownerEmail: options.ownerEmail?.toLowerCase(),
    ownerEmailClaim: config.agentOwnerEmailClaim,
    lifetimeS,
    nowS: Math.floor(Date.now() / 1000),
  });
  process.stdout.write(`${token}\n`);
  if (named === undefined) {
    process.stderr.write(
      `warning: no dev gateway answered at ${config.baseUrl}; the token names the issuer ${mine}, which only a dev gateway started with ` +
        `ACG_BASE_URL=${config.baseUrl} and this ACG_DATA_DIR accepts\n`,
    );
  }
}

/** The status a shell gives a command that a closed pipe stopped (128 + SIGPIPE), as `yes | head` ends. */
const CLOSED_PIPE_EXIT = 141;

export async function main(argv: string[]): Promise<void> {
  // A reader that stops early (`acg credit check | head -1`) closes the pipe: the command ends there, quietly, with
  // 141, never with a stack and 1, which `credit check` means as a broken ledger (found from outside). Not for
  // `serve`, whose log is its output: a gateway whose log reader died stops as any crash does, with its stack.
  if (argv[2] !== 'serve') {
    process.stdout.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code === 'EPIPE') process.exit(CLOSED_PIPE_EXIT);
      // Any other failure to write (a full disk, `> /dev/full`) is the command's, not a broken ledger's 1: said, exit 2.
      process.stderr.write(`acg: cannot write its output (${error.code ?? error.message})\n`);
      process.exit(2);
    });
  }
  await buildCli().parseAsync(argv);
}

/** Whether this module is the script node was started with (`node dist/cli.js …`), not imported by bin/acg.js or a test. */
function isEntryScript(): boolean {
  const script = process.argv[1];
  return script !== undefined && existsSync(script) && pathToFileURL(realpathSync(script)).href === import.meta.url;
}

// `acg` (bin/acg.js) is the command; `node dist/cli.js …` runs it too, rather than loading and printing nothing.
if (isEntryScript()) await main(process.argv);
