// Coalesced reads: concurrent lookups of one kind (a credential's row on every request) become one
// statement per round (`WHERE id = ANY(…)`) instead of one each, the read-side twin of group commit. With no
// read running, a lookup is asked at once (an idle gateway waits for nothing); while reads run, lookups
// gather for the next one. A lookup never joins a read already sent: the read that answers it starts after
// it was asked, so it sees every change (a revocation, a freeze) committed before the request arrived.
import { starter } from './next-turn.ts';

export interface CoalescerLimits {
  /** Reads running at once. */
  inFlightMax: number;
  /** Keys in one read. */
  batchMax: number;
  /** Start a read only after one turn of the event loop (an embedded database: see BatchLimits.gatherOneTurn). */
  gatherOneTurn?: boolean;
}

interface Waiting<K, V> {
  key: K;
  id: string;
  resolve: (value: V | undefined) => void;
  reject: (error: unknown) => void;
}

export class ReadCoalescer<K, V> {
  private readonly waiting: Array<Waiting<K, V>> = [];
  private inFlight = 0;
  private readonly next = starter(() => this.pump(), () => this.limits.gatherOneTurn);

  constructor(
    /** Reads many keys in one statement; the map holds what was found, by `idOf`. */
    private readonly readMany: (keys: readonly K[]) => Promise<Map<string, V>>,
    private readonly idOf: (key: K) => string,
    private readonly limits: CoalescerLimits = { inFlightMax: 2, batchMax: 256 },
  ) {}

  read(key: K): Promise<V | undefined> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ key, id: this.idOf(key), resolve, reject });
      this.next();
    });
  }

  private pump(): void {
    while (this.inFlight < this.limits.inFlightMax && this.waiting.length > 0) {
      const round = this.waiting.splice(0, this.limits.batchMax);
      const keys = [...new Map(round.map((entry) => [entry.id, entry.key])).values()];
      this.inFlight += 1;
      this.readMany(keys).then(
        (found) => {
          for (const entry of round) entry.resolve(found.get(entry.id));
        },
        (error: unknown) => {
          for (const entry of round) entry.reject(error);
        },
      ).finally(() => {
        this.inFlight -= 1;
        this.next();
      });
    }
  }
}
