// The gateway's release, as package.json names it: what the OpenAPI document's `info.version` and the MCP server's
// `serverInfo.version` say (found from outside: the document said 1.0.0 of a 0.1.0 package). A test holds it equal
// to package.json's `version` (test/docs.test.ts), so a release changes both together.
export const GATEWAY_VERSION = '0.1.0';
