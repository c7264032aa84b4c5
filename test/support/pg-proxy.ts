// A TCP proxy in front of PostgreSQL that can cut one connection exactly at its COMMIT, to make a
// commit whose outcome the client never learns: cut after the server received the COMMIT (it commits,
// the client hears nothing), or before (nothing commits).
import { connect, createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

/** The simple-protocol message pg sends for `query('COMMIT')`: 'Q', int32 length, "COMMIT\0". */
const COMMIT_MESSAGE = Buffer.concat([Buffer.from('Q'), Buffer.from([0, 0, 0, 11]), Buffer.from('COMMIT\0')]);

export type CommitCut = 'after-commit-sent' | 'before-commit-sent';

export interface PgProxy {
  url: string;
  /** The next COMMIT of a transaction that sent `marker` (a piece of its SQL) is cut as `when` says. */
  cutNextCommit(marker: string, when: CommitCut): void;
  close(): Promise<void>;
}

export async function startPgProxy(target: { host: string; port: number }, database = 'postgres'): Promise<PgProxy> {
  let armed: { marker: Buffer; when: CommitCut } | undefined;
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(target.port, target.host);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => {});
    }
    let markerSeen = false;
    let swallowing = false;
    upstream.on('data', (chunk) => {
      if (swallowing) upstream.end(); // the server answered the COMMIT nobody will hear
      else client.write(chunk);
    });
    client.on('data', (chunk) => {
      if (armed && chunk.includes(armed.marker)) markerSeen = true;
      if (armed && markerSeen && chunk.includes(COMMIT_MESSAGE)) {
        const { when } = armed;
        armed = undefined;
        client.destroy();
        if (when === 'before-commit-sent') {
          upstream.end();
          return;
        }
        swallowing = true;
        upstream.write(chunk);
        return;
      }
      if (chunk.includes(COMMIT_MESSAGE)) markerSeen = false;
      upstream.write(chunk);
    });
    client.on('close', () => {
      if (!swallowing) upstream.end();
    });
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `postgres://postgres@127.0.0.1:${port}/${database}`,
    cutNextCommit(marker, when) {
      armed = { marker: Buffer.from(marker), when };
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
