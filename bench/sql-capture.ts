// The gateway's own SQL, captured rather than transcribed: a small TCP relay between the gateway and
// PostgreSQL reads the frontend protocol (simple queries, Parse and Bind with their text parameters) while a
// few mints run one at a time, and turns the statements of one mint into a pgbench script. It follows the code
// as it changes: whatever a mint sends today is what pgbench replays.
import net from 'node:net';
import path from 'node:path';

/** One statement as the gateway sent it: its text, and its parameters in text form (undefined: simple query). */
export interface CapturedStatement {
  connection: number;
  text: string;
  params?: Array<string | null>;
}

export interface SqlRelay {
  url: string;
  /** Starts recording; the returned function stops it and gives what was sent meanwhile, in order. */
  record(): () => CapturedStatement[];
  close(): Promise<void>;
}

const SSL_REQUEST_CODE = 80877103;
const GSSENC_REQUEST_CODE = 80877104;
const CSTRING_END = 0;

function cstring(buffer: Buffer, offset: number): [string, number] {
  const end = buffer.indexOf(CSTRING_END, offset);
  return [buffer.toString('utf8', offset, end), end + 1];
}

/** Reads one connection's frontend messages and reports each statement it executes. */
function frontendReader(connection: number, onStatement: (s: CapturedStatement) => void): (chunk: Buffer) => void {
  let pending: Buffer = Buffer.alloc(0);
  let startup = true;
  const parsed = new Map<string, string>();
  const portals = new Map<string, CapturedStatement>();
  const message = (type: number, body: Buffer) => {
    if (type === 0x51 /* Q */) {
      onStatement({ connection, text: cstring(body, 0)[0] });
    } else if (type === 0x50 /* P */) {
      const [name, next] = cstring(body, 0);
      parsed.set(name, cstring(body, next)[0]);
    } else if (type === 0x42 /* B */) {
      let [portal, at] = cstring(body, 0);
      let statement: string;
      [statement, at] = cstring(body, at);
      const formatCount = body.readInt16BE(at);
      at += 2;
      const formats = Array.from({ length: formatCount }, (_, i) => body.readInt16BE(at + 2 * i));
      at += 2 * formatCount;
      const paramCount = body.readInt16BE(at);
      at += 2;
      const params: Array<string | null> = [];
      for (let i = 0; i < paramCount; i++) {
        const length = body.readInt32BE(at);
        at += 4;
        if (length < 0) {
          params.push(null);
          continue;
        }
        const format = formats.length === 1 ? formats[0] : (formats[i] ?? 0);
        // node-postgres sends every parameter as text unless it is a Buffer; a binary one cannot be replayed.
        params.push(format === 0 ? body.toString('utf8', at, at + length) : `\\x${body.toString('hex', at, at + length)}`);
        at += length;
      }
      portals.set(portal, { connection, text: parsed.get(statement) ?? '', params });
    } else if (type === 0x45 /* E */) {
      const statement = portals.get(cstring(body, 0)[0]);
      if (statement) onStatement(statement);
    }
  };
  return (chunk) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    for (;;) {
      if (startup) {
        if (pending.length < 8) return;
        const length = pending.readInt32BE(0);
        if (pending.length < length) return;
        const code = pending.readInt32BE(4);
        startup = code === SSL_REQUEST_CODE || code === GSSENC_REQUEST_CODE;
        pending = pending.subarray(length);
        continue;
      }
      if (pending.length < 5) return;
      const length = pending.readInt32BE(1);
      if (pending.length < 1 + length) return;
      message(pending[0]!, pending.subarray(5, 1 + length));
      pending = pending.subarray(1 + length);
    }
  };
}

/** A relay in front of the PostgreSQL at `databaseUrl`; the gateway connects to `relay.url` instead. */
export async function startSqlRelay(databaseUrl: string): Promise<SqlRelay> {
  const target = new URL(databaseUrl);
  // A `host` parameter that is a directory names PostgreSQL's Unix-domain socket there (libpq's rule).
  const socketDir = target.searchParams.get('host');
  const port = Number(target.port || 5432);
  const connectUpstream = () => (socketDir?.startsWith('/') ? net.connect(path.join(socketDir, `.s.PGSQL.${port}`)) : net.connect(port, target.hostname));
  let recording: CapturedStatement[] | undefined;
  let connections = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const id = ++connections;
    const upstream = connectUpstream();
    sockets.add(client).add(upstream);
    const read = frontendReader(id, (statement) => recording?.push(statement));
    let readable = true;
    client.on('data', (chunk: Buffer) => {
      // Traffic it cannot read (TLS after an SSLRequest the server accepted) is relayed, just not recorded.
      if (readable) {
        try {
          read(chunk);
        } catch {
          readable = false;
        }
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => client.write(chunk));
    const close = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('close', close).on('error', close);
    upstream.on('close', close).on('error', close);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const relayUrl = new URL(databaseUrl);
  relayUrl.hostname = '127.0.0.1';
  relayUrl.port = String((server.address() as net.AddressInfo).port);
  relayUrl.searchParams.delete('host');
  return {
    url: relayUrl.toString(),
    record() {
      const statements: CapturedStatement[] = [];
      recording = statements;
      return () => {
        recording = undefined;
        return statements;
      };
    },
    close() {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
