// Shared by the live tests: one fenec-server per test file, or the reason the file is skipped.
import { after, before } from 'node:test';
import { liveSkipReason, startServer } from './server.mjs';

export const skip = liveSkipReason() ?? false;
if (skip) console.log(`# SKIP live tests: ${skip}`);

/** Starts a server before the file's tests and stops it after; `server.url` once started. */
export function liveServer() {
  const server = { url: undefined, handle: undefined };
  if (skip) return server;
  before(async () => {
    server.handle = await startServer();
    server.url = server.handle.url;
  });
  after(async () => {
    await server.handle?.stop();
  });
  return server;
}
