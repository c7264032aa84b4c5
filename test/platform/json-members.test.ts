// The scan that finds a member name repeated in one JSON object, or nesting too deep (src/platform/http/json-members.ts).
import { describe, expect, it } from 'vitest';
import { findJsonShapeProblem, NESTING_DEPTH_MAX, type PathStyle } from '../../src/platform/http/json-members.ts';

const findDuplicateMember = (text: string, rootPath: string, style?: PathStyle) => findJsonShapeProblem(text, rootPath, style)?.path;

describe('nesting', () => {
  const nested = (depth: number, open = '{"a":', close = '}') => `${open.repeat(depth - 1)}{}${close.repeat(depth - 1)}`;

  it(`reads ${NESTING_DEPTH_MAX} levels of objects and arrays, and names the outermost member of a deeper nesting`, () => {
    expect(findJsonShapeProblem(nested(NESTING_DEPTH_MAX), 'body')).toBeUndefined();
    expect(findJsonShapeProblem(`{"x":${nested(NESTING_DEPTH_MAX - 1)}}`, 'body')).toBeUndefined();
    const deep = findJsonShapeProblem(`{"ok":1,"extra":${nested(NESTING_DEPTH_MAX)}}`, 'body', 'slashes');
    expect(deep?.path).toBe('body/extra');
    expect(deep?.detail).toBe(`body/extra nests objects and arrays more than ${NESTING_DEPTH_MAX} levels deep; a JSON body may nest ${NESTING_DEPTH_MAX} at most`);
    expect(findJsonShapeProblem(`[${'['.repeat(5000)}${']'.repeat(5000)}]`, 'body', 'slashes')?.path).toBe('body/0');
    expect(findJsonShapeProblem(`{"params":${nested(2000)}}`, '')?.path).toBe('params');
    // A JSON-RPC message names the argument: three levels in.
    expect(findJsonShapeProblem(`{"jsonrpc":"2.0","params":{"name":"t","arguments":{"ok":1,"x":${nested(200)}}}}`, '', 'dotted', 3)?.path).toBe('params.arguments.x');
  });

  it('counts brackets inside strings as text, not nesting', () => {
    expect(findJsonShapeProblem(JSON.stringify({ a: '['.repeat(1000) + '{'.repeat(1000) }), 'body')).toBeUndefined();
  });
});

describe('findDuplicateMember', () => {
  it('names the first repeated member by its path, at any depth, in objects and arrays', () => {
    expect(findDuplicateMember('{"a":1,"a":2}', 'body')).toBe('body.a');
    expect(findDuplicateMember('{"a":{"b":1,"c":{"d":[1,{"e":1,"e":2}]}}}', 'body')).toBe('body.a.c.d[1].e');
    expect(findDuplicateMember('[{"a":1},{"b":1},{"c":1,"c":1}]', 'body')).toBe('body[2].c');
    expect(findDuplicateMember('{"params":{"arguments":{"x":1,"x":1}}}', '')).toBe('params.arguments.x');
  });

  it('compares names as they decode, escapes included', () => {
    expect(findDuplicateMember('{"a":1,"\\u0061":2}', 'body')).toBe('body.a');
    expect(findDuplicateMember('{"a\\"b":1,"a\\u0022b":2}', 'body')).toBe('body.a"b');
    expect(findDuplicateMember('{"a\\\\":1,"a":2}', 'body')).toBeUndefined();
  });

  it('finds nothing where no object repeats a name', () => {
    for (const text of [
      '{}',
      '[]',
      '"a"',
      '12',
      'null',
      '{"a":"a","b":["a","a"],"c":{"a":1},"d":[{"a":1},{"a":1}]}',
      '{"a":"{\\"a\\":1,\\"a\\":2}"}',
      '{ "a" : [ 1 , 2 ] , "b" : { "a" : { } } }',
      '{"a,":1,"a":2,"[":3,"{":4}',
    ]) {
      expect(findDuplicateMember(text, 'body'), text).toBeUndefined();
    }
  });

  it('agrees with a reference that parses every object, over random documents', () => {
    // A reference: walk the text with a real tokenizer built on JSON.parse of each member-name token.
    const names = ['a', 'b', 'a\\u0062', '\\"', ',', '{'];
    let seed = 7;
    const random = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const value = (depth: number): [string, boolean] => {
      const kind = depth > 3 ? random(2) : random(4);
      if (kind === 0) return [String(random(100)), false];
      if (kind === 1) return [JSON.stringify(names[random(names.length)]), false];
      if (kind === 2) {
        const items = Array.from({ length: random(4) }, () => value(depth + 1));
        return [`[${items.map(([t]) => t).join(',')}]`, items.some(([, d]) => d)];
      }
      const members = Array.from({ length: random(4) }, () => [names[random(names.length)]!, value(depth + 1)] as const);
      const decoded = members.map(([name]) => JSON.parse(`"${name}"`) as string);
      const repeated = new Set(decoded).size < decoded.length;
      return [`{${members.map(([name, [t]]) => `"${name}":${t}`).join(',')}}`, repeated || members.some(([, [, d]]) => d)];
    };
    for (let run = 0; run < 2000; run++) {
      const [text, hasDuplicate] = value(0);
      JSON.parse(text);
      expect(findDuplicateMember(text, 'body') !== undefined, text).toBe(hasDuplicate);
    }
  });
});
