// Shared by the live tests: one fenec-server per test file, or the reason the file is skipped.
import { after, before } from 'node:test';
import { GIVEN_URL, liveSkipReason, startServer } from './server.mjs';

export const skip = liveSkipReason() ?? false;
if (skip) console.log(`# SKIP live tests: ${skip}`);

/** Starts a server before the file's tests and stops it after; `server.url` once started. With FENEC_TEST_URL
 * set, that server instead, neither started nor stopped here. */
export function liveServer() {
  const server = { url: GIVEN_URL, handle: undefined };
  if (skip || GIVEN_URL) return server;
  before(async () => {
    server.handle = await startServer();
    server.url = server.handle.url;
  });
  after(async () => {
    await server.handle?.stop();
  });
  return server;
}
