// The merchant of a merchant budget, picked from the merchants the owner can see rather than typed as an id (found
// from outside: the mandate form asked for a `mer_…` id, which an owner finds nowhere on the page). A merchant not in
// the list is still typed, by its id or its verified domain.
import type { JSX } from 'preact';
import { ok, type Api, type Schemas } from '../api.ts';
import { useConsole, useLoad } from '../ui.tsx';

/** A merchant the picker offers: its id, which a budget names, and what a person knows it by. */
export interface KnownMerchant {
  id: string;
  name?: string;
  domain?: string;
  /** Its domain is verified, so a budget may be given that domain for its id (`merchantIdOf`). */
  verified: boolean;
}

/** One page of each source: the picker offers at most a few hundred merchants, read in four requests. */
const SOURCE_PAGE = 100;
/** The select's value that shows the field for a merchant not in the list. */
export const TYPED = '+typed';

/**
 * The merchants the owner can name from what the API lets it read (no directory of every merchant is open to an
 * owner): those the agent bought from (its newest holds, by the verified domain they were sold under), those any of
 * the owner's agents asked the owner to approve a purchase from, the owner's own merchants, and those the mandate
 * names already. A source that cannot be read is left out; all failing is the picker's load error.
 */
export async function knownMerchants(api: Api, agentId: string, mandate: Schemas['Mandate']): Promise<KnownMerchant[]> {
  const found = new Map<string, KnownMerchant>();
  const add = (merchant: KnownMerchant) => {
    const before = found.get(merchant.id);
    found.set(merchant.id, { id: merchant.id, name: before?.name ?? merchant.name, domain: before?.domain ?? merchant.domain, verified: (before?.verified ?? false) || merchant.verified });
  };
  for (const usage of mandate.usage) if (usage.merchantId !== undefined) add({ id: usage.merchantId, name: usage.merchantName, verified: false });
  const sources = await Promise.allSettled([
    api.GET('/v1/merchants', { params: { query: { limit: SOURCE_PAGE } } }).then(ok),
    api.GET('/v1/owner/approvals', { params: { query: { status: 'all', limit: SOURCE_PAGE } } }).then(ok),
    api.GET('/v1/owner/agents/{agentId}/holds', { params: { path: { agentId }, query: { limit: SOURCE_PAGE, order: 'desc', expand: 'offer' } } }).then(ok),
  ]);
  const [own, approvals, holds] = sources;
  if (own.status === 'fulfilled') for (const merchant of own.value.merchants) add({ id: merchant.id, name: merchant.name, domain: merchant.domain, verified: merchant.verified });
  if (approvals.status === 'fulfilled') {
    for (const approval of approvals.value.approvals) if (approval.merchant) add({ ...approval.merchant, verified: true });
  }
  if (holds.status === 'fulfilled') {
    for (const hold of holds.value.redemptions) {
      const offer = hold.offer as { merchantId?: unknown; merchantDomain?: unknown } | null | undefined;
      if (typeof offer?.merchantId === 'string' && typeof offer.merchantDomain === 'string') add({ id: offer.merchantId, domain: offer.merchantDomain, verified: true });
    }
  }
  const failed = sources.find((source) => source.status === 'rejected');
  if (found.size === 0 && failed) throw failed.reason;
  return [...found.values()].sort((a, b) => merchantLabel(a).localeCompare(merchantLabel(b)));
}

/** "Ada Books (books.example.com)", or what is known of it. */
export function merchantLabel(merchant: KnownMerchant): string {
  if (merchant.name !== undefined && merchant.domain !== undefined) return `${merchant.name} (${merchant.domain})`;
  return merchant.name ?? merchant.domain ?? merchant.id;
}

/**
 * The id a budget names for what was typed: the text itself, or, for the verified domain of exactly one merchant in
 * the list, that merchant's id (a budget counts purchases by merchant id; the merchant rules take domains too). A
 * domain the list does not know is sent as typed, and the gateway's refusal names the id to use.
 */
export function merchantIdOf(typed: string, merchants: readonly KnownMerchant[]): string {
  const text = typed.trim();
  const domain = text.toLowerCase();
  const onDomain = merchants.filter((merchant) => merchant.verified && merchant.domain === domain);
  return onDomain.length === 1 && !merchants.some((merchant) => merchant.id === text) ? onDomain[0]!.id : text;
}

/** The merchants of one agent's picker, read only while a budget of its form covers one merchant. */
export function useKnownMerchants(agentId: string, mandate: Schemas['Mandate'], wanted: boolean) {
  const { api } = useConsole();
  return useLoad(async () => (wanted ? knownMerchants(api, agentId, mandate) : undefined), [agentId, mandate.version, wanted]);
}

/**
 * A merchant budget's merchant: a select of the known merchants (a native select: its label, the keyboard and the
 * type-ahead a person expects), and "Another merchant" for one not in it, which shows a field for its id or domain.
 * `field` ties the control the person uses to the form's problems.
 */
export function MerchantPicker(props: {
  label: string;
  value: string;
  typed: boolean;
  merchants: readonly KnownMerchant[];
  loading: boolean;
  /** The list could not be read at all: only a typed merchant can be named. */
  unreadable: boolean;
  field: Record<string, string | undefined>;
  onChange: (change: { scopeValue: string; typed: boolean }) => void;
}): JSX.Element {
  const { label, value, typed, merchants, loading, unreadable, field, onChange } = props;
  const listed = !typed && merchants.some((merchant) => merchant.id === value);
  const choice = listed ? value : typed || value !== '' ? TYPED : '';
  return (
    <>
      <label>
        {label}
        <select
          {...(choice === TYPED ? {} : field)}
          value={choice}
          onChange={(event) => {
            const picked = (event.currentTarget as HTMLSelectElement).value;
            onChange(picked === TYPED ? { scopeValue: listed ? '' : value, typed: true } : { scopeValue: picked, typed: false });
          }}
        >
          <option value="">{loading ? 'Choose a merchant (loading the list…)' : unreadable ? 'Choose a merchant (the list could not be read)' : merchants.length === 0 ? 'Choose a merchant (none known yet)' : 'Choose a merchant'}</option>
          {merchants.map((merchant) => (
            <option value={merchant.id}>{merchantLabel(merchant)}</option>
          ))}
          <option value={TYPED}>Another merchant: type its id or domain</option>
        </select>
      </label>
      {choice === TYPED ? (
        <label>
          {label} id or domain
          <input {...field} value={value} onInput={(event) => onChange({ scopeValue: (event.currentTarget as HTMLInputElement).value, typed: true })} autocomplete="off" />
          <span class="hint">Its id (mer_…), or the domain it verified.</span>
        </label>
      ) : null}
    </>
  );
}
