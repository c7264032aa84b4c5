// Refuses JSON whose object repeats a member name. RFC 8259 §4 leaves such an object's meaning to the parser
// ("SHOULD be unique"; JSON.parse keeps the last), and I-JSON (RFC 7493 §2.3) forbids it: two parsers on the
// path of one request (a proxy or an SDK that keeps the first, the gateway that keeps the last) would read
// another amount or another target from the same bytes. Every JSON body of a route and every MCP message is
// checked, after it parsed, so a refusal is a 400 that names the member, and nothing runs.

/** Where a scan stands inside one open object or array. */
interface Container {
  /** The member names seen so far; null in an array. */
  names: Set<string> | null;
  path: string;
  /** In an object: whether the next string is a member name. In an array: the next element's index. */
  expectingName: boolean;
  index: number;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** How a path is written: as the REST API's validation errors name a member (`body/items/2/name`), or dotted, as `/mcp` does (`params.arguments.items[2].name`). */
export type PathStyle = 'slashes' | 'dotted';

/** The path of `name` in `parent`, and of its element `index`, in a style. */
export function memberPath(parent: string, name: string, style: PathStyle): string {
  if (parent === '') return name;
  return style === 'slashes' ? `${parent}/${name}` : `${parent}.${name}`;
}
export function elementPath(parent: string, index: number | string, style: PathStyle): string {
  return style === 'slashes' ? `${parent}/${index}` : `${parent}[${index}]`;
}

/**
 * The path (from `rootPath`, e.g. `body.items[2].name`; from '', `items[2].name`; with slashes, `body/items/2/name`) of the first
 * member whose name its object already had, if any. `text` must be JSON that parsed: the scan trusts its syntax and only tracks strings and nesting.
 */
export function findDuplicateMember(text: string, rootPath: string, style: PathStyle = 'dotted'): string | undefined {
  const open: Container[] = [];
  // The path of the value about to start: a member's, an element's, or the root's.
  let valuePath = rootPath;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      let end = i + 1;
      let escaped = false;
      while (text.charCodeAt(end) !== QUOTE) {
        if (text.charCodeAt(end) === BACKSLASH) {
          escaped = true;
          end += 1;
        }
        end += 1;
      }
      const top = open.at(-1);
      if (top?.names && top.expectingName) {
        // A name with escapes is compared as it decodes ("\u0061" and "a" are one name).
        const name = escaped ? (JSON.parse(text.slice(i, end + 1)) as string) : text.slice(i + 1, end);
        valuePath = memberPath(top.path, name, style);
        if (top.names.has(name)) return valuePath;
        top.names.add(name);
        top.expectingName = false;
      }
      i = end;
    } else if (c === 0x7b /* { */) {
      open.push({ names: new Set(), path: valuePath, expectingName: true, index: 0 });
    } else if (c === 0x5b /* [ */) {
      open.push({ names: null, path: valuePath, expectingName: false, index: 0 });
      valuePath = elementPath(valuePath, 0, style);
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      open.pop();
    } else if (c === 0x2c /* , */) {
      const top = open.at(-1)!;
      if (top.names) top.expectingName = true;
      else valuePath = elementPath(top.path, ++top.index, style);
    }
  }
  return undefined;
}

/** What a refusal of a repeated member says, wherever it is refused (the HTTP edge, `/mcp`). */
export function duplicateMemberDetail(path: string): string {
  return `${path} appears twice in one object; a member name may appear once (RFC 7493 §2.3), as another reader could take either value`;
}
