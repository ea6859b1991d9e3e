/**
 * `@fenecdb/web/client`: the HTTP client and the immutable FenecQL builder, with no engine.
 * The names exported here are the agreed surface (clients.md §3.1); test/surface.test.mjs fails
 * when one slips in or out.
 */
export { connect, FenecHttp } from './http.js';
export type { BatchItem, BatchResult, BatchStatement, ConnectOptions, ReadFrom, RunOptions, RunResult } from './http.js';
export { from, Query } from './query.js';
export type { Doc, InsertOptions, ReadOptions, Row, Statement, WriteOptions } from './query.js';
export { raw, or, and, not, Cond } from './conditions.js';
export type { CondInput } from './conditions.js';
export { expr, inc, Expr, Inc } from './values.js';
export type { Computed } from './values.js';
export { FenecError } from './errors.js';
export type { FenecCode, FenecErrorDetails } from './errors.js';
export { Worker, Job } from './worker.js';
export type { ClaimOptions, EnqueueOptions, FailOptions, JobHandler, JobState, WorkerRunOptions, WorkerEvent, WorkerOptions } from './worker.js';
