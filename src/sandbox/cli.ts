// `acg dev dns publish`: adds a TXT record to the running dev gateway's dev DNS zone, through its
// operator route (the embedded database belongs to the gateway while it runs).
import { callGateway, describeRefusal, gatewayMode, GatewayNotRunning, liveGatewayAt, missingCredential, noGatewayAt, operatorCredentialFor } from '../operator/client.ts';
import type { Config } from '../platform/config.ts';

function fail(message: string): never {
  process.stderr.write(`${message}\n`);
  process.exit(2);
}

export async function publishDevRecord(config: Config, options: { merchant?: string; name?: string; value?: string }): Promise<void> {
  if (config.mode !== 'dev') fail('acg dev dns publish works in dev mode only; live mode verifies domains against real DNS');
  if (!config.doh.devZone) {
    process.stderr.write(`note: ACG_DOH_RESOLVER_URL is set (${config.doh.resolverUrl}), so the gateway verifies against that resolver, not the dev zone\n`);
  }
  const byMerchant = options.merchant !== undefined;
  if (byMerchant === (options.name !== undefined)) fail('give either --merchant <id>, or a <name> and a <value>');
  if (!byMerchant && options.value === undefined) fail('give the TXT value after the name');
  if ((await gatewayMode(config.baseUrl)) === 'live') fail(liveGatewayAt(config.baseUrl, 'it has no dev zone, and verifies domains against real DNS'));
  const token = await operatorCredentialFor(config);
  if (!token) fail(await missingCredential(config));
  const body = byMerchant ? { merchantId: options.merchant } : { name: options.name, value: options.value };
  try {
    const answer = await callGateway(config.baseUrl, token, 'POST', '/dev/dns/records', body);
    if (answer.status !== 200) fail(describeRefusal(config, answer));
    const record = answer.body.record as { name: string; value: string };
    process.stdout.write(`published ${record.name} TXT "${record.value}" in the dev zone of ${config.baseUrl}\n`);
  } catch (error) {
    if (error instanceof GatewayNotRunning) fail(noGatewayAt(config));
    fail((error as Error).message);
  }
}
