// Refuses JSON whose object repeats a member name. RFC 8259 §4 leaves such an object's meaning to the parser
// ("SHOULD be unique"; JSON.parse keeps the last), and I-JSON (RFC 7493 §2.3) forbids it: two parsers on the
// path of one request (a proxy or an SDK that keeps the first, the gateway that keeps the last) would read
// another amount or another target from the same bytes. And JSON nested deeper than NESTING_DEPTH_MAX: what
// reads a body recursively (a copy, a canonical form, a schema's defaults) would run out of stack on it, a 500
// for bad input (found from outside: 2,000 nested objects in an x402 payload's `extra`). Every JSON body of a
// route and every MCP message is checked, after it parsed, so a refusal is a 400 that names the member, and
// nothing runs.

/** How deep objects and arrays may nest in a body: serde_json's recursion limit, far past any body of the API. */
export const NESTING_DEPTH_MAX = 128;

/** What is wrong with a body's shape, and where: the member (a refusal's `pointer`) and a sentence that says it. */
export interface JsonShapeProblem {
  path: string;
  detail: string;
}

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

/** Where a refusal's path of one part of a request starts, and how it goes on. */
export interface MemberNaming {
  root: string;
  style: PathStyle;
}

/**
 * How a refusal names a member of a request's part (`body`, `querystring`, `params`, `headers`): under /oauth/ as OAuth names its parameters, bare and dotted
 * (`client_name`, `redirect_uris[0]`, as RFC 7591's and the token endpoint's own checks write them; found from
 * outside, bb119: a registration answered `body/client_name …` beside `redirect_uris[0] …`); elsewhere as the REST
 * API's validation errors do (`body/items/2/name`). Headers and path parameters keep their part's name.
 */
export function memberNaming(oauth: boolean, part: string): MemberNaming {
  if (!oauth) return { root: part, style: 'slashes' };
  return { root: part === 'body' || part === 'querystring' ? '' : part, style: 'dotted' };
}

/** The path of a JSON Pointer (`/items/2/name`, a schema violation's instancePath) from a naming's root; the part's name for the root itself. */
export function pointerPath(naming: MemberNaming, pointer: string, part: string): string {
  const segments = pointer.split('/').slice(1);
  const path = segments.reduce((parent, segment) => (/^\d+$/.test(segment) ? elementPath(parent, segment, naming.style) : memberPath(parent, segment, naming.style)), naming.root);
  return path === '' ? part : path;
}

/** The path of `name` in `parent`, and of its element `index`, in a style. */
export function memberPath(parent: string, name: string, style: PathStyle): string {
  if (parent === '') return name;
  return style === 'slashes' ? `${parent}/${name}` : `${parent}.${name}`;
}
export function elementPath(parent: string, index: number | string, style: PathStyle): string {
  return style === 'slashes' ? `${parent}/${index}` : `${parent}[${index}]`;
}

/**
 * The first member whose name its object already had, or the member that nests past NESTING_DEPTH_MAX, if any, with
 * its path (from `rootPath`, e.g. `body.items[2].name`; from '', `items[2].name`; with slashes, `body/items/2/name`).
 * A nesting too deep is named by its member `namedAtLevel` levels in: 1, a body's own member; 3 for a JSON-RPC message,
 * the argument inside `params.arguments` (found from outside: `params` named the whole call). `text` must be JSON
 * that parsed: the scan trusts its syntax and only tracks strings and nesting.
 */
export function findJsonShapeProblem(text: string, rootPath: string, style: PathStyle = 'dotted', namedAtLevel = 1): JsonShapeProblem | undefined {
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
        if (top.names.has(name)) return { path: valuePath, detail: duplicateMemberDetail(valuePath) };
        top.names.add(name);
        top.expectingName = false;
      }
      i = end;
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (open.length === NESTING_DEPTH_MAX) return tooDeep(open[namedAtLevel]?.path ?? valuePath);
      if (c === 0x7b) open.push({ names: new Set(), path: valuePath, expectingName: true, index: 0 });
      else {
        open.push({ names: null, path: valuePath, expectingName: false, index: 0 });
        valuePath = elementPath(valuePath, 0, style);
      }
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

/** The outermost member of a nesting too deep (the whole body's root where the root itself is the deep array). */
function tooDeep(path: string): JsonShapeProblem {
  const what = path === '' ? 'the message' : path;
  return { path, detail: `${what} nests objects and arrays more than ${NESTING_DEPTH_MAX} levels deep; a JSON body may nest ${NESTING_DEPTH_MAX} at most` };
}

/** What a refusal of a repeated member says, wherever it is refused (the HTTP edge, `/mcp`). */
function duplicateMemberDetail(path: string): string {
  return `${path} appears twice in one object; a member name may appear once (RFC 7493 §2.3), as another reader could take either value`;
}
