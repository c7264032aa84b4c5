// The gateway's icon, answered at /favicon.ico: every browser asks for it on every page of this origin (the
// console, the landing page, the consent and error pages), and a 404 there is a red line in every owner's
// developer tools. A 32×32 PNG (browsers read a PNG under that name): a rounded square in the console's accent
// colour with a white coin in it, drawn here once rather than kept as a binary file in the repository.
import { crc32, deflateSync } from 'node:zlib';

const SIZE = 32;
const ACCENT = [0x05, 0x50, 0xae] as const; // console.css --accent
const WHITE = [0xff, 0xff, 0xff] as const;

/** Where the pixel at (x, y) falls: inside the rounded square; on the coin (its rim and its middle). */
function shapes(x: number, y: number): { square: boolean; coin: boolean } {
  const cx = x + 0.5 - SIZE / 2;
  const cy = y + 0.5 - SIZE / 2;
  const half = SIZE / 2;
  const radius = 6;
  const dx = Math.max(Math.abs(cx) - (half - radius), 0);
  const dy = Math.max(Math.abs(cy) - (half - radius), 0);
  const square = dx * dx + dy * dy <= radius * radius;
  const distance = Math.hypot(cx, cy);
  const coin = (distance <= 10 && distance >= 7.5) || distance <= 4;
  return { square, coin };
}

function chunk(type: string, data: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, 'latin1'), data]);
  const check = Buffer.alloc(4);
  check.writeUInt32BE(crc32(body));
  return Buffer.concat([length, body, check]);
}

function drawIcon(): Buffer {
  const rows: Buffer[] = [];
  for (let y = 0; y < SIZE; y++) {
    const row = Buffer.alloc(1 + SIZE * 4); // filter byte 0 (none), then RGBA
    for (let x = 0; x < SIZE; x++) {
      const { square, coin } = shapes(x, y);
      const colour = coin ? WHITE : ACCENT;
      row.set([...colour, square ? 0xff : 0x00], 1 + x * 4);
    }
    rows.push(row);
  }
  const header = Buffer.alloc(13);
  header.writeUInt32BE(SIZE, 0);
  header.writeUInt32BE(SIZE, 4);
  header.set([8, 6, 0, 0, 0], 8); // 8 bits a channel, RGBA, deflate, adaptive filtering, no interlace
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', header),
    chunk('IDAT', deflateSync(Buffer.concat(rows))),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

let icon: Buffer | undefined;

/** The icon's PNG bytes, drawn on first use. */
export function favicon(): Buffer {
  return (icon ??= drawIcon());
}
